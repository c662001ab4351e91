import type { LockBackendError } from '../lock.errors.js';

/**
 * Where leases live. `MemoryStore` (one process) and `RedisStore` implement it with the
 * same semantics; `LockService` holds the wait loop and never talks to Redis directly.
 *
 * Every method works on the user's own key; the key layout (prefix, hash tags,
 * companion keys) is the store's business. Every failure to reach the backend
 * rejects with `LockBackendError`.
 */
export interface LockStore {
  /**
   * One attempt to take `key` for `token` for `ttl` ms. Resolves with the lease's fence (≥ 1,
   * greater than every fence this key had before, by any owner) when `token` holds it now, `0` when
   * another owner does. Idempotent for the same token: if `key` is already held by `token` (an
   * earlier attempt whose reply was lost), it counts as taken and the lease restarts.
   */
  acquireLock(key: string, token: string, ttl: number): Promise<number>;

  /** Deletes `key` only if it is held by `token`; `false` when it is not (expired or taken). */
  releaseLock(key: string, token: string): Promise<boolean>;

  /** Resets the lease of `key` to `ttl` only if it is held by `token`. */
  extendLock(key: string, token: string, ttl: number): Promise<boolean>;

  isLocked(key: string): Promise<boolean>;

  /**
   * One attempt to take a permit of semaphore `name` for `token`: granted while fewer than
   * `limit` unexpired permits are held. Resolves with its fence, or `0`; idempotent for the same
   * token, like `acquireLock`.
   */
  acquirePermit(name: string, token: string, limit: number, ttl: number): Promise<number>;

  /** Gives the permit back; `false` when `token` holds none (expired or never taken). */
  releasePermit(name: string, token: string): Promise<boolean>;

  /** Resets the lease of `token`'s permit to `ttl`; `false` when it holds none. */
  extendPermit(name: string, token: string, ttl: number): Promise<boolean>;

  /** Permits of `name` held right now; expired leases do not count. */
  countPermits(name: string): Promise<number>;

  /**
   * Renews many leases in one round trip (the watchdog's tick): for each, `true` if renewed,
   * `false` if no longer held by its token, or the `LockBackendError` that renewal met.
   */
  extendLeases(leases: readonly LeaseRenewal[]): Promise<(boolean | LockBackendError)[]>;

  /**
   * Resolves when the lock `key` (or a permit of semaphore `key`) may have become free, or
   * after `maxWait` ms, whichever is first. Stores that cannot observe releases leave it out
   * and waiters simply sleep.
   */
  waitForRelease?(kind: LeaseKind, key: string, maxWait: number, signal?: AbortSignal): Promise<void>;

  /** Releases what the store opened (connections it created, timers); idempotent. */
  close(): Promise<void>;
}

export type LeaseKind = 'lock' | 'semaphore';

/** One lease to renew: which lock or semaphore, whose, for how long. */
export interface LeaseRenewal {
  kind: LeaseKind;
  /** The lock key or semaphore name. */
  id: string;
  token: string;
  ttl: number;
}

/** Injection token of the active `LockStore`. */
export const LockStore = Symbol('LockStore');
