import { LockBackendError } from '../lock.errors.js';
import type { Attempt, TurnWait } from '../store/store.js';

/** How a caller waits: the backoff of `lua-resty-lock`, in milliseconds. */
export interface WaitPolicy {
  timeout: number;
  step: number;
  ratio: number;
  maxStep: number;
}
/** One lease being taken: attempts, waits for a turn, and how to give it back if it is not wanted. */
export interface LeaseAttempt {
  /** It stands in the store's line already, before the wait loop's first attempt. */
  readonly inLine?: boolean;
  /** One attempt; `join`: stay in line (and be woken) if not granted; `inLine`: joined before. */
  attempt(join: boolean, inLine: boolean): Promise<Attempt>;
  /**
   * Waits for the lease to be released (see `LockStore.waitForTurn` for the two bounds); resolves
   * with the lease when it was handed to this waiter meanwhile, else `null`. Rejects with the
   * signal's reason on abort.
   */
  pause(wait: TurnWait, signal?: AbortSignal): Promise<HandedLease | null>;
  /** Gives the lease back, or leaves the line. */
  release(): Promise<unknown>;
}

/** A lease a release handed to the waiter. */
export interface HandedLease {
  fence: number;
  /** `performance.now()` before which the lease surely did not start. */
  sentAt: number;
  /** How long the store's lease runs from `sentAt` (the short handover lease, until it is extended). */
  serverTtl: number;
  /** Passed here without a command: the token the store holds it under (see `LeaseGrant.storeToken`). */
  storeToken?: string;
  /** Passed here without a command: the passes it has made in a row since taken from the store. */
  passesInARow?: number;
  /** Passed here without a command: its deadline and next renewal as its previous holder knew them. */
  times?: { validUntil: number; extendAt: number };
}

/** A lease the wait loop won. */
export interface WonLease {
  /** Milliseconds spent waiting (exactly 0 when the first attempt succeeded). */
  elapsed: number;
  /** Handed over by a release: the fence it came with (an attempt draws none). */
  fence?: number;
  /** `performance.now()` before which the lease surely did not start: the send time of the winning attempt. */
  sentAt: number;
  /** Handed over by a release: how long the store's lease runs from `sentAt`; else the ttl asked for. */
  serverTtl?: number;
  /** Passed here without a command: the token the store holds it under, its passes in a row, its times. */
  storeToken?: string;
  passesInARow?: number;
  times?: { validUntil: number; extendAt: number };
}

/**
 * The one wait loop of locks and semaphores. Attempt; on failure wait for a release to wake the
 * waiter (or to hand it the lease outright: fair waiting), at most until the holder's lease runs
 * out by itself, and at most `maxStep` (±25 % jitter) so that the waiter keeps its place in line.
 * While the store cannot promise to hear of a release (not subscribed yet, or the subscription was
 * lost), and after a failed attempt, each wait is cut to the backoff `step` (±25 % jitter, growing
 * by `ratio` up to `maxStep`). The last wait ends at the deadline, where one final attempt is
 * made. Resolves with the lease won, or `null` when the deadline passed.
 *
 * A transient backend failure during the wait is retried like a busy lease until the deadline,
 * so a short outage (a failover) costs a delay, not an error; if the final attempt failed that
 * way, its `LockBackendError` is thrown instead of a timeout. An error that retrying cannot fix
 * (`BACKEND_ERROR`) is thrown at once.
 */
export async function waitForLease(
  lease: LeaseAttempt,
  policy: WaitPolicy,
  signal?: AbortSignal,
): Promise<WonLease | null> {
  signal?.throwIfAborted();
  const loop = new WaitLoop(lease, policy, signal);
  try {
    return await loop.run();
  } finally {
    loop.settle();
  }
}

/** One run of the wait loop: its deadline, its backoff, and whether it may hold what it does not want. */
class WaitLoop {
  private readonly start = performance.now();
  private readonly deadline: number;
  private step: number;
  /**
   * An attempt whose reply was lost (a timeout) may still be applied by the server later, a lease won
   * after an abort is not wanted, and a waiter that gives up must leave the line: however the wait
   * ends without the caller taking the lease, a release is sent after the attempts on the same
   * connection, so that nothing stays held and nobody waits for a waiter that left.
   */
  private mayHoldUnwanted: boolean;
  private won = false;
  /** It stood in the store's line before its first attempt here. */
  private readonly joinedBefore: boolean;

