import type { ExecutionContext, LoggerService } from '@nestjs/common';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type { LockErrorBody } from './http/http-options.js';
import { DEFAULT_RETRY_AFTER_SECONDS, validateRetryAfter } from './http/http-options.js';
import { InvalidArgumentError, type LockError, type LockLostError } from './lock.errors.js';
import {
  DEFAULT_LEASE,
  type Fairness,
  LEASE_DEFAULTS_KEYS,
  type LeaseDefaults,
  type ModuleDefaults,
  resolveLease,
  validateFairness,
  validateLeaseTtl,
} from './options/call-options.js';
import { driftMargin, duration } from './options/durations.js';
import { keysOf, optionNames } from './options/option-names.js';
import { describe, isPlainObject, isWellFormed, rejectUnknownNames, validateBoolean } from './options/validation.js';
import { isClusterOption, type RedisClusterOption, validateRedisOption } from './store/redis/redis-options.js';
import { type RedlockOptions, resolveRedlock, type ResolvedRedlockOptions } from './store/redlock/redlock-options.js';
import type { LockStore } from './store/store.js';

export interface LockModuleOptions {
  /**
   * Redis URL, ioredis options (Sentinel's `{ sentinels, name }` included), `{ cluster: { nodes,
   * options } }` for a Redis Cluster the module connects to, or an existing ioredis client / cluster.
   * Without it — or `undefined`, as an unset `process.env.REDIS_URL` is — the module uses the
   * embedded memory store (one process only), and says so at start. A client passed in is never
   * closed by the module.
   */
  redis?: string | RedisOptions | RedisClusterOption | Redis | Cluster | undefined;
  /**
   * Which store to use, said on purpose: `'memory'` is the embedded store without the start-up
   * warning (unit tests, one-process tools), and cannot be combined with `redis`; `'redis'` refuses
   * to start without `redis` (a missing `REDIS_URL` then fails at bootstrap instead of falling back
   * to process-local locks); or a store of your own, any object that keeps the `LockStore` contract
   * (docs/ARCHITECTURE.md, "Adding a store"), which the module uses as it is and never closes.
   * Default: Redis when `redis` is given, else the memory store.
   */
  store?: 'memory' | 'redis' | LockStore;
  /**
   * Redlock over independent Redis masters instead of one Redis (`redis`, which it excludes): a lease is
   * granted by a quorum of `nodes`. See docs/API.md, "Redlock". Semaphores are refused on it.
   */
  redlock?: RedlockOptions;
  /** Prefix of every Redis key the library writes. */
  keyPrefix?: string;
  /**
   * How long a key's fence counter stays in Redis after the last fence drawn from it (ms, ≥ 1,000;
   * default an hour). A fence drawn after that is the server clock in µs, far above every earlier
   * fence of the key unless the clock went back by more than this meanwhile (docs/API.md, "Fences").
   */
  fenceCounterTtl?: number;
  /** Defaults of every lock and permit; each call may override them. */
  defaults?: Partial<LeaseDefaults> & {
    /** Whether `withLock`, `withPermit` and the decorators renew their lease while they run (default `true`). */
    autoExtend?: boolean;
    /** In which order waiters are served: `true` (default), `'strict'` or `false` (see `LockOptions.fair`). */
    fair?: Fairness;
  };
  /**
   * Longest time one store command may take before it fails with `LockBackendError`,
   * so that a stopped or unreachable Redis never makes a caller hang.
   */
  commandTimeout?: number;
  /**
   * Against a failover losing a fresh lease, and a failed-over primary that wakes up granting
   * leases again (Sentinel, or a primary with replicas): after every granted attempt and every
   * lease handed over, `WAIT replicas timeout`; a lease fewer replicas acknowledged is given back
   * and the wait goes on (so a primary with fewer replicas grants nothing). One Redis with
   * replicas only: not with a cluster, nor Redlock; `timeout` below `commandTimeout`.
   */
  waitForReplicas?: { replicas: number; timeout: number };
  /**
   * Told once about every lease lost while it was being renewed or held by `withLock`,
   * `withPermit` or a decorator (renewal found it gone or taken, or could not renew it in
   * time). It is logged as well; what the hook throws is logged, never rethrown.
   */
  onLockLost?: (error: LockLostError) => void;
  /**
   * Whether nest-lock's errors become HTTP answers wherever they surface in a request — a decorator on
   * the route handler, on a provider method it calls, or `LockService` called by hand (a global
   * interceptor, `LockInterceptor`): a busy lock 409, no permit or the store away 503 with
   * `Retry-After`, a key made of the request's input that is not a valid key 400, any other of
   * nest-lock's errors 500 with one log line. Errors that are not nest-lock's pass through. `false`
   * leaves nest-lock's errors to the application's own filters. Default `true`.
   */
  httpErrors?: boolean;
  /**
   * Seconds in the `Retry-After` header of the 503 answers (no permit, or the store failed); a
   * decorator's own `retryAfter` wins. Default 1.
   */
  retryAfter?: number;
  /**
   * Shapes the JSON body of every answer `LockInterceptor` gives for the decorators' errors
   * (409, 503, 400): it receives the default body, the error and the request's context, and
   * returns the body to send: a JSON object (not a promise). The status and `Retry-After` stay as they
   * are; a hook that throws, or returns anything else, leaves the default body.
   */
  errorBody?: (body: LockErrorBody, error: LockError, context: ExecutionContext) => Record<string, unknown>;
  /**
   * Where nest-lock writes what it logs (the memory-store notice, Redis outages and recoveries,
   * lost leases, failed releases, a throwing `onLockLost`, `forceUnlock`): a Nest `LoggerService`,
   * called with nest-lock's context as its last argument, or `false` to log nothing. Default:
   * Nest's `Logger`, which follows the application's logger.
   */
  logger?: LoggerService | false;
}

