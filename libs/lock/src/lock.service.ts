import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { lockKind } from './kinds/lock.kind.js';
import { keepPolicy } from './lease/held-lease.js';
import { HeldLock, type Lock, LockSet } from './held-lock.js';
import type { HoldTicket } from './lease/lease-chain.js';
import { leaseOfChain, runHolding } from './lease/lease-chain.js';
import { type HoldCall, LeaseEngine } from './lease/lease-engine.js';
import { takeInOrder, ticketOfAll } from './lease/lease-set.js';
import { createOwnerToken } from './lease/owner-token.js';
import { countOf, keyRuns } from './lease/store-capabilities.js';
import { registerLiveService, unregisterLiveService } from './live-services.js';
import { InvalidArgumentError, LockTimeoutError } from './lock.errors.js';
import { createLockLogger, type LockLogger } from './lock-logger.js';
import type { Skip } from './telemetry/telemetry.js';
import { LOCK_OPTIONS } from './lock.constants.js';
import {
  type AcquirePolicy,
  type HoldOptions,
  type LockMode,
  type LockOptions,
  resolveAcquirePolicy,
  type ServiceOptions,
  splitHoldOptions,
  validateKey,
  validateKeys,
  validateLeaseTtl,
  validateRoutine,
} from './options/call-options.js';

/** A lock as `inspect` finds it. */
export interface LockInspection {
  held: boolean;
  /** How it is held: by a writer or by readers; absent when not held. */
  mode?: LockMode;
  /** How many readers hold it (0 when a writer holds it, or nobody). */
  readers: number;
  /** Milliseconds until it is free unless renewed (the writer's lease, or the last reader's); 0 when not held. */
  ttl: number;
  /** The last fence issued for the key, when the store knows it. */
  fence?: number;
}

/**
 * Exclusive locks shared by every process on the store. A thin facade over the lease core: each
 * method checks what it is given, once, and hands it to `LeaseEngine` as a lease of `lockKind`.
 */
@Injectable()
export class LockService implements OnModuleDestroy {
  private readonly logger: LockLogger;

