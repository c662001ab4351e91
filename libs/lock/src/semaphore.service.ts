import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { acquireLease, type NotGranted } from './lease/acquire-lease.js';
import { HeldLease, type KeepPolicy, keepPolicy, type LeaseGrant } from './lease/held-lease.js';
import { enterHold, holdDuring, type HoldTicket, leaseOfChain } from './lease/lease-chain.js';
import { Watchdog } from './lease/watchdog.js';
import { registerLiveService, unregisterLiveService } from './live-services.js';
import { LocalSemaphore } from './local-semaphore.js';
import { LOCK_OPTIONS } from './lock.constants.js';
import { InvalidArgumentError, SemaphoreTimeoutError } from './lock.errors.js';
import type { ResolvedModuleOptions } from './lock-module.options.js';
import {
  resolveLease,
  type SemaphoreOptions,
  validateCallOptions,
  validateKey,
  validateLimit,
  validateLocalOptions,
  validateRoutine,
} from './options/call-options.js';
import { LockStore } from './store/store.js';
import { type HoldTimer, LockTelemetry } from './telemetry/telemetry.js';

/** A held permit of a semaphore. Its lease runs out after `ttl` unless it is renewed (`autoExtend`, or `expire()`). */
export interface Permit {
  readonly name: string;
  /** 128 random bits, fresh for every acquisition. */
  readonly token: string;
  /** Milliseconds spent waiting before the permit was granted (exactly 0 when one was free). */
  readonly elapsed: number;
  /** Strictly greater than the fence of every earlier permit of this semaphore, as `Lock.fence`. */
  readonly fence: number;
  /** Aborted with a `LockLostError` once the lease is known to be lost; never by `release()`. */
  readonly signal: AbortSignal;
  /** Milliseconds the lease is still guaranteed to be ours (0 once released or lost). */
  readonly validity: number;
  /** `true`: given back by us; `false`: no longer ours (its lease ran out), or already released. */
  release(): Promise<boolean>;
  /** Resets the remaining lease to `ttl` (default: its current ttl: the one it was taken with, or the last given to `expire()`); `false` if no longer ours. */
  expire(ttl?: number): Promise<boolean>;
  /** `await using permit = await semaphores.acquire('reports', 2)` releases at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** One permit that `SemaphoreService.holders()` found held. */
export interface PermitHolder {
  /** Milliseconds its lease still runs. */
  readonly ttl: number;
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
    @Inject(Watchdog) private readonly watchdog: Watchdog,
    @Inject(LockTelemetry) private readonly telemetry: LockTelemetry,
  ) {
    // Lets decorated methods of instances Nest built by a factory find this service.
    registerLiveService(SemaphoreService, this);
  }

  onModuleDestroy(): void {
    unregisterLiveService(SemaphoreService, this);
  }

  /**
   * Waits up to `timeout` for a permit; rejects with `SemaphoreTimeoutError` when none frees up.
   * The lease is renewed only with `autoExtend: true`.
   */
  async acquire(name: string, limit: number, options: SemaphoreOptions = {}): Promise<Permit> {
    return this.acquireOrThrow(name, limit, options, this.keep(options, false));
  }

  /** Exactly one attempt: a permit, or `null` when all `limit` are held. */
  async tryAcquire(name: string, limit: number, options: SemaphoreOptions = {}): Promise<Permit | null> {
    validateCallOptions('semaphore', options);
    const permit = await this.take(name, limit, { ...options, timeout: 0 }, this.keep(options, false));
    return permit instanceof HeldPermit ? permit : null;
  }

  /**
   * Runs `fn` holding a permit and releases it afterwards, whatever `fn` did; the lease is renewed
   * while `fn` runs (`autoExtend`, default on), and a failure to release is logged, never thrown
   * over `fn`'s result or error. Reentrant like `withLock`: inside a call chain that holds a permit
   * of `name`, `fn` joins it, and the last holder of the chain gives it back.
   */
  async withPermit<T>(
    name: string,
    limit: number,
    fn: (permit: Permit) => T | Promise<T>,
    options: SemaphoreOptions = {},
  ): Promise<T> {
    this.validate(name, limit, options);
    validateRoutine(fn);
    return holdDuring(
      { kind: 'semaphore', id: name, scope: this.store },
      () => this.acquireOrThrow(name, limit, options, this.keep(options, true)),
      fn,
    );
  }

  /**
   * Joins the permit the call chain holds of `name`, or waits for one, as a holder that must
   * `leave()`; what `withPermit` and `@Semaphore` are made of.
   * @internal
   */
  async enter(name: string, limit: number, options: SemaphoreOptions = {}): Promise<HoldTicket<HeldPermit>> {
    this.validate(name, limit, options);
    return enterHold({ kind: 'semaphore', id: name, scope: this.store }, () =>
      this.acquireOrThrow(name, limit, options, this.keep(options, true)),
    );
  }