const DEFAULT_KEY_PREFIX = 'lock:';
const DEFAULT_COMMAND_TIMEOUT = 1_000;
const DEFAULT_AUTO_EXTEND = true;
const DEFAULT_FAIR: Fairness = true;
const DEFAULT_FENCE_COUNTER_TTL = 3_600_000;
/** Below it, a step back of the server clock that NTP makes routinely could reorder fences. */
const SHORTEST_FENCE_COUNTER_TTL = 1_000;

/** Module options after validation, with every default filled in. */
export interface ResolvedModuleOptions {
  redis?: LockModuleOptions['redis'];
  /** As given: `undefined` when the options did not say which store. */
  store?: LockModuleOptions['store'];
  redlock?: ResolvedRedlockOptions;
  keyPrefix: string;
  fenceCounterTtl: number;
  defaults: ModuleDefaults;
  commandTimeout: number;
  waitForReplicas?: { replicas: number; timeout: number };
  onLockLost?: (error: LockLostError) => void;
  httpErrors: boolean;
  retryAfter: number;
  errorBody?: LockModuleOptions['errorBody'];
  logger?: LockModuleOptions['logger'];
}

// The key objects of the module options (options/option-names.ts): the names their checks know.
const MODULE_OPTIONS_KEYS = keysOf<LockModuleOptions>()({
  redis: true,
  store: true,
  redlock: true,
  keyPrefix: true,
  fenceCounterTtl: true,
  defaults: true,
  commandTimeout: true,
  waitForReplicas: true,
  onLockLost: true,
  httpErrors: true,
  retryAfter: true,
  errorBody: true,
  logger: true,
});
const MODULE_DEFAULTS_KEYS = keysOf<NonNullable<LockModuleOptions['defaults']>>()({
  ...LEASE_DEFAULTS_KEYS,
  autoExtend: true,
  fair: true,
});
const WAIT_FOR_REPLICAS_KEYS = keysOf<NonNullable<LockModuleOptions['waitForReplicas']>>()({
  replicas: true,
  timeout: true,
});
const MODULE_OPTION_NAMES = optionNames(MODULE_OPTIONS_KEYS);
const MODULE_DEFAULTS_OPTION_NAMES = optionNames(MODULE_DEFAULTS_KEYS);
const WAIT_FOR_REPLICAS_OPTION_NAMES = optionNames(WAIT_FOR_REPLICAS_KEYS);

