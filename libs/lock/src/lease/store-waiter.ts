import type { Attempt, Handover, Turn, TurnWait } from '../store/store.js';
import { acceptedHandover, fenceOf, type LocalPass, type PassListener, waitForPass } from './handover-rules.js';
import type { LeaseCall, LeaseGrant, LeaseKeeping } from './held-lease.js';
import { stillRunsOn, UNDO } from './take-if-free.js';
import type { HandedLease, LeaseAttempt } from './wait-for-lease.js';

/**
 * One waiter's conversation with the store for a lease — what the wait loop attempts, pauses on and
 * gives back (`LeaseAttempt`). It keeps what its latest refused attempt was told, when that attempt was
 * sent and the last fence issued then, by which the handover rules judge a message on its turn.
 */
export class StoreWaiter<Request> implements LeaseAttempt {
  /** Why the store refused, when no holder was the reason (for the timeout's message). */
  refusal: string | undefined;
  /**
   * The latest attempt told to wait: when it was sent, and a bound of the fences issued when it ran. A
   * handover message with a fence above that came after it, so its lease began after that send time;
   * one at or below it was undone before that attempt ran (it would have found the lease its own).
   */
  private refused = { at: -Infinity, lastFence: Infinity };
  /** The answer of an attempt that joined the store's line before the wait loop began: its first answer. */
  private joinedAnswer: Attempt | undefined;
  /** The store's token of a lease passed here while it paused, until the wait loop takes it. */
  private passedWhilePaused: string | undefined;
  /** A waiter attempts again at least every maxStep (plus a command's time): it stays alive that long, twice over. */
  private readonly liveness: number;

  constructor(
    private readonly keeping: Pick<LeaseKeeping, 'store' | 'lines'>,
    private readonly call: LeaseCall<Request>,
    private readonly token: string,
    /** Its process's local line of the lease. */
    private readonly line: string,
    /** `performance.now()` at which its caller asked for the lease. */
    private readonly start: number,
    /** Opened before the first attempt: a lease handed over while an attempt is on its way is kept. */
    private readonly turn: Turn,
    commandTimeout: number,
  ) {
    this.liveness = 2 * (call.policy.maxStep + commandTimeout);
  }

  /** It joined the store's line before the wait loop began (`attemptBehindOthers`): the loop's first answer is that attempt's. */
  get inLine(): boolean {
    return this.joinedAnswer !== undefined;
  }

  async attempt(join: boolean, inLine: boolean, joinOnlyBehindOthers = false): Promise<Attempt> {
    const joined = this.joinedAnswer;
    this.joinedAnswer = undefined;
    if (joined !== undefined && join) return joined;
    const { kind, id, request, policy } = this.call;
    const sentAt = performance.now();
    const liveness = join ? this.liveness : 0;
    const options = { fair: policy.fair !== false, liveness, inLine, joinOnlyBehindOthers, signal: policy.signal };
    const answer = await this.keeping.store.acquire(kind, id, request, this.token, policy.ttl, options);
    if (!answer.granted) {
      this.refused = { at: sentAt, lastFence: answer.lastFence ?? 0 };
      this.refusal = answer.refusal;
      return answer;
    }
    if (!(await this.ranOutOnArrival(sentAt, policy.ttl))) return answer;
    // Nobody else held it: a timeout now must not blame another owner.
    this.refusal = lateGrant(performance.now() - sentAt, policy.ttl);
    return { granted: false, retryIn: 0 };
  }

  /**
   * Waits on its turn (`LeaseAttempt.pause`): a release ends it with a handover, judged by the handover
   * rules, or wakes it (`null`). Where a holder of this process may pass it the lease meanwhile
   * (`passableWhilePaused`), such a pass ends it too: the lease as it stands on the store.
   */
  async pause(wait: TurnWait, signal?: AbortSignal): Promise<HandedLease | null> {
    const pausing = this.passableWhilePaused ? this.pausedForPass(signal) : undefined;
    try {
      const handover = await this.waitOnTurn(wait, pausing?.signal ?? signal);
      if (handover === null) return null;
      const passedAt = this.keeping.lines.passSentAt(this.line, this.token, handover.fence);
      return acceptedHandover({ ...handover, passedAt }, this.refused, this.stillRuns);
    } catch (error) {
      const passed = pausing?.passed();
      if (passed === undefined) throw error;
      // It stood in the store's line, or among its unordered waiters: it leaves, after its attempts.
      this.leaveLine().catch(() => undefined);
      // Until the wait loop takes it: a loop that ends without it gives it back (`release`).
      this.passedWhilePaused = passed.storeToken;
      return handedHere(passed);
    } finally {
      pausing?.stop();
    }
  }

