import { Inject, Injectable, Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { LOCK_OPTIONS } from './lock.constants.js';
import { LockTimeoutError } from './lock.errors.js';
import {
  type LockOptions,
  positive,
  resolveLease,
  type ResolvedModuleOptions,
  validateKey,
  validateSignal,
} from './lock.options.js';
import { LockStore } from './store/store.js';
import { type Pause, sleep, waitForLease } from './wait-for-lease.js';

/** A held lock. Its lease runs out after `ttl` unless it is renewed with `expire()`. */
export interface Lock {
  readonly key: string;
  /** Owner token: 128 random bits, fresh for every acquisition, unless the caller supplied one. */
  readonly token: string;
  /** Milliseconds spent waiting before the lock was acquired (exactly 0 when it was free). */
  readonly elapsed: number;
  /** `true`: released by us; `false`: no longer ours (expired or taken). Never deletes another owner's lock. */
  unlock(): Promise<boolean>;
  /** Resets the remaining lease to `ttl` (default: the ttl it was taken with); `false` if no longer ours. */
  expire(ttl?: number): Promise<boolean>;
  /** `await using lock = await locks.lock('key')` unlocks at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

@Injectable()
export class LockService {
  private readonly logger = new Logger(LockService.name);

  constructor(
    @Inject(LockStore) private readonly store: LockStore,
    @Inject(LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
  ) {}

  /** Waits up to `timeout` for `key`; rejects with `LockTimeoutError` when it stays taken. */
  async lock(key: string, options: LockOptions = {}): Promise<Lock> {
    const lock = await this.acquire(key, options);
    if (lock instanceof HeldLock) return lock;
    throw new LockTimeoutError(key, lock.waited);
  }

  /** Exactly one attempt: the lock, or `null` when `key` is taken. */
  async tryLock(key: string, options: LockOptions = {}): Promise<Lock | null> {
    const lock = await this.acquire(key, { ...options, timeout: 0 });
    return lock instanceof HeldLock ? lock : null;
  }

  /**
   * Runs `fn` under the lock and unlocks afterwards, whatever `fn` did. A failure to
   * unlock is logged, never thrown over `fn`'s result or error: the lease expires anyway.
   */
  async withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>, options: LockOptions = {}): Promise<T> {
    const lock = await this.lock(key, options);
    try {
      return await fn(lock);
    } finally {
      await lock.unlock().catch((error: unknown) => this.logUnlockFailure(key, error));
    }
  }

  /** Releases `key` if `token` holds it (e.g. a token handed over from another process). */
  async unlock(key: string, token: string): Promise<boolean> {
    validateKey('key', key);
    validateKey('token', token);
    return this.store.releaseLock(key, token);
  }

  /** Resets the lease of `key` to `ttl` if `token` holds it. */
  async expire(key: string, token: string, ttl: number): Promise<boolean> {
    validateKey('key', key);
    validateKey('token', token);
    positive('ttl', ttl);
    return this.store.extendLock(key, token, ttl);
  }

  async isLocked(key: string): Promise<boolean> {
    validateKey('key', key);
    return this.store.isLocked(key);
  }

  private async acquire(key: string, options: LockOptions): Promise<HeldLock | { waited: number }> {
    validateKey('key', key);
    const lease = resolveLease(this.options.defaults, options);
    const signal = validateSignal(options.signal);
    const token = options.token === undefined ? createOwnerToken() : validateKey('token', options.token);

    const start = performance.now();
    const elapsed = await waitForLease(
      {
        attempt: () => this.store.acquireLock(key, token, lease.ttl),
        release: () => this.store.releaseLock(key, token),
      },
      lease,
      this.pauseFor(key),
      signal,
    );
    if (elapsed === null) return { waited: performance.now() - start };
    return new HeldLock(this.store, key, token, elapsed, lease.ttl, (error) => this.logUnlockFailure(key, error));
  }

  private pauseFor(key: string): Pause {
    const { store } = this;
    return store.waitForRelease ? (ms, signal) => store.waitForRelease!(key, ms, signal) : sleep;
  }

  private logUnlockFailure(key: string, error: unknown): void {
    const reason = error instanceof Error ? error.message : String(error);
    this.logger.warn(`Could not unlock "${key}" (${reason}); its lease will expire on its own`);
  }
}

class HeldLock implements Lock {
  /** Set once unlocked, so that a second `unlock()` changes nothing even with a reused token. */
  private released = false;

  constructor(
    private readonly store: LockStore,
    readonly key: string,
    readonly token: string,
    readonly elapsed: number,
    private readonly ttl: number,
    private readonly onDisposeFailure: (error: unknown) => void,
  ) {}

  async unlock(): Promise<boolean> {
    if (this.released) return false;
    const released = await this.store.releaseLock(this.key, this.token);
    this.released = true;
    return released;
  }

  async expire(ttl: number = this.ttl): Promise<boolean> {
    positive('ttl', ttl);
    if (this.released) return false;
    return this.store.extendLock(this.key, this.token, ttl);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    // Like withLock: a failed unlock must not replace the block's own result or error.
    await this.unlock().catch(this.onDisposeFailure);
  }
}

/** 128 random bits, fresh for every acquisition, so that no two owners ever share a token. */
function createOwnerToken(): string {
  return randomBytes(16).toString('base64url');
}
