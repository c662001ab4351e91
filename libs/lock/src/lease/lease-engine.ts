import type { LeaseKind } from '../kinds/lease-kind.js';
import type { LockStore } from '../store/store.js';
import type { LockTelemetry, SkipReason } from '../telemetry/telemetry.js';
import { acquireLease, type LeaseCall, type NotGranted } from './acquire-lease.js';
import { acquireAllIfFree } from './take-if-free.js';
import { HeldLease, type KeepPolicy, type LeaseKeeping } from './held-lease.js';
import { type ChainLease, enterHold, heldByChain, type HoldTicket } from './lease-chain.js';
import { LocalLines, lineOf } from './local-line.js';
import { createOwnerToken } from './owner-token.js';
import { ReleaseRetries } from './release-retries.js';
import { ScheduledLeaves } from './scheduled-leaves.js';
import { driftOf } from './store-capabilities.js';
import type { Watchdog } from './watchdog.js';

/** How a held lease is built: the arguments of `HeldLease`'s constructor. */
export type HeldLeaseArgs<Request> = ConstructorParameters<typeof HeldLease<Request>>;

/**
 * The class a kind's users see a held lease as (`HeldLock`, `HeldPermit`): a `HeldLease` with its
 * names (a lock's `key` and `mode`), chosen by the service that asks for it.
 */
export type LeaseView<Request, L extends HeldLease<Request>> = new (...args: HeldLeaseArgs<Request>) => L;

/** One acquisition as a public method asks for it: the lease, how it is kept once held, and how it is seen. */
export interface HoldCall<Request, L extends HeldLease<Request>> extends LeaseCall<Request> {
  readonly keep: KeepPolicy;
  /** Held by a routine: kept after it returned until this many ms since it started (`ScheduledLeaves`). */
  readonly holdAtLeast?: number | undefined;
  readonly view: LeaseView<Request, L>;
}

/**
 * The lease core of one module, for every kind of lease: it takes a lease (the local line, the
 * store's line, handover, the wait loop), holds it (the watchdog, the lost-lease signal), shares it
 * with the holders of a call chain, and gives it back. The services are thin facades over it: they
 * check what their callers pass, once, and hand it here; nothing here checks it again, nor asks
 * which kind of lease it holds. docs/ARCHITECTURE.md shows how one call travels through it.
 */
export class LeaseEngine implements LeaseKeeping {
  readonly releases = new ReleaseRetries();
  readonly lines = new LocalLines();
  readonly leaves = new ScheduledLeaves();

  constructor(
    readonly store: LockStore,
    readonly watchdog: Watchdog,
    private readonly telemetry: LockTelemetry,
    private readonly commandTimeout: number,
  ) {}

  /** The part of a lease of `ttl` ms a holder never counts on, by the store's drift rule. */
  readonly driftOf = (ttl: number): number => driftOf(this.store, ttl);

  /** One acquisition: the held lease, or how long it waited in vain. */
  async acquire<Request, L extends HeldLease<Request>>(call: HoldCall<Request, L>): Promise<L | NotGranted> {
    const { kind, id, policy } = call;
    // A release of an earlier lease under the caller's own token must not be retried into this one.
    if (policy.token !== undefined) this.releases.forget({ kind, id, token: policy.token });
    const grant = await this.telemetry.observeAcquire(kind.name, id, () =>
      acquireLease(this, call, this.commandTimeout),
    );
    if (!('token' in grant)) return grant;
    if (grant.handedOver !== undefined) this.telemetry.handedOver(kind.name, grant.handedOver);
    return new call.view(kind, id, call.request, grant, this, call.keep, this.telemetry.startHold(kind.name));
  }

  /**
   * The leases of several calls of one kind (one request and policy, one `policy.token`), all free,
   * in one step of the store, all or none; `undefined` when they were not all free, or nobody of this
   * process may be passed by (see `acquireAllIfFree` in acquire-lease.ts): the caller takes them one by one.
   */
  async acquireAllIfFree<Request, L extends HeldLease<Request>>(
    calls: readonly HoldCall<Request, L>[],
  ): Promise<L[] | undefined> {
    const { kind, policy } = calls[0];
    const token = policy.token ?? createOwnerToken();
    if (policy.token !== undefined) for (const { id } of calls) this.releases.forget({ kind, id, token });
    const grant = await acquireAllIfFree(this, calls, token);
    if (grant === undefined) return undefined;
    this.telemetry.acquiredAtOnce(kind.name, calls.length);
    return calls.map(
      (call) => new call.view(kind, call.id, call.request, grant, this, call.keep, this.telemetry.startHold(kind.name)),
    );
  }

