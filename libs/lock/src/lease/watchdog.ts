import type { LeaseKind } from '../kinds/lease-kind.js';
import { errorMessage, LockBackendError, type LockLostError } from '../lock.errors.js';
import { LONGEST_DURATION } from '../options/durations.js';
import type { LockStore } from '../store/store.js';
import { lineOf } from './local-line.js';
import { extendAll } from './store-capabilities.js';

/** What the watchdog reads and calls of a held lease (`HeldLease`). */
export interface WatchedLease {
  readonly kind: LeaseKind;
  readonly id: string;
  /** Its kind and id as one key (`lineOf`): the watchdog finds the leases of a key by it. */
  readonly line: string;
  readonly token: string;
  /** The token the store holds the lease under (the holder's, unless passed on within the process). */
  readonly storeToken: string;
  /** The lease length renewals use. */
  readonly ttl: number;
  /** `performance.now()` after which the lease counts as lost unless renewed. */
  readonly deadline: number;
  /** When the watchdog should renew it next (with `autoExtend`, or while it `mustExtend`). */
  extendAt: number;
  /** How long the lease the store holds now runs (the short handover lease until the first renewal). */
  readonly serverLease: number;
  /** An extension is on its way: the watchdog sends no second one, and its answer decides. */
  readonly extending: boolean;
  /** Handed over for a short lease: renewed once, `autoExtend` or not. */
  readonly mustExtend: boolean;
  readonly policy: { readonly autoExtend: boolean; readonly reportLoss: boolean; readonly scoped: boolean };
  /** An extension to `ttl` is sent now; `answered` applies its outcome (see `HeldLease.extensionSent`). */
  extensionSent(ttl: number): { answered(outcome: 'extended' | 'lost' | 'failed'): void };
  lose(reason: LockLostError['reason']): void;
}

/**
 * Keeps the leases a process holds: renews those with `autoExtend` every `ttl / 3` by
 * compare-and-pexpire, and declares a lease lost when a renewal finds it gone or taken, or when
 * its deadline passes first. One timer for every lease of the store; the renewals that fall due
 * together travel in one round trip.
 *
 * It never re-acquires: a lease that is gone stays gone, and its holder is told through the
 * lease's `signal`. Answers that arrive after an intentional release are ignored.
 */
export class Watchdog {
  private readonly leases = new Set<WatchedLease>();
  /**
   * The same leases by kind and id (`lineOf`), oldest first: one token may hold one key twice (a caller's
   * own token, given twice), readers share one. Arrays, not sets: most keys have one lease at a time.
   */
  private readonly byLine = new Map<string, WatchedLease[]>();
  /** Releases on their way to the store: a graceful shutdown waits for them (see `drain`). */
  private releasesInFlight = 0;
  private timer?: NodeJS.Timeout;
  /** `performance.now()` at which `timer` fires; `Infinity` when none is set. */
  private timerDue = Infinity;
  private closed = false;

  constructor(
    private readonly store: LockStore,
    private readonly onLockLost: ((error: LockLostError) => void) | undefined,
    /** Where losses, failed releases and a throwing hook are reported (the module's `logger` option). */
    readonly logger: { warn(message: string): void },
  ) {}

  /** Keeps `lease`, or looks at its times again after they moved (an extension was answered). */
  track(lease: WatchedLease): void {
    if (this.closed) return;
    if (!this.leases.has(lease)) {
      this.leases.add(lease);
      const leases = this.byLine.get(lease.line);
      if (leases === undefined) this.byLine.set(lease.line, [lease]);
      else leases.push(lease);
    }
    // Leases taken later with the same ttl fall due later: most calls change no timer.
    const due = nextEventOf(lease);
    if (due < this.timerDue) this.schedule(due);
  }

  untrack(lease: WatchedLease): void {
    if (!this.leases.delete(lease)) return;
    const leases = this.byLine.get(lease.line);
    if (leases === undefined) return;
    if (leases.length === 1) this.byLine.delete(lease.line);
    else leases.splice(leases.indexOf(lease), 1);
  }

  /** Whether a lease of `line` (`lineOf` its kind and id) is held in this process. */
  holds(line: string): boolean {
    return this.byLine.has(line);
  }

  /**
   * The leases of `kind` on `id` held in this process — by `token`, or by anybody without one —
   * newest last (released and lost ones are not kept).
   */
  leasesOf<L extends WatchedLease>(kind: LeaseKind, id: string, token?: string): L[] {
    const leases = [...(this.byLine.get(lineOf(kind, id)) ?? [])] as L[];
    return token === undefined ? leases : leases.filter((lease) => lease.token === token);
  }