export function resolveModuleOptions(options: LockModuleOptions): ResolvedModuleOptions {
  // `forRoot()` passes `{}`; `undefined` comes only from a `forRootAsync` factory that returned nothing.
  if (!isPlainObject(options)) {
    const hint = options === undefined ? ' (did a forRootAsync factory forget to return them?)' : '';
    throw new InvalidArgumentError('options', `LockModule options must be an object${hint}`);
  }
  rejectUnknownNames('', options, MODULE_OPTION_NAMES);
  const {
    redis,
    store,
    redlock,
    keyPrefix = DEFAULT_KEY_PREFIX,
    fenceCounterTtl = DEFAULT_FENCE_COUNTER_TTL,
    defaults = {},
    commandTimeout = DEFAULT_COMMAND_TIMEOUT,
    waitForReplicas,
    onLockLost,
    httpErrors = true,
    retryAfter = DEFAULT_RETRY_AFTER_SECONDS,
    errorBody,
    logger,
  } = options;

  if (redis !== undefined) {
    validateRedisOption(redis);
  }
  validateStoreChoice(store, redis, redlock);
  if (typeof keyPrefix !== 'string' || /[{}]/.test(keyPrefix) || !isWellFormed(keyPrefix)) {
    // A brace in the prefix would move the hash tag off the user key and split a lock's keys across slots.
    throw new InvalidArgumentError('keyPrefix', 'must be a well-formed string without "{" or "}"');
  }
  if (!isPlainObject(defaults)) {
    throw new InvalidArgumentError('defaults', 'must be an object');
  }
  rejectUnknownNames('defaults.', defaults, MODULE_DEFAULTS_OPTION_NAMES);
  if (onLockLost !== undefined && typeof onLockLost !== 'function') {
    throw new InvalidArgumentError('onLockLost', `must be a function, got ${describe(onLockLost)}`);
  }
  if (errorBody !== undefined && typeof errorBody !== 'function') {
    throw new InvalidArgumentError('errorBody', `must be a function, got ${describe(errorBody)}`);
  }
  validateLogger(logger);
  const lease = resolveLease(DEFAULT_LEASE, defaults, 'defaults.');
  const resolvedRedlock = redlock === undefined ? undefined : resolveRedlock(redlock, lease.ttl);
  validateLeaseTtl(lease.ttl, (ttl) => driftMargin(ttl, resolvedRedlock?.driftFactor), 'defaults.ttl');
  return {
    redis,
    ...(store === undefined ? {} : { store }),
    ...(resolvedRedlock === undefined ? {} : { redlock: resolvedRedlock }),
    keyPrefix,
    fenceCounterTtl: validateFenceCounterTtl(fenceCounterTtl),
    defaults: Object.freeze({
      ...lease,
      autoExtend: validateBoolean(defaults.autoExtend, 'defaults.autoExtend') ?? DEFAULT_AUTO_EXTEND,
      fair: validateFairness(defaults.fair, 'defaults.fair') ?? DEFAULT_FAIR,
    }),
    commandTimeout: duration('commandTimeout', commandTimeout),
    ...(waitForReplicas === undefined
      ? {}
      : { waitForReplicas: validateWaitForReplicas(waitForReplicas, redis, redlock, commandTimeout) }),
    ...(onLockLost ? { onLockLost } : {}),
    httpErrors: validateBoolean(httpErrors, 'httpErrors') ?? true,
    retryAfter: validateRetryAfter(retryAfter),
    ...(errorBody ? { errorBody } : {}),
    ...(logger === undefined ? {} : { logger }),
  };
}

