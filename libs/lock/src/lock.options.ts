import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { InvalidArgumentError } from './lock.errors.js';

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
}

export type SemaphoreOptions = LeaseOptions;

export interface LockOptions extends LeaseOptions {
  /** Owner token to use instead of a fresh random one (e.g. to release from another process). */
  token?: string;
}

export interface LockModuleOptions {
  /**
   * Redis URL, ioredis options, or an existing ioredis client / cluster.
   * Without it the module uses the embedded memory store (one process only).
   * A client passed in is never closed by the module.
   */
  redis?: string | RedisOptions | Redis | Cluster;
  /** Prefix of every Redis key the library writes. */
  keyPrefix?: string;
  /** Defaults of every lock and permit; each call may override them. */
  defaults?: Partial<LeaseDefaults>;
  /**
   * Longest time one store command may take before it fails with `LockBackendError`,
   * so that a stopped or unreachable Redis never makes a caller hang.
   */
  commandTimeout?: number;
}

export const DEFAULT_LEASE: Readonly<LeaseDefaults> = Object.freeze({
  ttl: 30_000,
  timeout: 5_000,
  step: 1,
  ratio: 2,
  maxStep: 500,
});

export const DEFAULT_KEY_PREFIX = 'lock:';
export const DEFAULT_COMMAND_TIMEOUT = 1_000;

/** Module options after validation, with every default filled in. */
export interface ResolvedModuleOptions {
  redis?: LockModuleOptions['redis'];
  keyPrefix: string;
  defaults: Readonly<LeaseDefaults>;
  commandTimeout: number;
}

const MODULE_OPTION_NAMES = new Set(['redis', 'keyPrefix', 'defaults', 'commandTimeout']);
const LEASE_OPTION_NAMES = new Set(Object.keys(DEFAULT_LEASE));

export function resolveModuleOptions(options: LockModuleOptions = {}): ResolvedModuleOptions {
  if (!isPlainObject(options)) {
    throw new InvalidArgumentError('options', 'LockModule options must be an object');
  }
  rejectUnknownNames('', options, MODULE_OPTION_NAMES);
  const { redis, keyPrefix = DEFAULT_KEY_PREFIX, defaults = {}, commandTimeout = DEFAULT_COMMAND_TIMEOUT } = options;

  if (redis !== undefined) {
    validateRedisOption(redis);
  }
  if (typeof keyPrefix !== 'string' || /[{}]/.test(keyPrefix)) {
    // A brace in the prefix would move the hash tag off the user key and split a lock's keys across slots.
    throw new InvalidArgumentError('keyPrefix', 'must be a string without "{" or "}"');
  }
  if (!isPlainObject(defaults)) {
    throw new InvalidArgumentError('defaults', 'must be an object');
  }
  rejectUnknownNames('defaults.', defaults, LEASE_OPTION_NAMES);
  return {
    redis,
    keyPrefix,
    defaults: Object.freeze(resolveLease(DEFAULT_LEASE, defaults, 'defaults.')),
    commandTimeout: positive('commandTimeout', commandTimeout),
  };
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
  return {
    ttl: positive(`${namePrefix}ttl`, options.ttl ?? defaults.ttl),
    timeout: nonNegative(`${namePrefix}timeout`, options.timeout ?? defaults.timeout),
    step: positive(`${namePrefix}step`, options.step ?? defaults.step),
    ratio: atLeastOne(`${namePrefix}ratio`, options.ratio ?? defaults.ratio),
    maxStep: positive(`${namePrefix}maxStep`, options.maxStep ?? defaults.maxStep),
  };
}

export function validateKey(argument: string, key: unknown): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new InvalidArgumentError(argument, `must be a non-empty string, got ${describe(key)}`);
  }
  return key;
}

export function validateSignal(signal: unknown): AbortSignal | undefined {
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal', `must be an AbortSignal, got ${describe(signal)}`);
  }
  return signal;
}

export function positive(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidArgumentError(argument, `must be a finite number > 0, got ${describe(value)}`);
  }
  return value;
}

function nonNegative(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new InvalidArgumentError(argument, `must be a finite number ≥ 0, got ${describe(value)}`);
  }
  return value;
}

function atLeastOne(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 1) {
    throw new InvalidArgumentError(argument, `must be a finite number ≥ 1, got ${describe(value)}`);
  }
  return value;
}

function validateRedisOption(redis: unknown): void {
  if (typeof redis === 'string') {
    let protocol: string | undefined;
    try {
      protocol = new URL(redis).protocol;
    } catch {
      // reported below
    }
    if (protocol !== 'redis:' && protocol !== 'rediss:') {
      throw new InvalidArgumentError('redis', `must be a redis:// or rediss:// URL, got "${redis}"`);
    }
  } else if (!isRedisClient(redis) && !isPlainObject(redis)) {
    throw new InvalidArgumentError(
      'redis',
      `must be a URL, ioredis options or an ioredis client, got ${describe(redis)}`,
    );
  }
}

/** Duck-typed so that a client from another copy of ioredis is still recognised. */
export function isRedisClient(value: unknown): value is Redis | Cluster {
  const candidate = value as Partial<Redis> | null;
  return typeof candidate?.evalsha === 'function' && typeof candidate.set === 'function';
}

function rejectUnknownNames(prefix: string, options: object, known: ReadonlySet<string>): void {
  const unknown = Object.keys(options).find((name) => !known.has(name));
  if (unknown !== undefined) {
    throw new InvalidArgumentError(`${prefix}${unknown}`, `unknown option (known: ${[...known].join(', ')})`);
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
