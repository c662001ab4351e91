import type { ExecutionContext, LoggerService } from '@nestjs/common';
import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import { InvalidArgumentError, type LockError, type LockLostError } from './lock.errors.js';

/**
 * The longest duration any option takes: Node's timers overflow above it (and fire at once),
 * so a longer lease on the memory store would be freed after ~1 ms.
 */
export const LONGEST_DURATION = 2 ** 31 - 1;

/** How long a lease lasts and how a caller waits for one. All durations in milliseconds. */
export interface LeaseDefaults {
  /** Lease of a lock or permit; a holder that neither releases nor renews loses it after `ttl`. */
  ttl: number;
  /** Longest wait for a lock or permit; `0` = one attempt, no wait. */
  timeout: number;
  /** First wait between attempts. */
  step: number;
  /** Growth of the wait after each failed attempt (≥ 1). */
  ratio: number;
  /** Cap of the wait between attempts. */
  maxStep: number;
}

/** Per-call options shared by locks and semaphores. */
export interface LeaseOptions extends Partial<LeaseDefaults> {
  /** Aborting it ends the wait; the call rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Renew the lease every `ttl / 3` while it is held. Default: the module's `defaults.autoExtend`
   * (`true`) for `withLock`, `withPermit` and the decorators; `false` for a bare `lock()` /
   * `acquire()`, which nobody may ever release.
   */
  autoExtend?: boolean;
  /**
   * Serve waiters first come, first served across processes, and hand the lease straight to the
   * next one on release. Default: the module's `defaults.fair` (`true`); `false` is the unordered path.
   */
  fair?: boolean;
}

export type SemaphoreOptions = LeaseOptions;

export interface LockOptions extends LeaseOptions {
  /** Owner token to use instead of a fresh random one (e.g. to release from another process). */
  token?: string;
}

/** A Redis Cluster the module connects to: its seed nodes and ioredis `ClusterOptions`. */
export interface RedisClusterOption {
  cluster: {
    /** Seed nodes: `redis://host:port` URLs, or `{ host, port }`. */
    nodes: (string | { host?: string; port: number })[];
    options?: ClusterOptions;
  };
}

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
   * to process-local locks). Default: Redis when `redis` is given, else the memory store.
   */
  store?: 'memory' | 'redis';
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
    /** Whether waiters are served in order of arrival, with the lease handed straight to the next (default `true`). */
    fair?: boolean;
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
   * Seconds in the `Retry-After` header of the 503 answers of decorated routes (no permit, or the
   * store failed); a decorator's own `retryAfter` wins. Default 1.
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

/** `LockModule.forRoot({ redlock })`: Redlock over N independent Redis masters. */
export interface RedlockOptions {
  /** The masters: Redis URLs, ioredis options or ioredis clients (not clusters); at least 1, 3 or more recommended. */
  nodes: (string | RedisOptions | Redis)[];
  /** Nodes that must grant a lease: more than half of `nodes`, at most all. Default `floor(N / 2) + 1`. */
  quorum?: number;
  /** Clock drift allowed per ms of lease: validity = ttl − elapsed − (ttl × driftFactor + 2 ms). Default 0.01. */
  driftFactor?: number;
  /**
   * How long a node that nest-lock sees for the first time (a restart that came back empty, a
   * FLUSHALL, a new node) neither grants leases nor counts for renewals: the longest lease any call may
   * take, so no per-call `ttl` may exceed it. Default: `defaults.ttl`. `0` turns it off (safe only on
   * masters that never lose acknowledged writes, e.g. AOF with `appendfsync always`).
   */
  quarantine?: number;
}

/** `redlock` after validation, with every default filled in. */
export interface ResolvedRedlockOptions {
  nodes: (string | RedisOptions | Redis)[];
  quorum: number;
  driftFactor: number;
  quarantine: number;
}

/** Redlock's default drift factor (antirez's reference: 0.01). */
export const DEFAULT_DRIFT_FACTOR = 0.01;