  constructor(
    private readonly lease: LeaseAttempt,
    private readonly policy: WaitPolicy,
    private readonly signal?: AbortSignal,
  ) {
    this.deadline = this.start + policy.timeout;
    this.step = policy.step;
    this.joinedBefore = lease.inLine ?? false;
    this.mayHoldUnwanted = this.joinedBefore;
  }

  async run(): Promise<WonLease | null> {
    for (let attempts = 1; ; attempts++) {
      // An abort that came while a pause ended without a lease: no attempt is sent for nobody.
      this.signal?.throwIfAborted();
      const sentAt = performance.now();
      const join = this.deadline - sentAt > 0;
      const { answer, failure } = await this.attempt(join, attempts > 1 || this.joinedBefore);
      if (join) this.mayHoldUnwanted = true;
      if (answer.granted) return this.win({ elapsed: attempts === 1 ? 0 : performance.now() - this.start, sentAt });
      const remaining = this.deadline - performance.now();
      if (remaining <= 0) {
        if (failure) throw failure;
        return null;
      }
      const handed = await this.lease.pause(this.nextWait(answer, remaining, failure !== undefined), this.signal);
      if (handed !== null) return this.win({ elapsed: performance.now() - this.start, ...handed });
      this.step = Math.min(this.step * this.policy.ratio, this.policy.maxStep);
    }
  }

  /** The loop ended: without the lease, what an attempt may have taken is given back, and the line left. */
  settle(): void {
    if (!this.won && this.mayHoldUnwanted) this.lease.release().catch(ignore);
  }

  /**
   * One attempt. A transient failure is the answer "not granted" with the failure beside it (retried
   * like a busy lease until the deadline); any other error is thrown.
   */
  private async attempt(join: boolean, inLine: boolean): Promise<{ answer: Attempt; failure?: LockBackendError }> {
    try {
      return { answer: await untilAborted(this.lease.attempt(join, inLine), this.signal) };
    } catch (error) {
      // Aborted with the attempt still in flight (a frozen server): its answer is not awaited, and the
      // release sent after it on the same connection undoes whatever it may still take. A lost reply may
      // still be applied, and a script that failed half-way (a fence counter of the wrong type) may have
      // taken the lease before it failed: either way a release follows.
      const aborted = this.signal?.aborted && error === this.signal.reason;
      if (aborted || error instanceof LockBackendError) this.mayHoldUnwanted = true;
      if (aborted || !(error instanceof LockBackendError) || !error.transient) throw error;
      return { answer: { granted: false, retryIn: 0 }, failure: error };
    }
  }

  /** Takes the lease won, unless the caller gave up meanwhile: nobody would use it. */
  private win(lease: WonLease): WonLease {
    if (this.signal?.aborted) {
      this.mayHoldUnwanted = true;
      throw this.signal.reason;
    }
    this.won = true;
    return lease;
  }

  /**
   * How long to pause after a refusal: at most until the holder's lease runs out by itself
   * (`retryIn`: look again then, even without a wake-up) and the deadline, and at most `maxStep` while
   * a release is sure to wake the waiter — the backoff `step` while it may not be, or after a failure.
   */
  private nextWait(answer: Attempt, remaining: number, failed: boolean): TurnWait {
    const untilExpiry = answer.retryIn > 0 ? answer.retryIn + 1 : Infinity;
    const stepWait = Math.min(jittered(this.step), remaining, untilExpiry);
    const limit = failed ? stepWait : Math.min(jittered(this.policy.maxStep), remaining, untilExpiry);
    return { limit, step: Math.min(stepWait, limit) };
  }
}

/** `promise`, or the signal's reason as soon as it aborts. */
export function untilAborted<T>(promise: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (signal === undefined) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) {
      promise.catch(() => undefined); // nobody awaits it any more: its failure must not go unhandled
      return onAbort();
    }
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/** Spreads waiters that failed together so that they do not retry in lockstep. */
function jittered(step: number): number {
  return step * (0.75 + Math.random() * 0.5);
}

function ignore(): void {}
