import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { semaphoreKind } from './kinds/semaphore.kind.js';
import { keepPolicy } from './lease/held-lease.js';
import { HeldPermit, type Permit } from './held-permit.js';
import { type HoldTicket, leaseOfChain, runHolding } from './lease/lease-chain.js';
import { type HoldCall, LeaseEngine } from './lease/lease-engine.js';
import { countOf } from './lease/store-capabilities.js';
import { registerLiveService, unregisterLiveService } from './live-services.js';
import type { LocalSemaphore } from './local-semaphore.js';
import { type LocalPermit, LocalSemaphores } from './local-semaphores.js';
import { LOCK_OPTIONS } from './lock.constants.js';
import {
  resolveAcquirePolicy,
  resolveLease,
  type SemaphoreOptions,
  type ServiceOptions,
  validateKey,
  validateLimit,
  validateLocalOptions,
  validateRoutine,
  type HoldOptions,
  splitHoldOptions,
} from './options/call-options.js';
import { createLockLogger, type LockLogger } from './lock-logger.js';
import type { Skip } from './telemetry/telemetry.js';

export { LocalPermit } from './local-semaphores.js';

/** One permit that `SemaphoreService.holders()` found held. */
export interface PermitHolder {
  /** Milliseconds its lease still runs. */
  readonly ttl: number;
}

/**
 * Counting semaphores shared by every process on the store: at most `limit` permits of a name are
 * held at once, and the permit of a holder that died comes back after its `ttl`. A thin facade over
 * the lease core, as `LockService` is (leases of `semaphoreKind`, whose request is the caller's
 * limit); and in-process semaphores (`local`).
 */
@Injectable()
export class SemaphoreService implements OnModuleDestroy {
  private readonly localSemaphores = new LocalSemaphores();
  private readonly logger: LockLogger;

  /** Built by `LockModule`. @internal */
  constructor(
    @Inject(LeaseEngine) private readonly engine: LeaseEngine,
    @Inject(LOCK_OPTIONS) private readonly options: ServiceOptions,
  ) {
    this.logger = createLockLogger(options.logger, 'SemaphoreService');
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
    return this.engine.acquireOrThrow(this.call(name, limit, options, false));
  }

  /** Exactly one attempt: a permit, or `null` when all `limit` are held. */
  async tryAcquire(name: string, limit: number, options: SemaphoreOptions = {}): Promise<Permit | null> {
    const call = this.call(name, limit, options, false);
    const permit = await this.engine.acquire({ ...call, policy: { ...call.policy, timeout: 0 } });
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
    options: SemaphoreOptions & HoldOptions = {},
  ): Promise<T> {
    const [leaseOptions, holdAtLeast] = splitHoldOptions(options);
    const call = this.call(name, limit, leaseOptions, true);
    validateRoutine(fn);
    return runHolding(this.engine.enter({ ...call, holdAtLeast }), fn);
  }

  /**
   * Joins the permit the call chain holds of `name`, or waits for one, as a holder that must
   * `leave()`; what `withPermit` and `@Semaphore` are made of.
   * @internal
   */
  async enter(
    name: string,
    limit: number,
    options: SemaphoreOptions & HoldOptions = {},
  ): Promise<HoldTicket<HeldPermit>> {
    const [leaseOptions, holdAtLeast] = splitHoldOptions(options);
    return this.engine.enter({ ...this.call(name, limit, leaseOptions, true), holdAtLeast });
  }

  /**
   * Joins the permit of the in-process semaphore `name` the call chain holds, or waits up to
   * `timeout` for one; what `@Semaphore(limit, { scope: 'local' })` is made of.
   * @internal
   */
  async enterLocal(
    name: string,
    limit: number,
    options: Pick<SemaphoreOptions, 'timeout'> & HoldOptions = {},
  ): Promise<HoldTicket<LocalPermit>> {
    const [localOptions, holdAtLeast] = splitHoldOptions(options);
    const ticket = await this.localSemaphores.enter(name, limit, this.localTimeout(name, limit, localOptions));
    // A local permit has no lease to run out: it is kept no longer than the module's default ttl.
    return this.engine.heldAtLeast(ticket, holdAtLeast, this.options.defaults.ttl);
  }

  /**
   * A decorated call (`where`) with `onBusy: 'skip'` that did not run (`skip`: why): logged at verbose
   * level and counted (`nest_lock.skipped`).
   * @internal
   */
  skipped(where: string, skip: Skip): void {
    this.logger.verbose(`${where} skipped: ${skip.detail} (onBusy: 'skip')`);
    this.engine.skipped(semaphoreKind, skip.reason);
  }

  /** Permits of `name` held right now (expired leases not counted). */
  async count(name: string): Promise<number> {
    validateKey('name', name);
    return countOf(this.engine.store, semaphoreKind, name);
  }

  /**
   * The permits of `name` held right now, read-only: one entry per unexpired permit, with the ms
   * its lease still runs, soonest to run out first (`length` is what `count()` says). Owner tokens
   * are not listed: they are what releases a permit.
   */
  async holders(name: string): Promise<PermitHolder[]> {
    validateKey('name', name);
    return (await this.engine.store.inspect(semaphoreKind, name)).ttls.map((ttl) => ({ ttl }));
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
    return this.localSemaphores.acquire(name, limit, this.localTimeout(name, limit, options));
  }

  /**
   * The in-process semaphore of `name` (created with `limit` resources on first use), as used by
   * `@Semaphore(limit, { scope: 'local' })`. One name keeps one limit.
   */
  local(name: string, limit: number): LocalSemaphore {
    validateKey('name', name);
    validateLimit(limit);
    return this.localSemaphores.of(name, limit);
  }

  /** The lease a permit of `name` asks for, its arguments checked and resolved; `scoped`: held by `withPermit` or a decorator. */
  private call(name: string, limit: number, options: SemaphoreOptions, scoped: boolean): HoldCall<number, HeldPermit> {
    validateKey('name', name);
    validateLimit(limit);
    const { defaults } = this.options;
    return {
      kind: semaphoreKind,
      id: name,
      request: limit,
      policy: resolveAcquirePolicy('semaphore', defaults, options, this.engine.driftOf),
      keep: keepPolicy(scoped, options.autoExtend, defaults.autoExtend),
      view: HeldPermit,
    };
  }

  /** A local semaphore's wait: its name and limit checked, and `timeout`, the one option it honours. */
  private localTimeout(name: string, limit: number, options: Pick<SemaphoreOptions, 'timeout'>): number {
    validateKey('name', name);
    validateLimit(limit);
    validateLocalOptions(options);
    return resolveLease(this.options.defaults, { timeout: options.timeout }).timeout;
  }
}

/**
 * The permit the current async call chain holds through `withPermit` or `@Semaphore`: of `name`,
 * or with no name the innermost one.
 */
export function currentPermit(name?: string): Permit | undefined {
  const lease = leaseOfChain(semaphoreKind.name, name);
  return lease instanceof HeldPermit ? lease : undefined;
}
