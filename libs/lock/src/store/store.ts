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
   * One attempt to take `key` for `token` for `ttl` ms. Idempotent for the same token:
   * if `key` is already held by `token` (an earlier attempt whose reply was lost),
   * it counts as taken and the lease restarts.
   */
  acquireLock(key: string, token: string, ttl: number): Promise<boolean>;

  /** Deletes `key` only if it is held by `token`; `false` when it is not (expired or taken). */
  releaseLock(key: string, token: string): Promise<boolean>;

  /** Resets the lease of `key` to `ttl` only if it is held by `token`. */
  extendLock(key: string, token: string, ttl: number): Promise<boolean>;

  isLocked(key: string): Promise<boolean>;

  /**
   * Resolves when `key` may have become free, or after `maxWait` ms, whichever is first.
   * Stores that cannot observe releases leave it out and waiters simply sleep.
   */
  waitForRelease?(key: string, maxWait: number, signal?: AbortSignal): Promise<void>;

  /** Releases what the store opened (connections it created, timers); idempotent. */
  close(): Promise<void>;
}

/** Injection token of the active `LockStore`. */
export const LockStore = Symbol('LockStore');