/**
 * Redis and a holder's clock tick at slightly different rates: the holder counts a lease of `ttl`
 * as valid for `ttl` minus this margin (redlock's drift rule, the 2 ms: Redis's own expiry
 * precision), so it never believes in a lease that the server already let go.
 */
export function driftMargin(ttl: number, driftFactor = DEFAULT_DRIFT_FACTOR): number {
  return ttl * driftFactor + 2;
}

/** The default JSON body of an answer `LockInterceptor` gives for a decorator's error. */
export interface LockErrorBody {
  statusCode: number;
  error: string;
  /** The error's stable `code`: `LOCK_TIMEOUT`, `SEMAPHORE_TIMEOUT`, `BACKEND_UNAVAILABLE`, … */
  code: string;
  message: string;
  /** `LOCK_TIMEOUT` and backend errors: the lock key (or semaphore name) involved. */
  key?: string;
  /** `SEMAPHORE_TIMEOUT`: the semaphore and its limit. */
  semaphore?: string;
  limit?: number;
  /** `INVALID_ARGUMENT`: what was wrong, e.g. `key`. */
  argument?: string;
}

/**
 * `Retry-After` of a 503 when neither the module nor the decorator says otherwise. Not derived from
 * the wait policy: the caller already waited its `timeout`, and when a permit frees up or Redis
 * comes back is unknown; one second spreads retries without making clients wait long.
 */
export const DEFAULT_RETRY_AFTER_SECONDS = 1;

export const DEFAULT_LEASE: Readonly<LeaseDefaults> = Object.freeze({
  ttl: 30_000,
  timeout: 5_000,
  step: 1,
  ratio: 2,
  maxStep: 500,
});

export const DEFAULT_KEY_PREFIX = 'lock:';
export const DEFAULT_FENCE_COUNTER_TTL = 3_600_000;
/** Below it, a step back of the server clock that NTP makes routinely could reorder fences. */
const SHORTEST_FENCE_COUNTER_TTL = 1_000;
export const DEFAULT_COMMAND_TIMEOUT = 1_000;
export const DEFAULT_AUTO_EXTEND = true;
export const DEFAULT_FAIR = true;

/** Module options after validation, with every default filled in. */
export interface ResolvedModuleOptions {
  redis?: LockModuleOptions['redis'];
  /** As given: `undefined` when the options did not say which store. */
  store?: LockModuleOptions['store'];
  redlock?: ResolvedRedlockOptions;
  keyPrefix: string;
  fenceCounterTtl: number;
  defaults: Readonly<LeaseDefaults & { autoExtend: boolean; fair: boolean }>;
  commandTimeout: number;
  waitForReplicas?: { replicas: number; timeout: number };
  onLockLost?: (error: LockLostError) => void;
  retryAfter: number;
  errorBody?: LockModuleOptions['errorBody'];
  logger?: LockModuleOptions['logger'];
}

const MODULE_OPTION_NAMES = new Set([
  'redis',
  'store',
  'redlock',
  'keyPrefix',
  'fenceCounterTtl',
  'defaults',
  'commandTimeout',
  'waitForReplicas',
  'onLockLost',
  'retryAfter',
  'errorBody',
  'logger',
]);
const DEFAULTS_OPTION_NAMES = new Set([...Object.keys(DEFAULT_LEASE), 'autoExtend', 'fair']);
/** The option names each kind of call accepts; anything else is a misspelling and refused. */
export const OPTION_NAMES = {
  semaphore: new Set([...DEFAULTS_OPTION_NAMES, 'signal']),
  lock: new Set([...DEFAULTS_OPTION_NAMES, 'signal', 'token']),
} as const;