  /**
   * Whether a holder of this process may pass this waiter the lease while it pauses on the store
   * (`LocalLines.pausesOnStore`): an unordered waiter (`fair: false`, barging is its contract) that asks
   * to hold the lease alone, with a token of its own making. Not a permit's: whether one more permit
   * fits under this waiter's limit depends on what other processes hold, which only the store knows.
   */
  private get passableWhilePaused(): boolean {
    const { kind, request, policy } = this.call;
    return policy.token === undefined && policy.fair === false && kind.exclusive(request);
  }

  /**
   * Listens, while paused, for a pass from a holder of this process: `signal` aborts the pause when one
   * comes (or the caller's own signal does), `passed()` says what was passed, `stop()` stops listening.
   */
  private pausedForPass(callerSignal?: AbortSignal) {
    const { request } = this.call;
    const ended = new AbortController();
    const forwardAbort = () => ended.abort(callerSignal!.reason);
    if (callerSignal?.aborted) forwardAbort();
    else callerSignal?.addEventListener('abort', forwardAbort, { once: true });
    let passed: LocalPass | undefined;
    const waiter = {
      token: this.token,
      request,
      passedHere: (pass: LocalPass) => {
        passed = pass;
        ended.abort(PASSED_WHILE_PAUSED);
      },
    };
    const unpause = this.keeping.lines.pausesOnStore(this.line, waiter);
    return {
      signal: ended.signal,
      passed: () => passed,
      stop: () => {
        unpause();
        callerSignal?.removeEventListener('abort', forwardAbort);
      },
    };
  }

  /**
   * Waits on its turn. Woken, for a lease held alone, while a holder of this process holds it — by its
   * subscription standing, which asks the waiter to look again in case a release came first — it waits
   * on: none came, since that holder's release tells its own process's waiters itself. (A permit's
   * waiter looks again: another process may have freed another permit.)
   */
  private async waitOnTurn(wait: TurnWait, signal?: AbortSignal): Promise<Handover | null> {
    const until = performance.now() + wait.limit;
    const heldAloneHere = () => this.call.kind.exclusive(this.call.request) && this.keeping.lines.heldHere(this.line);
    let handover = await this.turn.wait(wait, signal);
    while (handover === null && heldAloneHere() && performance.now() < until) {
      const left = until - performance.now();
      handover = await this.turn.wait({ limit: left, step: Math.min(wait.step, left) }, signal);
    }
    return handover;
  }

  /**
   * Undoes an attempt whose answer was lost or is not wanted, or leaves the line; and gives back a lease
   * a holder of this process passed it while it paused, which the wait loop did not take (it was aborted).
   */
  release(): Promise<boolean> {
    const passed = this.passedWhilePaused;
    this.passedWhilePaused = undefined;
    if (passed === undefined) return this.leaveLine();
    return Promise.all([this.leaveLine(), this.giveBack(passed)]).then(([left]) => left);
  }

  /** Undoes an attempt whose answer was lost or is not wanted, or leaves the line. */
  private leaveLine(): Promise<boolean> {
    const { kind, id } = this.call;
    return this.keeping.store.release(kind, id, this.token, UNDO);
  }

  /**
   * A holder of this process passes the lease to this waiter, which asks to hold it alone, when it
   * releases (see `LocalLines`): wait for that rather than join the store's line, until the holder's
   * lease runs out at the latest (a holder that never releases passes nothing). The release is sent
   * after this wait began, or — a pass without a command (`LocalPass`) — there is none: the lease on the
   * store is the holder's as it stands. Not for a token the caller chose, which the store must know the
   * lease by. `null` when nothing was passed in time, or a pass was read after its lease ran out (a late
   * answer: not taken, the attempts after this find out).
   */
  async passedByHolderHere(): Promise<LeaseGrant | null> {
    const { lines } = this.keeping;
    const { line, token } = this;
    const { policy } = this.call;
    if (policy.token !== undefined) return null;
    if (lines.expectsPassBy(line, token) === undefined) {
      const behindOthers = await this.attemptBehindOthers();
      if (behindOthers !== undefined) return behindOthers;
    }
    const passBy = lines.expectsPassBy(line, token);
    if (passBy === undefined) return null;
    const waitStart = performance.now();
    const limit = Math.max(
      0,
      Math.min(policy.maxStep, this.start + policy.timeout - waitStart, passBy + 1 - waitStart),
    );
    const listen = (listener: PassListener | undefined) => lines.awaitsPass(line, token, listener);
    const passed = await waitForPass(this.turn, limit, listen, policy.signal);
    if (passed === null) return null;
    const lease: HandedLease =
      'storeToken' in passed
        ? handedHere(passed)
        : {
            fence: passed.fence,
            sentAt: lines.passSentAt(line, token, passed.fence) ?? waitStart,
            serverTtl: passed.lease,
          };
    return this.takePassed(lease);
  }