/** `{ replicas ≥ 1, 0 < timeout < commandTimeout }`, with one Redis (not a cluster, not Redlock). */
function validateWaitForReplicas(
  wait: unknown,
  redis: unknown,
  redlock: unknown,
  commandTimeout: number,
): { replicas: number; timeout: number } {
  if (!isPlainObject(wait)) {
    throw new InvalidArgumentError('waitForReplicas', `must be { replicas, timeout }, got ${describe(wait)}`);
  }
  rejectUnknownNames('waitForReplicas.', wait as object, WAIT_FOR_REPLICAS_OPTION_NAMES);
  const { replicas, timeout } = wait as { replicas?: unknown; timeout?: unknown };
  if (typeof replicas !== 'number' || !Number.isInteger(replicas) || replicas < 1) {
    throw new InvalidArgumentError('waitForReplicas.replicas', `must be a whole number ≥ 1, got ${describe(replicas)}`);
  }
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout >= commandTimeout) {
    throw new InvalidArgumentError(
      'waitForReplicas.timeout',
      `must be whole milliseconds ≥ 1 and below commandTimeout (${commandTimeout}), got ${describe(timeout)}`,
    );
  }
  const cluster = isClusterOption(redis) || (redis as { isCluster?: unknown } | undefined)?.isCluster === true;
  if (redis === undefined || cluster || redlock !== undefined) {
    throw new InvalidArgumentError(
      'waitForReplicas',
      'needs one Redis with replicas (the redis option, Sentinel or a primary): not the memory store, a cluster or Redlock',
    );
  }
  return { replicas, timeout };
}

/** A duration of at least `SHORTEST_FENCE_COUNTER_TTL` ms. */
function validateFenceCounterTtl(ttl: unknown): number {
  duration('fenceCounterTtl', ttl);
  if (!Number.isInteger(ttl) || (ttl as number) < SHORTEST_FENCE_COUNTER_TTL) {
    throw new InvalidArgumentError(
      'fenceCounterTtl',
      `must be whole milliseconds, at least ${SHORTEST_FENCE_COUNTER_TTL} (the server clock must never go back by more than it); got ${ttl as number}`,
    );
  }
  return ttl as number;
}

/** `false`, or an object with the methods every Nest `LoggerService` has. */
function validateLogger(logger: unknown): void {
  if (logger === undefined || logger === false) return;
  const isLoggerService =
    typeof logger === 'object' &&
    logger !== null &&
    ['log', 'warn', 'error'].every((method) => typeof (logger as Record<string, unknown>)[method] === 'function');
  if (!isLoggerService) {
    throw new InvalidArgumentError(
      'logger',
      `must be a Nest LoggerService (with log, warn and error methods) or false, got ${describe(logger)}`,
    );
  }
}

/** What every store has: the required members of `LockStore`. */
const REQUIRED_STORE_METHODS = ['acquire', 'release', 'extend', 'fence', 'inspect', 'forceRelease', 'close'] as const;

function validateStoreChoice(store: unknown, redis: unknown, redlock: unknown): void {
  if (typeof store === 'object' && store !== null) {
    const missing = REQUIRED_STORE_METHODS.filter(
      (name) => typeof (store as Record<string, unknown>)[name] !== 'function',
    );
    if (missing.length > 0) {
      throw new InvalidArgumentError('store', `must keep the LockStore contract: it has no ${missing.join(', ')}`);
    }
    if (redis !== undefined || redlock !== undefined) {
      throw new InvalidArgumentError(
        'store',
        'a store of your own cannot be combined with redis or redlock: drop them',
      );
    }
    return;
  }
  if (store !== undefined && store !== 'memory' && store !== 'redis') {
    throw new InvalidArgumentError('store', `must be 'memory', 'redis' or a LockStore, got ${describe(store)}`);
  }
  if (redlock !== undefined && redis !== undefined) {
    throw new InvalidArgumentError('redlock', 'cannot be combined with the redis option: drop one of them');
  }
  if (store === 'memory' && redlock !== undefined) {
    throw new InvalidArgumentError('store', "'memory' cannot be combined with the redlock option: drop one of them");
  }
  if (store === 'memory' && redis !== undefined) {
    throw new InvalidArgumentError('store', "'memory' cannot be combined with a redis option: drop one of them");
  }
  if (store === 'redis' && redis === undefined && redlock === undefined) {
    throw new InvalidArgumentError(
      'redis',
      "store 'redis' needs a redis URL, ioredis options or client, got undefined",
    );
  }
}
