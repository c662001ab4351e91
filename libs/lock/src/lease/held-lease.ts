import type { LeaseKind } from '../kinds/lease-kind.js';
import { errorMessage, LockBackendError, LockLostError } from '../lock.errors.js';
import { type AcquirePolicy, validateLeaseTtl } from '../options/call-options.js';
import type { LockStore } from '../store/store.js';
import type { HandedOverVia, HoldTimer } from '../telemetry/telemetry.js';
import { type LocalLines, lineOf, MAX_PASSES_IN_A_ROW } from './local-line.js';
import type { ReleaseRetries } from './release-retries.js';
import { leftToPass } from './handover-rules.js';
import { checkTtlOn, driftOf } from './store-capabilities.js';
import type { Watchdog, WatchedLease } from './watchdog.js';

/** One lease to take, its options checked and resolved by the public method that was called. */
export interface LeaseCall<Request = unknown> {
  readonly kind: LeaseKind<Request>;
  /** The lock key or semaphore name. */
  readonly id: string;
  /** What the caller asks for beyond the lease (a semaphore's limit). */
  readonly request: Request;
  readonly policy: AcquirePolicy;
}

/** No lease within the timeout: how long it waited, and why the store refused when no holder was the reason. */
export interface NotGranted {
  waited: number;
  refusal?: string;
}

/** What the wait loop hands over when a lease is won. */
export interface LeaseGrant {
  token: string;
  /**
   * The token the store holds the lease under, when it is not `token`: a lease a holder of this
   * process passed on without a command (`LocalPass`) stays under the token of the holder that took it
   * from the store — the tenure's.
   */
  storeToken?: string;
  /**
   * The caller chose `token` (the `token` option): the lease is never passed within the process, to it
   * or from it, so that the store always knows it by that token (it may be used from another process).
   */
  ownToken: boolean;
  /** Passed here without a command: the passes it has made in a row since taken from the store. Else 0. */
  passesInARow?: number;
  /** Passed here without a command: its deadline and next renewal as its previous holder knew them. */
  times?: { validUntil: number; extendAt: number };
  /**
   * Got from a releasing holder: passed within the process without a command (`process`), or handed
   * over by a release through the store (`store`). Absent for a lease an attempt took.
   */
  handedOver?: HandedOverVia;
  /** Handed over by a release: the fence it came with. Else drawn when the holder asks (`fence()`). */
  fence?: number;
  /** Milliseconds spent waiting (exactly 0 when it was free). */
  elapsed: number;
  ttl: number;
  /**
   * The lease the store applied: `ttl`, or for a lease handed over by a release the store's short
   * handover lease, which the new holder extends to `ttl` at once.
   */
  serverTtl: number;
  /** `performance.now()` before which the lease surely did not start. */
  sentAt: number;
}

/** How a lease is kept: renewed by the watchdog or not, whether its loss is reported, who releases it. */
export interface KeepPolicy {
  /** Set for good once holders outlive the one that took the lease (`keepExtending()`). */
  autoExtend: boolean;
  /** Log the loss and tell `onLockLost`: the lease was renewed, or a scope (`withLock`, …) still holds it. */
  reportLoss: boolean;
  /** Held by a scope, which releases it when its routine ends: a graceful shutdown waits for that. */
  scoped: boolean;
}

/**
 * A bare lease (`lock()`, `acquire()`) is renewed, and its loss reported, only when asked: a
 * lease nobody releases must still run out. A lease held by a scope (`withLock`, `withPermit`,
 * the decorators) is renewed unless asked not to (`scopedDefault`), and its loss always reported.
 */
export function keepPolicy(scoped: boolean, autoExtend: boolean | undefined, scopedDefault: boolean): KeepPolicy {
  if (!scoped) return { autoExtend: autoExtend ?? false, reportLoss: autoExtend ?? false, scoped };
  return { autoExtend: autoExtend ?? scopedDefault, reportLoss: true, scoped };
}

/** What keeps the held leases of one module: its store, watchdog, release retries and local lines. */
export interface LeaseKeeping {
  readonly store: LockStore;
  readonly watchdog: Watchdog;
  readonly releases: ReleaseRetries;
  readonly lines: LocalLines;
}

/**
 * One lease a caller holds, of any kind. It knows how long it is still valid (from the send time of
 * the last acquire or extension that succeeded, so a late reply never stretches it), aborts its
 * `signal` once it is lost, and is released once. Each kind's users see it through a view of their
 * own, a subclass the service names in its calls (`LeaseView`: a lock's `key`, `mode`, `unlock()`; a
 * permit's `name`), which also says how one holder of a call chain sees it (`shareWith`).
 */
