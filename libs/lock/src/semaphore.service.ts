import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { registerLiveService, unregisterLiveService } from './decorators/live-services.js';
import { acquireLease, HeldLease, type LeaseGrant } from './lease.js';
import { LocalSemaphore } from './local-semaphore.js';
import { LOCK_OPTIONS } from './lock.constants.js';
import { leaseHeldByChain, runHolding } from './lock.context.js';
import { InvalidArgumentError, SemaphoreTimeoutError } from './lock.errors.js';
import {
  resolveLease,
  type ResolvedModuleOptions,
  type SemaphoreOptions,
  validateKey,
  validateLimit,
} from './lock.options.js';
import { LockStore } from './store/store.js';

/** A held permit of a semaphore. Its lease runs out after `ttl` unless it is renewed with `expire()`. */
export interface Permit {
  readonly name: string;
  /** 128 random bits, fresh for every acquisition. */
  readonly token: string;
  /** Milliseconds spent waiting before the permit was granted (exactly 0 when one was free). */
  readonly elapsed: number;
  /** `true`: given back by us; `false`: no longer ours (its lease ran out), or already released. */
  release(): Promise<boolean>;
  /** Resets the remaining lease to `ttl` (default: the ttl it was taken with); `false` if no longer ours. */
  expire(ttl?: number): Promise<boolean>;
  /** `await using permit = await semaphores.acquire('reports', 2)` releases at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Counting semaphores shared by every process on the store: at most `limit` permits of a
 * name are held at once, and the permit of a holder that died comes back after its `ttl`.
 */
@Injectable()
export class SemaphoreService implements OnModuleDestroy {
  private readonly localSemaphores = new Map<string, { limit: number; semaphore: LocalSemaphore }>();

  constructor(
    @Inject(LockStore) private readonly store: LockStore,
    @Inject(LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
  ) {
    // Lets decorated methods of instances Nest built by a factory find this service.
    registerLiveService(SemaphoreService, this);
  }

  onModuleDestroy(): void {
    unregisterLiveService(SemaphoreService, this);
  }

  /** Waits up to `timeout` for a permit; rejects with `SemaphoreTimeoutError` when none frees up. */
  acquire(name: string, limit: number, options: SemaphoreOptions = {}): Promise<Permit> {
    return this.takeOrThrow(name, limit, options);
  }

  /** Exactly one attempt: a permit, or `null` when all `limit` are held. */
  async tryAcquire(name: string, limit: number, options: SemaphoreOptions = {}): Promise<Permit | null> {
    const permit = await this.take(name, limit, { ...options, timeout: 0 });
    return permit instanceof HeldPermit ? permit : null;
  }

  /**
   * Runs `fn` holding a permit and releases it afterwards, whatever `fn` did; a failure to
   * release is logged, never thrown over `fn`'s result or error. Reentrant: inside a call
   * chain that already holds a permit of `name`, `fn` runs at once with that permit.
   */
  async withPermit<T>(
    name: string,
    limit: number,
    fn: (permit: Permit) => T | Promise<T>,
    options: SemaphoreOptions = {},
  ): Promise<T> {
    validateKey('name', name);
    validateLimit(limit);
    const held = leaseHeldByChain('semaphore', name);
    if (held instanceof HeldPermit) return fn(held);

    const permit = await this.takeOrThrow(name, limit, options);
    try {
      return await runHolding('semaphore', name, permit, () => fn(permit));
    } finally {
      await permit.releaseQuietly();
    }
  }

  /** Permits of `name` held right now (expired leases not counted). */
  async count(name: string): Promise<number> {
    validateKey('name', name);
    return this.store.countPermits(name);
  }

  /**
   * A permit of the in-process semaphore `name` (see `local()`), as `@Semaphore(limit, { scope: 'local' })`
   * takes it: waits up to `timeout`, then rejects with `SemaphoreTimeoutError`.
   */
  async acquireLocal(
    name: string,
    limit: number,
    options: Pick<SemaphoreOptions, 'timeout'> = {},
  ): Promise<LocalPermit> {
    const semaphore = this.local(name, limit);
    const { timeout } = resolveLease(this.options.defaults, { timeout: options.timeout });
    const start = performance.now();
    if (!(await semaphore.wait(timeout))) throw new SemaphoreTimeoutError(name, limit, performance.now() - start);
    return new LocalPermit(name, semaphore);
  }

  /**
   * The in-process semaphore of `name` (created with `limit` resources on first use), as used by
   * `@Semaphore(limit, { scope: 'local' })`. One name keeps one limit.
   */
  local(name: string, limit: number): LocalSemaphore {
    validateKey('name', name);
    validateLimit(limit);
    const existing = this.localSemaphores.get(name);
    if (existing === undefined) {
      const semaphore = new LocalSemaphore(limit);
      this.localSemaphores.set(name, { limit, semaphore });
      return semaphore;
    }
    if (existing.limit !== limit) {
      throw new InvalidArgumentError('limit', `local semaphore "${name}" has limit ${existing.limit}, not ${limit}`);
    }
    return existing.semaphore;
  }

  private async takeOrThrow(name: string, limit: number, options: SemaphoreOptions): Promise<HeldPermit> {
    const permit = await this.take(name, limit, options);
    if (permit instanceof HeldPermit) return permit;
    throw new SemaphoreTimeoutError(name, limit, permit.waited);
  }

  private async take(name: string, limit: number, options: SemaphoreOptions): Promise<HeldPermit | { waited: number }> {
    validateKey('name', name);
    validateLimit(limit);
    const grant = await acquireLease(this.store, this.options.defaults, {
      kind: 'semaphore',
      id: name,
      options,
      attempt: (token, ttl) => this.store.acquirePermit(name, token, limit, ttl),
      release: (token) => this.store.releasePermit(name, token),
    });
    if (!('token' in grant)) return grant;
    return new HeldPermit(this.store, name, grant);
  }
}

export class HeldPermit extends HeldLease implements Permit {
  constructor(
    private readonly store: LockStore,
    readonly name: string,
    grant: LeaseGrant,
  ) {
    super(grant.token, grant.elapsed, grant.ttl);
  }

  protected get subject(): string {
    return `a permit of "${this.name}"`;
  }

  release(): Promise<boolean> {
    return this.releaseOnce();
  }

  protected giveBack(): Promise<boolean> {
    return this.store.releasePermit(this.name, this.token);
  }

  protected renew(ttl: number): Promise<boolean> {
    return this.store.extendPermit(this.name, this.token, ttl);
  }
}

/** A resource taken from a `LocalSemaphore`; `release()` posts it back once. */
export class LocalPermit {
  private released = false;

  constructor(
    readonly name: string,
    private readonly semaphore: LocalSemaphore,
  ) {}

  get active(): boolean {
    return !this.released;
  }

  async release(): Promise<boolean> {
    if (this.released) return false;
    this.released = true;
    this.semaphore.post();
    return true;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