  /**
   * `acquireAllIfFree` for a call chain: tickets of the leases taken; `undefined` when they were not
   * all free, or the chain holds one of them already (it is joined one by one).
   */
  async enterAllIfFree<Request, L extends HeldLease<Request>>(
    calls: readonly HoldCall<Request, L>[],
  ): Promise<HoldTicket<L>[] | undefined> {
    if (calls.some((call) => heldByChain(this.entryOf(call)) !== undefined)) return undefined;
    const leases = await this.acquireAllIfFree(calls);
    if (leases === undefined) return undefined;
    return Promise.all(leases.map((lease, i) => enterHold(this.entryOf(calls[i]), () => Promise.resolve(lease))));
  }

  /** One acquisition, or the kind's timeout error (`LockTimeoutError`, `SemaphoreTimeoutError`). */
  async acquireOrThrow<Request, L extends HeldLease<Request>>(call: HoldCall<Request, L>): Promise<L> {
    const lease = await this.acquire(call);
    if (lease instanceof HeldLease) return lease;
    const { kind, id, request, policy } = call;
    throw kind.timeoutError(id, request, lease.waited, policy.timeout, lease.refusal);
  }

  /**
   * Runs `fn` holding the lease (re-entrant: a call chain that holds it already joins it, the last of
   * its holders gives it back), and gives it back afterwards, whatever `fn` did.
   */
  /** Joins the lease the call chain holds, or waits for it, as a holder that must `leave()` (the decorators). */
  enter<Request, L extends HeldLease<Request>>(call: HoldCall<Request, L>): Promise<HoldTicket<L>> {
    const entered = enterHold(this.entryOf(call), () => this.acquireOrThrow(call), this.mayJoin(call));
    const { holdAtLeast, policy } = call;
    if (holdAtLeast === undefined) return entered;
    return entered.then((ticket) => this.leaves.holdAtLeast(ticket, holdAtLeast, policy.ttl));
  }

  /** `ticket`, whose holder keeps its share after it is done until `holdAtLeast` ms (at most `ttl`) from now, if asked. */
  heldAtLeast<L extends ChainLease>(
    ticket: HoldTicket<L>,
    holdAtLeast: number | undefined,
    ttl: number,
  ): HoldTicket<L> {
    return holdAtLeast === undefined ? ticket : this.leaves.holdAtLeast(ticket, holdAtLeast, ttl);
  }

  /** A decorated call with `onBusy: 'skip'` that did not run, for `reason`: counted. */
  skipped(kind: LeaseKind, reason: SkipReason): void {
    this.telemetry.skipped(kind.name, reason);
  }

  /** The leases of `kind` on `id` held in this process (by `token`, or by anybody without one), newest last. */
  leasesOf<Request>(kind: LeaseKind<Request>, id: string, token?: string): HeldLease<Request>[] {
    return this.watchdog.leasesOf<HeldLease<Request>>(kind, id, token);
  }

  /**
   * Whether `token` is the store's token of a lease of `kind` on `id` that a holder of this process
   * passed on, without a command, to a holder with another token (`LeaseGrant.storeToken`): a by-token
   * call with it is its old holder's, and must not touch the new holder's lease.
   */
  passedOn<Request>(kind: LeaseKind<Request>, id: string, token: string): boolean {
    return this.lines.isPassedOn(lineOf(kind, id), token);
  }

  /** The module is closing: no renewal, release retry or report any more. */
  close(): void {
    this.watchdog.close();
    this.releases.close();
  }

  /**
   * Throws at once when the call chain holds the lease of `call` and the call may not join it (an
   * upgrade): for a call on several keys, before any of them is waited for.
   */
  refuseUnjoinable<Request>(call: LeaseCall<Request>): void {
    const held = heldByChain(this.entryOf(call));
    if (held instanceof HeldLease) this.mayJoin(call)(held as HeldLease<Request>);
  }

  /** Refuses to join a lease of the chain that the call may not share (the kind says: an upgrade). */
  private mayJoin<Request>({ kind, id, request }: LeaseCall<Request>): (held: HeldLease<Request>) => void {
    return (held) => {
      const refusal = kind.joinRefusal?.(held.request, request, id);
      if (refusal !== undefined) throw refusal;
    };
  }

  private entryOf({ kind, id }: LeaseCall): { kind: string; id: string; scope: object } {
    // Two applications (two modules) in one process never share a lease: the store is the scope.
    return { kind: kind.name, id, scope: this.store };
  }
}