export class HeldLease<Request = unknown> implements WatchedLease {
  private state: 'held' | 'released' | 'lost' = 'held';
  /** Made on first use of `signal`: most leases are released before anybody looks at it. */
  private lostController?: AbortController;
  private lostError?: LockLostError;
  /** `performance.now()` up to which the lease is surely still ours. */
  private validUntil: number;
  /** The lease length used by renewals: the ttl it was taken with, or the last one given to `expire()`. */
  private leaseTtl: number;
  /**
   * Settles once the extension on its way (a renewal, or `expire()`) has been answered and its answer
   * applied; `undefined` when none is. One at a time: Redis applies the commands of a lease in the order
   * they were sent, and so are their answers here — an older answer never undoes a newer one.
   */
  private extension?: Promise<void>;
  /** The fence, once drawn (or handed over with the lease); the draw on its way meanwhile. */
  private drawnFence?: number;
  private drawing?: Promise<number>;
  /** When the watchdog should renew it next (only with `autoExtend`). */
  extendAt: number;
  /** How long the lease the store holds now runs: the short handover lease until the first renewal, then the ttl. */
  serverLease: number;
  /** Handed over for a short lease: the watchdog extends it to `ttl` once, `autoExtend` or not. */
  mustExtend: boolean;

  /** Its kind and id as one key: its line in this process (`LocalLines`), and the watchdog's key. */
  readonly line: string;
  /** The holder's token: what its users and this process's by-token calls know it by. */
  readonly token: string;
  /** The token the store holds the lease under (see `LeaseGrant.storeToken`): every store call uses it. */
  readonly storeToken: string;
  readonly elapsed: number;
  /** `performance.now()` at which the acquire, or the last extension that succeeded, was sent. */
  private leaseSentAt: number;
  private readonly ownToken: boolean;
  /** The passes without a command this lease has made in a row since it was taken from the store. */
  private readonly passesInARow: number;

  constructor(
    readonly kind: LeaseKind<Request>,
    /** The lock key or semaphore name. */
    readonly id: string,
    /** What it was taken asking (the kind's request: a lock's mode, a semaphore's limit). */
    readonly request: Request,
    grant: LeaseGrant,
    private readonly keeping: LeaseKeeping,
    public policy: KeepPolicy,
    /** Records the hold time when the lease is released. */
    private readonly hold: HoldTimer,
  ) {
    this.line = lineOf(kind, id);
    this.token = grant.token;
    this.storeToken = grant.storeToken ?? grant.token;
    this.ownToken = grant.ownToken;
    this.leaseSentAt = grant.sentAt;
    this.passesInARow = grant.passesInARow ?? 0;
    this.drawnFence = grant.fence;
    this.elapsed = Math.round(grant.elapsed);
    this.leaseTtl = grant.ttl;
    this.validUntil =
      grant.times?.validUntil ?? grant.sentAt + grant.serverTtl - driftOf(keeping.store, grant.serverTtl);
    this.extendAt = grant.times?.extendAt ?? grant.sentAt + grant.serverTtl / 3;
    this.serverLease = grant.serverTtl;
    // Shorter than asked (a handover lease), or — passed here by a holder with other settings — longer.
    this.mustExtend = grant.serverTtl !== grant.ttl;
    keeping.watchdog.track(this);
  }

  /** Aborted with a `LockLostError` once the lease is known to be lost (a release that finds it gone says so too); never by a release that frees it. */
  get signal(): AbortSignal {
    if (this.lostController === undefined) {
      this.lostController = new AbortController();
      if (this.lostError) this.lostController.abort(this.lostError);
    }
    return this.lostController.signal;
  }

  /**
   * The lease's fence: drawn by the store on the first call, while the lease is ours (one round trip),
   * then the same number without one. Strictly greater than the fence of every earlier holder of the
   * lease. Rejects with `LockLostError` when the lease is not ours any more (released, expired or
   * taken: a lease found gone is lost, its `signal` aborts) — at once, drawn before or not, once this
   * process knows it — with `LockBackendError` when the store cannot be reached (the next call tries again).
   */
  fence(): Promise<number> {
    if (this.state !== 'held') return Promise.reject(this.lostError ?? this.lossOf('released'));
    if (this.drawnFence !== undefined) return Promise.resolve(this.drawnFence);
    this.drawing ??= this.drawFence().finally(() => (this.drawing = undefined));
    return this.drawing;
  }