  /**
   * Joins the permit of the in-process semaphore `name` the call chain holds, or waits up to
   * `timeout` for one; what `@Semaphore(limit, { scope: 'local' })` is made of.
   * @internal
   */
  async enterLocal(
    name: string,
    limit: number,
    options: Pick<SemaphoreOptions, 'timeout'> = {},
  ): Promise<HoldTicket<LocalPermit>> {
    this.local(name, limit);
    return enterHold({ kind: 'local-semaphore', id: name, scope: this }, () => this.acquireLocal(name, limit, options));
  }

  /** Permits of `name` held right now (expired leases not counted). */
  async count(name: string): Promise<number> {
    validateKey('name', name);
    return this.store.countPermits(name);
  }

  /**
   * The permits of `name` held right now, read-only: one entry per unexpired permit, with the ms
   * its lease still runs, soonest to run out first (`length` is what `count()` says). Owner tokens
   * are not listed: they are what releases a permit.
   */
  async holders(name: string): Promise<PermitHolder[]> {
    validateKey('name', name);
    return (await this.store.listPermits(name)).map((ttl) => ({ ttl }));
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
    validateLocalOptions(options);
    const semaphore = this.local(name, limit);
    const { timeout } = resolveLease(this.options.defaults, { timeout: options.timeout });
    const start = performance.now();
    if (!(await semaphore.wait(timeout))) {
      throw new SemaphoreTimeoutError(name, limit, performance.now() - start, timeout);
    }
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

  private validate(name: string, limit: number, options: SemaphoreOptions): void {
    validateKey('name', name);
    validateLimit(limit);
    validateCallOptions('semaphore', options);
  }

  private keep(options: SemaphoreOptions, scoped: boolean): KeepPolicy {
    return keepPolicy(scoped, options.autoExtend, this.options.defaults.autoExtend);
  }

  private async acquireOrThrow(
    name: string,
    limit: number,
    options: SemaphoreOptions,
    keep: KeepPolicy,
  ): Promise<HeldPermit> {
    const permit = await this.take(name, limit, options, keep);
    if (permit instanceof HeldPermit) return permit;
    throw new SemaphoreTimeoutError(
      name,
      limit,
      permit.waited,
      options.timeout ?? this.options.defaults.timeout,
      permit.refusal,
    );
  }

  private async take(
    name: string,
    limit: number,
    options: SemaphoreOptions,
    keep: KeepPolicy,
  ): Promise<HeldPermit | NotGranted> {
    validateKey('name', name);
    validateLimit(limit);
    const grant = await this.telemetry.observeAcquire('semaphore', name, () =>
      acquireLease(this.store, this.options.defaults, this.options.commandTimeout, {
        kind: 'semaphore',
        id: name,
        options,
        attempt: (token, ttl, attempt) => this.store.acquirePermit(name, token, limit, ttl, attempt),
        release: (token) => this.store.releasePermit(name, token),
      }),
    );
    if (!('token' in grant)) return grant;
    const hold = this.telemetry.startHold('semaphore');
    return new HeldPermit(name, grant, this.store, this.watchdog, keep, hold);
  }
}

export class HeldPermit extends HeldLease implements Permit {
  constructor(
    name: string,
    grant: LeaseGrant,
    store: LockStore,
    watchdog: Watchdog,
    keep: KeepPolicy,
    /** Records the hold time when the permit is released. */
    private readonly hold: HoldTimer,
  ) {
    super('semaphore', name, grant, store, watchdog, keep);
  }

  get name(): string {
    return this.id;
  }

  override release(): Promise<boolean> {
    this.hold.end();
    return super.release();
  }
}

/**
 * The permit the current async call chain holds through `withPermit` or `@Semaphore`: of `name`,
 * or with no name the innermost one.
 */
export function currentPermit(name?: string): Permit | undefined {
  const lease = leaseOfChain('semaphore', name);
  return lease instanceof HeldPermit ? lease : undefined;
}

/** A resource taken from a `LocalSemaphore`; `release()` posts it back once. */
export class LocalPermit {
  private released = false;

  constructor(
    readonly name: string,
    private readonly semaphore: LocalSemaphore,
  ) {}

  get held(): boolean {
    return !this.released;
  }

  async release(): Promise<boolean> {
    if (this.released) return false;
    this.released = true;
    this.semaphore.post();
    return true;
  }

  /** The same as `release()`, which cannot fail. */
  async releaseQuietly(): Promise<void> {
    await this.release();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
