import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { acquireLease, type NotGranted } from './lease/acquire-lease.js';
import { HeldLease, type KeepPolicy, keepPolicy, type LeaseGrant, validateLeaseTtl } from './lease/held-lease.js';
import { enterHold, holdDuring, type HoldTicket, leaseOfChain } from './lease/lease-chain.js';
import { Watchdog } from './lease/watchdog.js';
import { registerLiveService, unregisterLiveService } from './live-services.js';
import { createLockLogger, type LockLogger } from './lock-logger.js';
import { LOCK_OPTIONS } from './lock.constants.js';
import { LockTimeoutError } from './lock.errors.js';
import type { ResolvedModuleOptions } from './lock-module.options.js';
import { type LockOptions, validateCallOptions, validateKey, validateRoutine } from './options/call-options.js';
import { type LockInspection, LockStore } from './store/store.js';
import { type HoldTimer, LockTelemetry } from './telemetry/telemetry.js';

/** A held lock. Its lease runs out after `ttl` unless it is renewed (`autoExtend`, or `expire()`). */
export interface Lock {
  readonly key: string;
  /** Owner token: 128 random bits, fresh for every acquisition, unless the caller supplied one. */
  readonly token: string;
  /** Milliseconds spent waiting before the lock was acquired (exactly 0 when it was free). */
  readonly elapsed: number;
  /**
   * Strictly greater than the fence of every earlier acquisition of this key, by any owner in
   * any process: a protected resource that refuses writes with a fence lower than the highest it
   * has seen refuses the late writes of a holder that lost its lease.
   */
  readonly fence: number;
  /** Aborted with a `LockLostError` once the lease is known to be lost; never by `unlock()`. */
  readonly signal: AbortSignal;
  /** Milliseconds the lease is still guaranteed to be ours (0 once unlocked or lost). */
  readonly validity: number;
  /** `true`: released by us; `false`: no longer ours (expired or taken). Never deletes another owner's lock. */
  unlock(): Promise<boolean>;
  /** Resets the remaining lease to `ttl` (default: its current ttl: the one it was taken with, or the last given to `expire()`); `false` if no longer ours. */
  expire(ttl?: number): Promise<boolean>;
  /** `await using lock = await locks.lock('key')` unlocks at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

@Injectable()
export class LockService implements OnModuleDestroy {
  private readonly logger: LockLogger;

  constructor(
    @Inject(LockStore) private readonly store: LockStore,
    @Inject(LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
    @Inject(Watchdog) private readonly watchdog: Watchdog,
    @Inject(LockTelemetry) private readonly telemetry: LockTelemetry,
  ) {
    this.logger = createLockLogger(options.logger, 'LockService');
    // Lets decorated methods of instances Nest built by a factory find this service.
    registerLiveService(LockService, this);
  }

  onModuleDestroy(): void {
    unregisterLiveService(LockService, this);
  }

  /**
   * Waits up to `timeout` for `key`; rejects with `LockTimeoutError` when it stays taken. The lease
   * is renewed only with `autoExtend: true`: a lock nobody unlocks must still run out.
   */
  async lock(key: string, options: LockOptions = {}): Promise<Lock> {
    return this.acquireOrThrow(key, options, this.keep(options, false));
  }

  /** Exactly one attempt: the lock, or `null` when `key` is taken. */
  async tryLock(key: string, options: LockOptions = {}): Promise<Lock | null> {
    validateCallOptions('lock', options);
    const lock = await this.acquire(key, { ...options, timeout: 0 }, this.keep(options, false));
    return lock instanceof HeldLock ? lock : null;
  }