  private async drawFence(): Promise<number> {
    if (this.state === 'held') {
      const fence = await this.keeping.store.fence(this.kind, this.id, this.storeToken);
      if (fence > 0 && this.state === 'held') {
        this.drawnFence = fence;
        return fence;
      }
      if (fence === 0) this.lose('taken');
    }
    throw this.lostError ?? this.lossOf('released');
  }

  /**
   * Whole milliseconds the lease is still guaranteed to be ours (rounded down: never a fraction more
   * than it has); 0 once released or lost.
   */
  get validity(): number {
    return this.state === 'held' ? Math.max(0, Math.floor(this.validUntil - performance.now())) : 0;
  }

  /** Neither released nor lost: a nested call of the same chain may join it. */
  get held(): boolean {
    return this.state === 'held';
  }

  get ttl(): number {
    return this.leaseTtl;
  }

  /** `performance.now()` after which the lease counts as lost unless renewed. */
  get deadline(): number {
    return this.validUntil;
  }

  /** An extension (a renewal, or `expire()`) is on its way; the watchdog sends no second one. */
  get extending(): boolean {
    return this.extension !== undefined;
  }

  /**
   * Resets the remaining lease to `ttl` (default: its current ttl, see `leaseTtl`); renewals use it from
   * now on. `false` if the lease is no longer ours, which also aborts `signal`. Waits for a renewal
   * on its way to be answered first, so that the two never both decide.
   */
  async expire(ttl: number = this.leaseTtl): Promise<boolean> {
    validateLeaseTtl(ttl, (lease) => driftOf(this.keeping.store, lease));
    // Refused here, not by the store after it became `leaseTtl`: every renewal would then be refused.
    checkTtlOn(this.keeping.store, ttl);
    while (this.extension !== undefined) await this.extension;
    if (this.state !== 'held') return false;
    this.leaseTtl = ttl;
    const sent = this.extensionSent(ttl);
    let renewed: boolean;
    try {
      renewed = await this.keeping.store.extend(this.kind, this.id, this.storeToken, ttl);
    } catch (error) {
      sent.answered('failed');
      throw error;
    }
    if (this.state !== 'held') {
      sent.answered('failed');
      return false;
    }
    sent.answered(renewed ? 'extended' : 'lost');
    return renewed;
  }

  /**
   * An extension of the lease to `ttl` is being sent now (nothing else is on its way for it). Until its
   * answer comes, the server may apply it at any moment: the lease is surely ours only up to the sooner
   * of the lease it has and the one this extension sets, so a shorter `ttl` counts at once. `answered`
   * applies the answer: renewed from the send time, lost, or failed (the lease may or may not have been
   * extended: it keeps the sooner deadline).
   */
  extensionSent(ttl: number): { answered(outcome: 'extended' | 'lost' | 'failed'): void } {
    const sentAt = performance.now();
    this.validUntil = Math.min(this.validUntil, sentAt + ttl - driftOf(this.keeping.store, ttl));
    let settle!: () => void;
    this.extension = new Promise<void>((resolve) => (settle = resolve));
    return {
      answered: (outcome) => {
        this.extension = undefined;
        settle();
        if (this.state !== 'held') return;
        if (outcome === 'extended') this.extended(sentAt, ttl);
        else if (outcome === 'lost') this.lose('taken');
        // Its renewal, or its deadline, may now come sooner than the watchdog's timer.
        if (this.state === 'held') this.keeping.watchdog.track(this);
      },
    };
  }

  /**
   * Gives the lease back: `true` if it was ours, `false` if it was not any more (expired or
   * taken) or was already released. Renewals stop first, so that a late renewal answer changes
   * nothing. A lease already reported lost is still released: it may yet be ours. A release that
   * fails while Redis is away rejects, and is tried again in the background until the lease would
   * have run out, so that the key comes back soon after Redis does rather than a whole ttl later.
   */
  async release(): Promise<boolean> {
    if (this.state === 'released') return false;
    const unknownLoss = this.state === 'held';
    this.state = 'released';
    this.hold.end();
    const { store, watchdog, releases, lines } = this.keeping;
    watchdog.untrack(this);
    const { line } = this;
    if (unknownLoss && this.passHere(line)) return true;
    // The first waiter of this process, if any, may take the lease over in the same step (not when
    // retried later: by then it waits in the store's line like any other).
    const successor = lines.successor(line, this.token);
    lines.leaseLeft(line, this.storeToken);
    watchdog.releasing();
    try {
      const released = await store.release(this.kind, this.id, this.storeToken, successor && { successor });
      // Gone before anyone here knew (a frozen process, its renewal unanswered; another's forceUnlock):
      // the routine ran without it, which its holder is told as of any loss.
      if (!released && unknownLoss) this.reportLoss('taken');
      return released;
    } catch (error) {
      // The server's own expiry comes a little after ours (the drift margin): retrying up to it is harmless.
      const serverDeadline = this.validUntil + driftOf(store, this.leaseTtl);
      if (error instanceof LockBackendError && error.transient) {
        const retried = { kind: this.kind, id: this.id, token: this.storeToken };
        releases.retry(retried, () => store.release(this.kind, this.id, this.storeToken), serverDeadline);
      }
      throw error;
    } finally {
      // A store that hands nothing over says nothing to the successor: nothing was passed.
      successor?.passed(0);
      watchdog.released();
    }
  }