  /**
   * The grant of a lease a holder of this process passed it (`handedOver`: without a command, or in its
   * release's reply). Given back instead when the caller gave up meanwhile (nobody will use it), or when
   * it was read after it ran out: `null`, the attempts after this find out.
   */
  private async takePassed(lease: HandedLease): Promise<LeaseGrant | null> {
    const { token } = this;
    const { policy } = this.call;
    const storeToken = lease.storeToken ?? token;
    if (policy.signal?.aborted || !this.stillRuns(lease.sentAt, lease.serverTtl)) {
      await this.giveBack(storeToken).catch(() => undefined);
      policy.signal?.throwIfAborted();
      return null;
    }
    this.keeping.lines.won(this.line, token, lease.sentAt + lease.serverTtl);
    const { sentAt, serverTtl, passesInARow, times } = lease;
    const handedOver = lease.storeToken === undefined ? 'store' : 'process';
    const elapsed = performance.now() - this.start;
    const grant = {
      token,
      storeToken,
      ownToken: false,
      ttl: policy.ttl,
      sentAt,
      serverTtl,
      elapsed,
      handedOver,
    } as const;
    return { ...grant, ...fenceOf(lease.fence), ...(passesInARow !== undefined && { passesInARow, times }) };
  }

  /**
   * A waiter that arrived after its process took the lease, while a holder of its process holds it and
   * may pass it on a while yet: one attempt that joins the store's line only behind others
   * (`joinOnlyBehindOthers`). With nobody there, nobody of another process came first: it, and the
   * waiters of this process after it, may be passed the lease here within the cohort's bound
   * (`LocalLines.nobodyInStoreLine`), and `undefined` says so. Else the grant, or `null`: it stands in the store's line, and the wait loop goes on from
   * that answer. Where the store keeps no line, or the attempt fails, `null` without a word to the store
   * or the failure: the wait loop attempts anew.
   */
  private async attemptBehindOthers(): Promise<LeaseGrant | null | undefined> {
    const { store, lines } = this.keeping;
    if (!store.keepsLine || !lines.passableIfNobodyWaits(this.line, this.token)) return null;
    const { policy } = this.call;
    const sentAt = performance.now();
    let answer: Attempt;
    try {
      answer = await this.attempt(true, false, true);
    } catch (error) {
      if (!policy.signal?.aborted) return null;
      await this.leaveLine().catch(() => undefined);
      throw error;
    }
    if (answer.nobodyInLine) {
      lines.nobodyInStoreLine(this.line);
      return undefined;
    }
    if (!answer.granted) {
      this.joinedAnswer = answer;
      return null;
    }
    lines.won(this.line, this.token, sentAt + policy.ttl);
    const elapsed = performance.now() - this.start;
    return { token: this.token, ownToken: false, ttl: policy.ttl, sentAt, serverTtl: policy.ttl, elapsed };
  }

  /**
   * Gives back a lease passed to this waiter that it will not hold: one passed through the store as an
   * attempt is undone; one passed here as the lease it is.
   */
  private giveBack(storeToken: string): Promise<boolean> {
    if (storeToken === this.token) return this.leaveLine();
    const { kind, id } = this.call;
    this.keeping.lines.leaseLeft(this.line, storeToken);
    return this.keeping.store.release(kind, id, storeToken);
  }

  private readonly stillRuns = (sentAt: number, leaseMs: number): boolean =>
    stillRunsOn(this.keeping.store, sentAt, leaseMs);

  /**
   * A grant whose answer came back after its lease ran out may already be someone else's lease: it is
   * given back, and the wait goes on (as Redlock does with a validity ≤ 0).
   */
  private async ranOutOnArrival(sentAt: number, leaseMs: number): Promise<boolean> {
    if (this.stillRuns(sentAt, leaseMs)) return false;
    await this.leaveLine().catch(() => undefined);
    return true;
  }
}

/**
 * A lease passed here without a command, as the wait takes it: under the store's token it has, from the
 * times of its previous holder, with no fence (drawn when its holder asks, like one taken by an attempt).
 */
function handedHere({ storeToken, sentAt, serverTtl, passesInARow, validUntil, extendAt }: LocalPass): HandedLease {
  return { fence: 0, sentAt, serverTtl, storeToken, passesInARow, times: { validUntil, extendAt } };
}

/** Ends a pause on the store when a holder of this process passed the lease (an abort reason, never thrown to a caller). */
const PASSED_WHILE_PAUSED = Symbol('passed while paused');

/** Why a grant was not taken: its answer came back after its lease had run out by this process's clock. */
function lateGrant(roundTrip: number, ttl: number): string {
  return `it was granted, but the answer came back ${Math.round(roundTrip)} ms after the attempt was sent, when its lease of ${ttl} ms had run out (less its clock-drift margin): the lease was given back (a longer ttl leaves room for a slow round trip)`;
}