  /** Logs a lost lease once and tells the module's `onLockLost` hook; neither ever throws. */
  reportLost(error: LockLostError): void {
    this.logger.warn(error.message);
    if (!this.onLockLost) return;
    try {
      const answer: unknown = this.onLockLost(error);
      if (answer instanceof Promise) answer.catch((hookError: unknown) => this.warnHookFailed(hookError));
    } catch (hookError) {
      this.warnHookFailed(hookError);
    }
  }

  /** A release of a lease is on its way to the store, until `released()`. */
  releasing(): void {
    this.releasesInFlight++;
  }

  released(): void {
    this.releasesInFlight--;
  }

  /**
   * Resolves once no lease held by a scope (`withLock`, `withPermit`, a decorated call) is left — their
   * routines finished — and no release is on its way, or after `ms`. Renewals go on meanwhile. A
   * graceful shutdown waits for this before it closes the store, so that it does not leave those leases
   * to run out: a release may take a second round trip (its script not cached: NOSCRIPT, then EVAL),
   * which a closed connection would cut off.
   */
  async drain(ms: number): Promise<void> {
    const deadline = performance.now() + ms;
    const busy = () => this.releasesInFlight > 0 || [...this.leases].some((lease) => lease.policy.scoped);
    while (busy() && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
  }

  /**
   * Stops renewing (the store is closing) and forgets every lease. A lease still held — a bare one
   * nobody released — is left to run out: its holder is told, by its `signal`, once its deadline
   * passes (a timer that keeps no process alive).
   */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timerDue = Infinity;
    for (const lease of this.leases) {
      setTimeout(() => lease.lose('expired'), Math.max(0, lease.deadline - performance.now())).unref();
    }
    this.leases.clear();
    this.byLine.clear();
  }

  private warnHookFailed(error: unknown): void {
    this.logger.warn(`onLockLost threw: ${errorMessage(error)}`);
  }

  private schedule(due: number): void {
    clearTimeout(this.timer);
    this.timerDue = due;
    const delay = Math.min(Math.max(0, due - performance.now()), LONGEST_DURATION);
    // unref: a lease never holds the process open.
    this.timer = setTimeout(() => this.tick(), delay).unref();
  }

  private tick(): void {
    this.timerDue = Infinity;
    const now = performance.now();
    const due: WatchedLease[] = [];
    for (const lease of this.leases) {
      // Checked first: a timer that fires late (a frozen process, a blocked event loop) must not renew
      // a lease that may already belong to someone else. With a renewal still on its way, its answer
      // decides (within a command timeout): the server may have applied it long before the deadline,
      // and the timer merely fired before the socket was read. `validity` reads 0 meanwhile.
      if (now >= lease.deadline) {
        if (!lease.extending) lease.lose('expired');
      }
      // Renewing a little early is harmless, and lets leases that fall due together share one round trip.
      else if (keepsExtending(lease) && !lease.extending && now >= lease.extendAt - lease.serverLease / 6)
        due.push(lease);
    }
    if (due.length > 0) void this.extendDue(due);
    this.scheduleNext();
  }

  private scheduleNext(): void {
    let next = Infinity;
    for (const lease of this.leases) next = Math.min(next, nextEventOf(lease));
    if (next < Infinity) this.schedule(next);
  }

  private async extendDue(leases: WatchedLease[]): Promise<void> {
    const extensions = leases.map(({ kind, id, storeToken, ttl }) => ({ kind, id, token: storeToken, ttl }));
    const sent = leases.map((lease, i) => lease.extensionSent(extensions[i].ttl));
    let answers: (boolean | LockBackendError)[];
    try {
      answers = await extendAll(this.store, extensions);
    } catch (error) {
      const failure = error instanceof LockBackendError ? error : new LockBackendError(errorMessage(error));
      answers = leases.map(() => failure);
    }

    leases.forEach((lease, i) => {
      const answer = answers[i];
      if (answer === true) return sent[i].answered('extended');
      if (answer === false || !answer.transient) return sent[i].answered('lost');
      // A failed renewal is tried again soon, until the lease's deadline says it is lost.
      // (by the lease the store holds now: a handed-over lease is short until its first renewal)
      lease.extendAt = performance.now() + Math.max(lease.serverLease / 10, 5);
      sent[i].answered('failed');
    });
    this.scheduleNext();
  }
}

/**
 * When the watchdog must look at `lease` next: its renewal, or its deadline. Never while a renewal is
 * on its way: its answer decides, and looks again (a past deadline would re-arm the timer at once,
 * on every tick, until the answer came).
 */
function nextEventOf(lease: WatchedLease): number {
  if (lease.extending) return Infinity;
  return keepsExtending(lease) ? Math.min(lease.extendAt, lease.deadline) : lease.deadline;
}

/** Renewed: with `autoExtend`, or once to extend a lease handed over for a short while. */
function keepsExtending(lease: WatchedLease): boolean {
  return lease.policy.autoExtend || lease.mustExtend;
}