  /**
   * Passes the lease, as it stands on the store, to the waiter of this process whose turn it is, when
   * one waits for it (`LocalLines.passHere`): no command, the store's lease untouched. Not a lease
   * whose token the caller chose, nor one with an extension on its way (its answer could shorten the
   * lease), nor one with less than a third of its lease left (it goes through the store, whose
   * handover grants a fresh lease), nor one passed 16 times in a row already (the store's line moves on).
   */
  private passHere(line: string): boolean {
    if (this.ownToken || this.extension !== undefined || this.passesInARow >= MAX_PASSES_IN_A_ROW) return false;
    if (!leftToPass(this.validUntil, this.serverLease)) return false;
    const { storeToken, request, leaseSentAt: sentAt, serverLease: serverTtl, validUntil, extendAt } = this;
    const passesInARow = this.passesInARow + 1;
    const pass = { storeToken, request, sentAt, serverTtl, validUntil, extendAt, passesInARow };
    return this.keeping.lines.passHere(line, this.token, pass);
  }

  /** Called once it is known that the lease is no longer ours. */
  lose(reason: LockLostError['reason']): void {
    if (this.state !== 'held') return;
    this.state = 'lost';
    this.keeping.lines.leaseLeft(this.line, this.storeToken);
    this.keeping.watchdog.untrack(this);
    this.reportLoss(reason);
  }

  /** Aborts `signal` and, for a lease renewed or held by a scope, logs the loss and tells `onLockLost`. */
  private reportLoss(reason: LockLostError['reason']): void {
    const error = this.lossOf(reason);
    this.lostError = error;
    this.lostController?.abort(error);
    if (this.policy.reportLoss) this.keeping.watchdog.reportLost(error);
  }

  /**
   * Released by another hand than its holder's (`forceUnlock`, `LockService.unlock` by token): lost to
   * its holder at once, and its own release later sends nothing (it could only free a lease taken
   * again under a caller's own token).
   */
  releasedElsewhere(): void {
    this.lose('taken');
    this.state = 'released';
  }

  /** Renews the lease from now on (nested holders outlive the one that took it without `autoExtend`). */
  keepExtending(): void {
    if (this.policy.autoExtend || this.state !== 'held') return;
    this.policy = { ...this.policy, autoExtend: true };
    this.keeping.watchdog.track(this);
  }

  /** Releases, logging a failure instead of throwing it (`withLock`, `withPermit`, `await using`). */
  async releaseQuietly(): Promise<void> {
    await this.release().catch((error: unknown) => this.warnReleaseFailed(error));
  }

  /** A failed release is logged, never thrown over the caller's result or error: the lease runs out on its own. */
  warnReleaseFailed(error: unknown): void {
    this.keeping.watchdog.logger.warn(
      `Could not release ${this.kind.describe(this.id)} (${errorMessage(error)}); its lease will expire on its own`,
    );
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.releaseQuietly();
  }

  /** The error that says this lease is not ours any more (with its fence, if one was drawn). */
  private lossOf(reason: LockLostError['reason']): LockLostError {
    const { kind, id, token, drawnFence } = this;
    return new LockLostError(kind.name, id, token, reason, kind.describeLost(id), drawnFence);
  }

  /** An extension sent at `sentAt` succeeded. */
  private extended(sentAt: number, ttl: number): void {
    this.keeping.lines.extended(this.line, this.token, performance.now() + ttl);
    this.mustExtend = false;
    this.leaseSentAt = sentAt;
    this.validUntil = sentAt + ttl - driftOf(this.keeping.store, ttl);
    this.extendAt = sentAt + ttl / 3;
    this.serverLease = ttl;
  }
}