  /** Built by `LockModule`. @internal */
  constructor(
    @Inject(LeaseEngine) private readonly engine: LeaseEngine,
    @Inject(LOCK_OPTIONS) private readonly options: ServiceOptions,
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
   * is renewed only with `autoExtend: true`: a lock nobody unlocks must still run out. An array of
   * keys is one lock on all of them, taken in one global order (no deadlock against callers naming
   * them in another order); a wait that fails gives back the keys it had taken.
   */
  async lock(key: string | readonly string[], options: LockOptions = {}): Promise<Lock> {
    const keys = validateKeys('key', key);
    // Awaited rather than returned: an async function that returns a promise settles two ticks after it.
    if (keys.length === 1) return await this.engine.acquireOrThrow(this.call(keys[0], options, false));
    return this.lockAll(keys, options);
  }

  /** Exactly one attempt: the lock, or `null` when `key` (or one of several keys) is taken. */
  async tryLock(key: string | readonly string[], options: LockOptions = {}): Promise<Lock | null> {
    const keys = validateKeys('key', key);
    if (keys.length > 1) {
      return this.lockAll(keys, { ...options, timeout: 0 }).catch((error: unknown) => {
        if (error instanceof LockTimeoutError) return null;
        throw error;
      });
    }
    const call = this.call(keys[0], options, false);
    const lock = await this.engine.acquire({ ...call, policy: { ...call.policy, timeout: 0 } });
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
  async withLock<T>(
    key: string | readonly string[],
    fn: (lock: Lock) => T | Promise<T>,
    options: LockOptions & HoldOptions = {},
  ): Promise<T> {
    validateKeys('key', key);
    validateRoutine(fn);
    return runHolding(this.enter(key, options), fn);
  }

  /**
   * Joins the lock the call chain holds on `key`, or waits for it, as a holder that must `leave()`;
   * what `withLock` and `@WithLock` are made of.
   * @internal
   */
  async enter(key: string | readonly string[], options: LockOptions & HoldOptions = {}): Promise<HoldTicket<HeldLock>> {
    const keys = validateKeys('key', key);
    const [lockOptions, holdAtLeast] = splitHoldOptions(options);
    if (keys.length === 1) return this.engine.enter({ ...this.call(keys[0], lockOptions, true), holdAtLeast });
    const { ticket, policy } = await this.enterAll(keys, lockOptions);
    return this.engine.heldAtLeast(ticket, holdAtLeast, policy.ttl);
  }

  /**
   * A decorated call (`where`) with `onBusy: 'skip'` that did not run (`skip`: why): logged at verbose
   * level and counted (`nest_lock.skipped`).
   * @internal
   */
  skipped(where: string, skip: Skip): void {
    this.logger.verbose(`${where} skipped: ${skip.detail} (onBusy: 'skip')`);
    this.engine.skipped(lockKind, skip.reason);
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
    const held = this.engine.leasesOf(lockKind, key, token);
    const newest = held.pop();
    if (newest === undefined) {
      // Passed on in this process since: the lease under that token is another holder's now.
      if (this.engine.passedOn(lockKind, key, token)) return false;
      return this.engine.store.release(lockKind, key, token);
    }
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
    validateLeaseTtl(ttl, this.engine.driftOf);
    const held = this.engine.leasesOf(lockKind, key, token).at(-1);
    if (held) return held.expire(ttl);
    if (this.engine.passedOn(lockKind, key, token)) return false;
    return this.engine.store.extend(lockKind, key, token, ttl);
  }

  async isLocked(key: string): Promise<boolean> {
    validateKey('key', key);
    return (await countOf(this.engine.store, lockKind, key)) > 0;
  }

  /**
   * The lock on `key` as it stands, read-only: `held`, `ttl` (ms its lease still runs, 0 when free)
   * and `fence` (the last fence issued for the key: on Redis for `fenceCounterTtl` after it, on the
   * memory store while it is held).
   */
  async inspect(key: string): Promise<LockInspection> {
    validateKey('key', key);
    const { ttls, fence, holders = [] } = await this.engine.store.inspect(lockKind, key);
    if (ttls.length === 0) return { held: false, readers: 0, ttl: 0, ...(fence === undefined ? {} : { fence }) };
    const readers = holders.filter((mode) => mode === 'read').length;
    const mode: LockMode = readers > 0 ? 'read' : 'write';
    return { held: true, mode, readers, ttl: Math.max(...ttls), ...(fence === undefined ? {} : { fence }) };
  }

  /**
   * For operators: releases `key` whoever holds it (a stuck holder, a lease taken with a huge ttl),
   * as its holder's unlock would — the next fair waiter gets it, or it is freed. A holder in this
   * process loses it at once; one elsewhere finds it gone at its next renewal: its `signal` aborts with
   * `LockLostError` and `onLockLost` is told. Logged as a warning naming the key. `false` when it was not held.
   */
  async forceUnlock(key: string): Promise<boolean> {
    validateKey('key', key);
    // A holder of this process must not count on the lease while another owner may take it.
    for (const lease of this.engine.leasesOf(lockKind, key)) lease.releasedElsewhere();
    const released = await this.engine.store.forceRelease(lockKind, key);
    this.logger.warn(
      released
        ? `forceUnlock("${key}"): an operator released the lock, whoever held it`
        : `forceUnlock("${key}"): the lock was not held, nothing released`,
    );
    return released;
  }

  /**
   * Several keys, taken one by one in the one global order (`keyRuns`), each waiting at most
   * what is left of `timeout` while holding the earlier ones, all under one token; if one cannot be
   * taken, the others are given back and its error is thrown.
   */
  private async lockAll(keys: readonly string[], options: LockOptions): Promise<LockSet> {
    const { runs, timeout, callFor, keep } = this.callsFor(keys, options, false);
    const start = performance.now();
    // The keys taken first are renewed while the next ones are waited for (a wait may outlast their
    // ttl), then kept as the caller asked.
    const renewed = { ...keep, autoExtend: true };
    const leases = await takeInOrder(runs, timeout, {
      all: (run, timeLeft) =>
        this.engine.acquireAllIfFree(run.map((id) => ({ ...callFor(id, timeLeft), keep: renewed }))),
      one: (id, timeLeft) => this.engine.acquireOrThrow({ ...callFor(id, timeLeft), keep: renewed }),
      giveBack: (lease) => lease.releaseQuietly(),
    }).catch((error: unknown) => {
      throw asWholeWait(error, start, timeout);
    });
    for (const lease of leases) lease.policy = keep;
    await giveBackIfAnyLost(leases, (lease) => lease.releaseQuietly());
    return new LockSet(leases, elapsedSince(start, leases));
  }

  /**
   * `lockAll` for a call chain (`withLock`, the decorators): a key the chain holds already is joined
   * (a write inside a read of it still rejects at once), the others are taken.
   */
  private async enterAll(
    keys: readonly string[],
    options: LockOptions,
  ): Promise<{ ticket: HoldTicket<HeldLock>; policy: AcquirePolicy }> {
    const { runs, timeout, callFor, policy } = this.callsFor(keys, options, true);
    // An upgrade of any of them is refused before anything is waited for.
    for (const id of runs.flat()) this.engine.refuseUnjoinable(callFor(id, timeout));
    const start = performance.now();
    const tickets = await takeInOrder(runs, timeout, {
      all: (run, timeLeft) => this.engine.enterAllIfFree(run.map((id) => callFor(id, timeLeft))),
      one: (id, timeLeft) => this.engine.enter(callFor(id, timeLeft)),
      giveBack: (ticket) => ticket.leave(),
    }).catch((error: unknown) => {
      throw asWholeWait(error, start, timeout);
    });
    await giveBackIfAnyLost(
      tickets,
      (ticket) => ticket.leave(),
      (ticket) => ticket.lease,
    );
    const leases = tickets.map((ticket) => ticket.lease);
    const elapsed = elapsedSince(start, leases);
    return { ticket: ticketOfAll(tickets, (handles) => new LockSet(handles as Lock[], elapsed)), policy };
  }

  /**
   * The keys in the order they are taken, in runs that one step may take together, and the call of
   * each: the options checked once, one token for all.
   */
  private callsFor(keys: readonly string[], options: LockOptions, scoped: boolean) {
    const call = this.call(keys[0], options, scoped);
    for (const key of keys.slice(1)) this.refuseOwnTokenInOtherMode(key, call.request, call.policy.token);
    const token = call.policy.token ?? createOwnerToken();
    return {
      runs: keyRuns(this.engine.store, keys),
      timeout: call.policy.timeout,
      keep: call.keep,
      policy: call.policy,
      callFor: (id: string, timeLeft: number): HoldCall<LockMode, HeldLock> => ({
        ...call,
        id,
        policy: { ...call.policy, token, timeout: timeLeft },
      }),
    };
  }

  /** The lease `key` asks for, its options checked and resolved; `scoped`: held by `withLock` or a decorator. */
  private call(key: string, options: LockOptions, scoped: boolean): HoldCall<LockMode, HeldLock> {
    const { defaults } = this.options;
    const policy = resolveAcquirePolicy('lock', defaults, options, this.engine.driftOf);
    const mode = options.mode ?? 'write';
    this.refuseOwnTokenInOtherMode(key, mode, policy.token);
    return {
      kind: lockKind,
      id: key,
      request: mode,
      policy,
      keep: keepPolicy(scoped, options.autoExtend, defaults.autoExtend),
      view: HeldLock,
    };
  }

  /**
   * A caller's own `token` that holds `key` in this process in the other mode may not ask for it in
   * this one: one token is one owner, and an attempt under it would count as "held already" or undo
   * the other lease when it gives up. Refused at once (a write asked inside a read of one call chain
   * is `LockUpgradeError` before this).
   */
  private refuseOwnTokenInOtherMode(key: string, mode: LockMode, token: string | undefined): void {
    if (token === undefined) return;
    if (this.engine.passedOn(lockKind, key, token)) {
      // The store still holds the lock under it for the holder it was passed to: it would answer "yours".
      throw new InvalidArgumentError(
        'token',
        `its lock on "${key}" was released and passed on in this process, which holds it under that token still: ask with a new token`,
      );
    }
    const held = this.engine.leasesOf(lockKind, key, token).find((lease) => lease.request !== mode);
    if (held === undefined) return;
    throw new InvalidArgumentError(
      'token',
      `it holds lock "${key}" to ${held.request} in this process: one token is one owner, it cannot also ask to ${mode}`,
    );
  }
}

/**
 * All of several keys or none: when one of the leases taken was lost meanwhile (its lease ran out
 * while a later key was waited for, a renewal failed), every one is given back and that loss thrown.
 */
async function giveBackIfAnyLost<T>(
  taken: readonly T[],
  giveBack: (each: T) => Promise<void>,
  leaseOf: (each: T) => { readonly signal: AbortSignal } = (each) => each as { readonly signal: AbortSignal },
): Promise<void> {
  const lost = taken.find((each) => leaseOf(each).signal.aborted);
  if (lost === undefined) return;
  await Promise.all(taken.map(giveBack));
  throw leaseOf(lost).signal.reason;
}

/**
 * The timeout error of one of several keys (waited for with what was left of the timeout) as the
 * caller of all of them sees it: its own timeout, and all the time it waited since `start`.
 */
function asWholeWait(error: unknown, start: number, timeout: number): unknown {
  if (!(error instanceof LockTimeoutError)) return error;
  return new LockTimeoutError(error.key, performance.now() - start, timeout, error.refusal);
}

/** Whole ms spent waiting for several leases: exactly 0 when every one of them was free. */
function elapsedSince(start: number, leases: readonly { elapsed: number }[]): number {
  return leases.every((lease) => lease.elapsed === 0) ? 0 : Math.round(performance.now() - start);
}

/**
 * The lock the current async call chain holds through `withLock` or `@WithLock`: on `key`, or
 * with no key the innermost one. For decorated methods, which are not handed their lock.
 */
export function currentLock(key?: string): Lock | undefined {
  const lease = leaseOfChain(lockKind.name, key);
  return lease instanceof HeldLock ? lease : undefined;
}
