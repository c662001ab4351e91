import type { Attempt, Turn, TurnWait } from '../store/store.js';
import { acceptedHandover, fenceOf, waitForPass } from './handover-rules.js';
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
  /** A waiter attempts again at least every maxStep (plus a command's time): it stays alive that long, twice over. */
  private readonly liveness: number;

  constructor(
    private readonly keeping: Pick<LeaseKeeping, 'store' | 'lines'>,
    private readonly call: LeaseCall<Request>,
    private readonly token: string,
    /** Its process's local line of the lease. */
    private readonly line: string,
    /** Opened before the first attempt: a lease handed over while an attempt is on its way is kept. */
    private readonly turn: Turn,
    commandTimeout: number,
  ) {
    this.liveness = 2 * (call.policy.maxStep + commandTimeout);
  }

  async attempt(join: boolean, inLine: boolean): Promise<Attempt> {
    const { kind, id, request, policy } = this.call;
    const sentAt = performance.now();
    const options = { fair: policy.fair !== false, liveness: join ? this.liveness : 0, inLine, signal: policy.signal };
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

  async pause(wait: TurnWait, signal?: AbortSignal): Promise<HandedLease | null> {
    const handover = await this.turn.wait(wait, signal);
    if (handover === null) return null;
    const passedAt = this.keeping.lines.passSentAt(this.line, this.token, handover.fence);
    return acceptedHandover({ ...handover, passedAt }, this.refused, this.stillRuns);
  }

  /** Undoes an attempt whose answer was lost or is not wanted, or leaves the line. */
  release(): Promise<boolean> {
    const { kind, id } = this.call;
    return this.keeping.store.release(kind, id, this.token, UNDO);
  }

  /**
   * A holder of this process passes the lease to this waiter, which asks to hold it alone, when it
   * releases (see `LocalLines`): wait for that rather than join the store's line, until the holder's
   * lease runs out at the latest (a holder that never releases passes nothing). The release is sent
   * after this wait began. `null` when nothing was passed in time, or a pass was read after its lease
   * ran out (a late answer: not taken, the attempts after this find out).
   */
  async passedByHolderHere(start: number): Promise<LeaseGrant | null> {
    const { lines } = this.keeping;
    const { line, token } = this;
    const { policy } = this.call;
    const passBy = lines.expectsPassBy(line, token);
    if (passBy === undefined) return null;
    const waitStart = performance.now();
    const limit = Math.max(0, Math.min(policy.maxStep, start + policy.timeout - waitStart, passBy + 1 - waitStart));
    const onNotPassed = (notPassed: (() => void) | undefined) => lines.onNotPassed(line, token, notPassed);
    const passed = await waitForPass(this.turn, limit, onNotPassed, policy.signal);
    if (passed === null) return null;
    if (policy.signal?.aborted) {
      // Passed as the caller gave up: nobody will use it.
      await this.release().catch(() => undefined);
      throw policy.signal.reason;
    }
    const sentAt = lines.passSentAt(line, token, passed.fence) ?? waitStart;
    if (!this.stillRuns(sentAt, passed.lease)) return null;
    lines.won(line, token, performance.now() + passed.lease);
    const elapsed = performance.now() - start;
    return { token, ttl: policy.ttl, ...fenceOf(passed.fence), sentAt, serverTtl: passed.lease, elapsed };
  }

  private readonly stillRuns = (sentAt: number, leaseMs: number): boolean =>
    stillRunsOn(this.keeping.store, sentAt, leaseMs);

  /**
   * A grant whose answer came back after its lease ran out may already be someone else's lease: it is
   * given back, and the wait goes on (as Redlock does with a validity ≤ 0).
   */
  private async ranOutOnArrival(sentAt: number, leaseMs: number): Promise<boolean> {
    if (this.stillRuns(sentAt, leaseMs)) return false;
    await this.release().catch(() => undefined);
    return true;
  }
}

/** Why a grant was not taken: its answer came back after its lease had run out by this process's clock. */
function lateGrant(roundTrip: number, ttl: number): string {
  return `it was granted, but the answer came back ${Math.round(roundTrip)} ms after the attempt was sent, when its lease of ${ttl} ms had run out (less its clock-drift margin): the lease was given back (a longer ttl leaves room for a slow round trip)`;
}