export function resolveModuleOptions(options: LockModuleOptions = {}): ResolvedModuleOptions {
  if (!isPlainObject(options)) {
    throw new InvalidArgumentError('options', 'LockModule options must be an object');
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
    retryAfter = DEFAULT_RETRY_AFTER_SECONDS,
    errorBody,
    logger,
  } = options;

  if (redis !== undefined) {
    validateRedisOption(redis);
  }
  validateStoreChoice(store, redis, redlock);
  if (typeof keyPrefix !== 'string' || /[{}]/.test(keyPrefix) || LONE_SURROGATE.test(keyPrefix)) {
    // A brace in the prefix would move the hash tag off the user key and split a lock's keys across slots.
    throw new InvalidArgumentError('keyPrefix', 'must be a well-formed string without "{" or "}"');
  }
  if (!isPlainObject(defaults)) {
    throw new InvalidArgumentError('defaults', 'must be an object');
  }
  rejectUnknownNames('defaults.', defaults, DEFAULTS_OPTION_NAMES);
  if (onLockLost !== undefined && typeof onLockLost !== 'function') {
    throw new InvalidArgumentError('onLockLost', `must be a function, got ${describe(onLockLost)}`);
  }
  if (errorBody !== undefined && typeof errorBody !== 'function') {
    throw new InvalidArgumentError('errorBody', `must be a function, got ${describe(errorBody)}`);
  }
  validateLogger(logger);
  const lease = resolveLease(DEFAULT_LEASE, defaults, 'defaults.');
  const resolvedRedlock = redlock === undefined ? undefined : resolveRedlock(redlock, lease.ttl);
  const margin = driftMargin(lease.ttl, resolvedRedlock?.driftFactor);
  if (lease.ttl <= margin) {
    throw new InvalidArgumentError(
      'defaults.ttl',
      `must be longer than its clock-drift margin (${+margin.toFixed(2)} ms), the part of a lease a holder never counts on; got ${lease.ttl}`,
    );
  }
  return {
    redis,
    ...(store === undefined ? {} : { store }),
    ...(resolvedRedlock === undefined ? {} : { redlock: resolvedRedlock }),
    keyPrefix,
    fenceCounterTtl: validateFenceCounterTtl(fenceCounterTtl),
    defaults: Object.freeze({
      ...lease,
      autoExtend: validateBoolean(defaults.autoExtend, 'defaults.autoExtend') ?? DEFAULT_AUTO_EXTEND,
      fair: validateBoolean(defaults.fair, 'defaults.fair') ?? DEFAULT_FAIR,
    }),
    commandTimeout: duration('commandTimeout', commandTimeout),
    ...(waitForReplicas === undefined
      ? {}
      : { waitForReplicas: validateWaitForReplicas(waitForReplicas, redis, redlock, commandTimeout) }),
    ...(onLockLost ? { onLockLost } : {}),
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
  rejectUnknownNames('waitForReplicas.', wait as object, new Set(['replicas', 'timeout']));
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
  if ((ttl as number) < SHORTEST_FENCE_COUNTER_TTL) {
    throw new InvalidArgumentError(
      'fenceCounterTtl',
      `must be at least ${SHORTEST_FENCE_COUNTER_TTL} ms: the server clock must never go back by more than it; got ${ttl as number}`,
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

/**
 * Checks the options of one call (or of a decorator, when its class is defined): no unknown
 * names, and every value in range.
 */
export function validateCallOptions(
  kind: keyof typeof OPTION_NAMES,
  options: unknown,
  extraNames: readonly string[] = [],
): void {
  if (!isPlainObject(options)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  const known = extraNames.length === 0 ? OPTION_NAMES[kind] : new Set([...OPTION_NAMES[kind], ...extraNames]);
  rejectUnknownNames('', options as object, known);
  const { signal, token, autoExtend, fair } = options as LockOptions;
  resolveLease(DEFAULT_LEASE, options as LeaseOptions);
  validateSignal(signal);
  if (token !== undefined) validateKey('token', token);
  validateBoolean(autoExtend, 'autoExtend');
  validateBoolean(fair, 'fair');
}

/** `Retry-After` takes whole seconds. */
export function validateRetryAfter(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > LONGEST_DURATION) {
    throw new InvalidArgumentError('retryAfter', `must be a whole number of seconds ≥ 0, got ${describe(value)}`);
  }
  return value;
}

function validateBoolean(value: unknown, argument: string): boolean | undefined {
  if (value !== undefined && typeof value !== 'boolean') {
    throw new InvalidArgumentError(argument, `must be true or false, got ${describe(value)}`);
  }
  return value;
}

/** Merges per-call options over the module defaults, validating what the caller passed. */
export function resolveLease(
  defaults: Readonly<LeaseDefaults>,
  options: Partial<LeaseDefaults> = {},
  namePrefix = '',
): LeaseDefaults {
  if (!isPlainObject(options)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  // Only `undefined` means "the default": a `null` is a mistake, and refused like any other non-number.
  const pick = <K extends keyof LeaseDefaults>(name: K) =>
    options[name] === undefined ? defaults[name] : options[name];
  return {
    ttl: duration(`${namePrefix}ttl`, pick('ttl')),
    timeout: duration(`${namePrefix}timeout`, pick('timeout'), 0),
    step: duration(`${namePrefix}step`, pick('step')),
    ratio: atLeastOne(`${namePrefix}ratio`, pick('ratio')),
    maxStep: duration(`${namePrefix}maxStep`, pick('maxStep')),
  };
}

/** A lone surrogate: two different ones encode to the same bytes (U+FFFD) in Redis, so their keys would collide. */
const LONE_SURROGATE = /\p{Surrogate}/u;

/** A key, semaphore name or owner token: a non-empty, well-formed Unicode string. */
export function validateKey(argument: string, key: unknown): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new InvalidArgumentError(argument, `must be a non-empty string, got ${describe(key)}`);
  }
  if (LONE_SURROGATE.test(key)) {
    throw new InvalidArgumentError(argument, 'must be well-formed Unicode (it holds a lone surrogate)');
  }
  return key;
}

export function validateSignal(signal: unknown): AbortSignal | undefined {
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal', `must be an AbortSignal, got ${describe(signal)}`);
  }
  return signal;
}

/** A duration in ms: > 0 (or ≥ `min`) and at most `LONGEST_DURATION`. */
export function duration(argument: string, value: unknown, min?: 0): number {
  const inRange = typeof value === 'number' && (min === 0 ? value >= 0 : value > 0) && value <= LONGEST_DURATION;
  if (!inRange) {
    const lower = min === 0 ? '≥ 0' : '> 0';
    throw new InvalidArgumentError(
      argument,
      `must be a number of ms ${lower} and ≤ ${LONGEST_DURATION}, got ${describe(value)}`,
    );
  }
  return value;
}

function atLeastOne(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 1) {
    throw new InvalidArgumentError(argument, `must be a finite number ≥ 1, got ${describe(value)}`);
  }
  return value;
}

function validateRedisOption(redis: unknown, argument = 'redis'): void {
  if (typeof redis === 'string') {
    let protocol: string | undefined;
    try {
      protocol = new URL(redis).protocol;
    } catch {
      // reported below
    }
    if (protocol !== 'redis:' && protocol !== 'rediss:') {
      throw new InvalidArgumentError(argument, `must be a redis:// or rediss:// URL, got "${redis}"`);
    }
  } else if (argument === 'redis' && isClusterOption(redis)) {
    validateClusterOption(redis.cluster);
  } else if (!isRedisClient(redis) && !isPlainObject(redis)) {
    throw new InvalidArgumentError(
      argument,
      `must be a URL, ioredis options${argument === 'redis' ? ', { cluster: { nodes } }' : ''} or an ioredis client, got ${describe(redis)}`,
    );
  }
}

/** `{ cluster: … }`: the module connects to a Redis Cluster. */
export function isClusterOption(redis: unknown): redis is RedisClusterOption {
  return isPlainObject(redis) && !isRedisClient(redis) && Object.hasOwn(redis as object, 'cluster');
}

function validateClusterOption(cluster: unknown): void {
  if (!isPlainObject(cluster)) {
    throw new InvalidArgumentError('redis.cluster', `must be { nodes, options? }, got ${describe(cluster)}`);
  }
  rejectUnknownNames('redis.cluster.', cluster as object, new Set(['nodes', 'options']));
  const { nodes, options } = cluster as { nodes?: unknown; options?: unknown };
  if (!Array.isArray(nodes) || nodes.length === 0) {
    throw new InvalidArgumentError('redis.cluster.nodes', `must list at least one node, got ${describe(nodes)}`);
  }
  for (const node of nodes) {
    const valid =
      typeof node === 'string'
        ? /^rediss?:\/\//.test(node)
        : isPlainObject(node) && Number.isInteger((node as { port?: unknown }).port);
    if (!valid) {
      throw new InvalidArgumentError(
        'redis.cluster.nodes',
        `each node must be a redis:// URL or { host, port }, got ${describe(node)}`,
      );
    }
  }
  if (options !== undefined && !isPlainObject(options)) {
    throw new InvalidArgumentError('redis.cluster.options', `must be ioredis ClusterOptions, got ${describe(options)}`);
  }
}

function validateStoreChoice(store: unknown, redis: unknown, redlock: unknown): void {
  if (store !== undefined && store !== 'memory' && store !== 'redis') {
    throw new InvalidArgumentError('store', `must be 'memory' or 'redis', got ${describe(store)}`);
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

const REDLOCK_OPTION_NAMES = new Set(['nodes', 'quorum', 'driftFactor', 'quarantine']);

/**
 * `redlock`: its nodes (each a URL, ioredis options or a client, never a cluster, no server twice), a
 * quorum that is a majority (two quorums always share a node), a drift factor in [0, 1), and a
 * quarantine no shorter than the default ttl (`defaultTtl`), since it bounds every lease.
 */
function resolveRedlock(redlock: unknown, defaultTtl: number): ResolvedRedlockOptions {
  if (!isPlainObject(redlock)) {
    throw new InvalidArgumentError('redlock', `must be an object with nodes, got ${describe(redlock)}`);
  }
  rejectUnknownNames('redlock.', redlock as object, REDLOCK_OPTION_NAMES);
  const { nodes, quorum, driftFactor = DEFAULT_DRIFT_FACTOR, quarantine = defaultTtl } = redlock as RedlockOptions;
  if (!Array.isArray(nodes) || nodes.length === 0) {
    throw new InvalidArgumentError(
      'redlock.nodes',
      `must be a non-empty array of Redis URLs, ioredis options or clients, got ${describe(nodes)}`,
    );
  }
  const servers = new Map<string, number>();
  nodes.forEach((node: unknown, i) => {
    const argument = `redlock.nodes[${i}]`;
    if ((node as { isCluster?: unknown } | null)?.isCluster === true || isClusterOption(node)) {
      throw new InvalidArgumentError(argument, 'must be a single Redis master, not a cluster');
    }
    validateRedisOption(node, argument);
    const server = serverOf(node);
    if (server === undefined) return;
    const earlier = servers.get(server);
    if (earlier !== undefined) {
      throw new InvalidArgumentError(
        argument,
        `is the server of redlock.nodes[${earlier}] (${server}) again: a master listed twice would count twice towards the quorum`,
      );
    }
    servers.set(server, i);
  });
  const n = nodes.length;
  const resolvedQuorum = quorum ?? Math.floor(n / 2) + 1;
  if (
    typeof resolvedQuorum !== 'number' ||
    !Number.isInteger(resolvedQuorum) ||
    resolvedQuorum <= n / 2 ||
    resolvedQuorum > n
  ) {
    throw new InvalidArgumentError(
      'redlock.quorum',
      `must be a whole number > ${n / 2} (more than half of the ${n} nodes) and ≤ ${n}, got ${describe(quorum)}`,
    );
  }
  if (typeof driftFactor !== 'number' || !Number.isFinite(driftFactor) || driftFactor < 0 || driftFactor >= 1) {
    throw new InvalidArgumentError('redlock.driftFactor', `must be a number ≥ 0 and < 1, got ${describe(driftFactor)}`);
  }
  duration('redlock.quarantine', quarantine, 0);
  if (quarantine !== 0 && quarantine < defaultTtl) {
    throw new InvalidArgumentError(
      'redlock.quarantine',
      `must be ≥ defaults.ttl (${defaultTtl} ms), the longest lease a call may take, or 0 to turn it off; got ${quarantine}`,
    );
  }
  return { nodes: [...nodes], quorum: resolvedQuorum, driftFactor, quarantine };
}

/**
 * The Redis server a Redlock node names, as `host:port` or `unix:<path>`, whatever the form (URL,
 * options, client) and database: two nodes on one server are one master. Loopback addresses
 * (127.0.0.0/8, ::1, localhost, IPv4-mapped) count as one host; other host names are compared as
 * written (resolving them would need the network: the quorum counts servers by their run_id
 * anyway). `undefined` for a node behind Sentinel: which server it is, only the sentinels know.
 */
function serverOf(node: unknown): string | undefined {
  let host: string | undefined;
  let port: string | number | undefined;
  let path: string | undefined;
  if (typeof node === 'string') {
    const url = new URL(node);
    host = decodeURIComponent(url.hostname).replace(/^\[(.*)\]$/, '$1');
    port = url.port;
  } else {
    const options = (isRedisClient(node) ? (node as Redis).options : node) as Partial<RedisOptions>;
    if (options.sentinels !== undefined && options.sentinels !== null) return undefined;
    ({ host, port, path } = options);
  }
  if (path) return `unix:${path}`;
  const name = (host || 'localhost').toLowerCase().replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, '');
  const loopback =
    name === 'localhost' || /^127\./.test(name) || /^(0+:){7}0*1$|^::1$|^::ffff:7f[\da-f]{2}:[\da-f]{1,4}$/.test(name);
  return `${loopback ? 'localhost' : name}:${Number(port || 6379)}`;
}

/** Duck-typed so that a client from another copy of ioredis is still recognised. */
export function isRedisClient(value: unknown): value is Redis | Cluster {
  const candidate = value as Partial<Redis> | null;
  return typeof candidate?.evalsha === 'function' && typeof candidate.set === 'function';
}

function rejectUnknownNames(prefix: string, options: object, known: ReadonlySet<string>): void {
  for (const name in options) {
    if (Object.hasOwn(options, name) && !known.has(name)) {
      throw new InvalidArgumentError(`${prefix}${name}`, `unknown option (known: ${[...known].join(', ')})`);
    }
  }
}

function isPlainObject(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  return typeof value;
}

export function validateLimit(limit: unknown): number {
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1) {
    throw new InvalidArgumentError('limit', `must be a whole number ≥ 1, got ${describe(limit)}`);
  }
  return limit;
}

/** The routine of `withLock` / `withPermit`: checked before anything is taken. */
export function validateRoutine(fn: unknown): void {
  if (typeof fn !== 'function') {
    throw new InvalidArgumentError('fn', `must be a function, got ${describe(fn)}`);
  }
}

/** A `LocalSemaphore` only waits: `timeout` is all it can honour. */
export function validateLocalOptions(options: unknown, extraNames: readonly string[] = []): void {
  if (!isPlainObject(options)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  rejectUnknownNames('', options as object, new Set(['timeout', ...extraNames]));
  resolveLease(DEFAULT_LEASE, options as LeaseOptions);
}
