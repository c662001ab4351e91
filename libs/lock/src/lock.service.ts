import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { registerLiveService, unregisterLiveService } from './decorators/live-services.js';
import { acquireLease, HeldLease, type LeaseGrant } from './lease.js';
import { LOCK_OPTIONS } from './lock.constants.js';
import { leaseHeldByChain, runHolding } from './lock.context.js';
import { LockTimeoutError } from './lock.errors.js';
import { type LockOptions, positive, type ResolvedModuleOptions, validateKey } from './lock.options.js';
import { LockStore } from './store/store.js';

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
export class LockService implements OnModuleDestroy {
  constructor(
    @Inject(LockStore) private readonly store: LockStore,
    @Inject(LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
  ) {
    // Lets decorated methods of instances Nest built by a factory find this service.
    registerLiveService(LockService, this);
  }

  onModuleDestroy(): void {
    unregisterLiveService(LockService, this);
  }

  /** Waits up to `timeout` for `key`; rejects with `LockTimeoutError` when it stays taken. */
  lock(key: string, options: LockOptions = {}): Promise<Lock> {
    return this.acquireOrThrow(key, options);
  }

  /** Exactly one attempt: the lock, or `null` when `key` is taken. */
  async tryLock(key: string, options: LockOptions = {}): Promise<Lock | null> {
    const lock = await this.acquire(key, { ...options, timeout: 0 });
    return lock instanceof HeldLock ? lock : null;
  }

  /**
   * Runs `fn` under the lock and unlocks afterwards, whatever `fn` did. A failure to
   * unlock is logged, never thrown over `fn`'s result or error: the lease expires anyway.
   * Reentrant: inside a call chain that already holds `key` through `withLock` (or
   * `@WithLock`), `fn` runs at once with that lock.
   */
  async withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>, options: LockOptions = {}): Promise<T> {
    validateKey('key', key);
    const held = leaseHeldByChain('lock', key);
    if (held instanceof HeldLock) return fn(held);

    const lock = await this.acquireOrThrow(key, options);
    try {
      return await runHolding('lock', key, lock, () => fn(lock));
    } finally {
      await lock.releaseQuietly();
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

  private async acquireOrThrow(key: string, options: LockOptions): Promise<HeldLock> {
    const lock = await this.acquire(key, options);
    if (lock instanceof HeldLock) return lock;
    throw new LockTimeoutError(key, lock.waited);
  }

  private async acquire(key: string, options: LockOptions): Promise<HeldLock | { waited: number }> {
    const grant = await acquireLease(this.store, this.options.defaults, {
      kind: 'lock',
      id: key,
      options,
      attempt: (token, ttl) => this.store.acquireLock(key, token, ttl),
      release: (token) => this.store.releaseLock(key, token),
    });
    if (!('token' in grant)) return grant;
    return new HeldLock(this.store, key, grant);
  }
}

export class HeldLock extends HeldLease implements Lock {
  constructor(
    private readonly store: LockStore,
    readonly key: string,
    grant: LeaseGrant,
  ) {
    super(grant.token, grant.elapsed, grant.ttl);
  }

  protected get subject(): string {
    return `lock "${this.key}"`;
  }

  unlock(): Promise<boolean> {
    return this.releaseOnce();
  }

  protected giveBack(): Promise<boolean> {
    return this.store.releaseLock(this.key, this.token);
  }

  protected renew(ttl: number): Promise<boolean> {
    return this.store.extendLock(this.key, this.token, ttl);
  }
}