  /**
   * Runs `fn` under the lock and unlocks afterwards, whatever `fn` did. The lease is renewed while
   * `fn` runs (`autoExtend`, default on). A failure to unlock is logged, never thrown over `fn`'s
   * result or error. If the lease is lost meanwhile, `lock.signal` aborts and `onLockLost` is told;
   * `withLock` still returns what `fn` returned: stop early by watching the signal.
   *
   * Reentrant: inside a call chain that holds `key` through `withLock` (or `@WithLock`), `fn` joins
   * that lock; the lock is given back when the last holder of the chain is done.
   */
  async withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>, options: LockOptions = {}): Promise<T> {
    validateKey('key', key);
    validateRoutine(fn);
    validateCallOptions('lock', options);
    return holdDuring(
      { kind: 'lock', id: key, scope: this.store },
      () => this.acquireOrThrow(key, options, this.keep(options, true)),
      fn,
    );
  }

  /**
   * Joins the lock the call chain holds on `key`, or waits for it, as a holder that must `leave()`;
   * what `withLock` and `@WithLock` are made of.
   * @internal
   */
  async enter(key: string, options: LockOptions = {}): Promise<HoldTicket<HeldLock>> {
    validateKey('key', key);
    validateCallOptions('lock', options);
    return enterHold({ kind: 'lock', id: key, scope: this.store }, () =>
      this.acquireOrThrow(key, options, this.keep(options, true)),
    );
  }

  /**
   * Releases `key` if `token` holds it (e.g. a token handed over from another process). A `Lock` of
   * this process with that token is lost at once, before the release is sent (its `signal` aborts with
   * `LockLostError`, reason `taken`): its holder must not count on the lease while another owner may
   * take it. A holder in another process learns it at its next renewal, as after `forceUnlock`.
   */
  async unlock(key: string, token: string): Promise<boolean> {
    validateKey('key', key);
    validateKey('token', token);
    const held = this.watchdog.leasesOf('lock', key, token);
    const newest = held.pop();
    if (newest === undefined) return this.store.releaseLock(key, token);
    for (const lease of held) lease.releasedElsewhere();
    newest.lose('taken');
    // Released as its holder would: the next waiter of this process, waiting for a pass, gets it at once.
    return newest.release();
  }

  /**
   * Resets the lease of `key` to `ttl` if `token` holds it. A lease this process holds is extended as
   * its holder's `expire(ttl)` would: its `validity`, renewals and lost-lease deadline follow the new
   * lease. A holder in another process cannot know: it renews with its own ttl at its next renewal.
   */
  async expire(key: string, token: string, ttl: number): Promise<boolean> {
    validateKey('key', key);
    validateKey('token', token);
    validateLeaseTtl(this.store, ttl);
    const held = this.watchdog.leasesOf('lock', key, token).at(-1);
    return held ? held.expire(ttl) : this.store.extendLock(key, token, ttl);
  }

  async isLocked(key: string): Promise<boolean> {
    validateKey('key', key);
    return this.store.isLocked(key);
  }

  /**
   * The lock on `key` as it stands, read-only: `held`, `ttl` (ms its lease still runs, 0 when free)
   * and `fence` (the last fence issued for the key: always on Redis once the key was ever locked,
   * on the memory store while it is held).
   */
  async inspect(key: string): Promise<LockInspection> {
    validateKey('key', key);
    return this.store.inspectLock(key);
  }

  /**
   * For operators: releases `key` whoever holds it (a stuck holder, a lease taken with a huge ttl),
   * as its holder's unlock would — the next fair waiter gets it, or it is freed. The holder finds
   * it gone at its next renewal: its `signal` aborts with `LockLostError` and `onLockLost` is told.
   * Logged as a warning naming the key. `false` when it was not held.
   */
  async forceUnlock(key: string): Promise<boolean> {
    validateKey('key', key);
    // A holder of this process must not count on the lease while another owner may take it.
    for (const lease of this.watchdog.leasesOf('lock', key)) lease.releasedElsewhere();
    const released = await this.store.forceReleaseLock(key);
    this.logger.warn(
      released
        ? `forceUnlock("${key}"): an operator released the lock, whoever held it`
        : `forceUnlock("${key}"): the lock was not held, nothing released`,
    );
    return released;
  }

  private keep(options: LockOptions, scoped: boolean): KeepPolicy {
    return keepPolicy(scoped, options.autoExtend, this.options.defaults.autoExtend);
  }

  private async acquireOrThrow(key: string, options: LockOptions, keep: KeepPolicy): Promise<HeldLock> {
    const lock = await this.acquire(key, options, keep);
    if (lock instanceof HeldLock) return lock;
    throw new LockTimeoutError(key, lock.waited, options.timeout ?? this.options.defaults.timeout, lock.refusal);
  }

  private async acquire(key: string, options: LockOptions, keep: KeepPolicy): Promise<HeldLock | NotGranted> {
    validateKey('key', key);
    // A release of an earlier lease under the caller's own token must not be retried into this one.
    if (options.token !== undefined) this.watchdog.forgetRelease({ kind: 'lock', id: key, token: options.token });
    const grant = await this.telemetry.observeAcquire('lock', key, () =>
      acquireLease(this.store, this.options.defaults, this.options.commandTimeout, {
        kind: 'lock',
        id: key,
        options,
        attempt: (token, ttl, attempt) => this.store.acquireLock(key, token, ttl, attempt),
        release: (token) => this.store.releaseLock(key, token),
      }),
    );
    if (!('token' in grant)) return grant;
    const hold = this.telemetry.startHold('lock');
    return new HeldLock(key, grant, this.store, this.watchdog, keep, hold);
  }
}

export class HeldLock extends HeldLease implements Lock {
  constructor(
    key: string,
    grant: LeaseGrant,
    store: LockStore,
    watchdog: Watchdog,
    keep: KeepPolicy,
    /** Records the hold time when the lock is released. */
    private readonly hold: HoldTimer,
  ) {
    super('lock', key, grant, store, watchdog, keep);
  }

  get key(): string {
    return this.id;
  }

  unlock(): Promise<boolean> {
    return this.release();
  }

  override release(): Promise<boolean> {
    this.hold.end();
    return super.release();
  }
}

/**
 * The lock the current async call chain holds through `withLock` or `@WithLock`: on `key`, or
 * with no key the innermost one. For decorated methods, which are not handed their lock.
 */
export function currentLock(key?: string): Lock | undefined {
  const lease = leaseOfChain('lock', key);
  return lease instanceof HeldLock ? lease : undefined;
}
