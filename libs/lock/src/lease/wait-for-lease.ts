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
  const start = performance.now();
  const deadline = start + policy.timeout;
  let step = policy.step;
  // An attempt whose reply was lost (a timeout) may still be applied by the server later, a lease
  // won after an abort is not wanted, and a waiter that gives up must leave the line: however the
  // wait ends without the caller taking the lease, a release is sent after the attempts on the
  // same connection, so that nothing stays held and nobody waits for a waiter that left.
  let mayHoldUnwanted = false;
  let won = false;

  try {
    for (let attempts = 1; ; attempts++) {
      // An abort that came while a pause ended without a lease: no attempt is sent for nobody.
      signal?.throwIfAborted();
      const sentAt = performance.now();
      const join = deadline - sentAt > 0;
      let answer: Attempt = { granted: false, retryIn: 0 };
      let failure: LockBackendError | undefined;
      try {
        answer = await untilAborted(lease.attempt(join, attempts > 1), signal);
      } catch (error) {
        if (signal?.aborted && error === signal.reason) {
          // Aborted with the attempt still in flight (a frozen server): its answer is not awaited, and
          // the release sent after it on the same connection undoes whatever it may still take.
          mayHoldUnwanted = true;
          throw error;
        }
        if (!(error instanceof LockBackendError)) throw error;
        // A lost reply may still be applied, and a script that failed half-way (a fence counter of the
        // wrong type) may have taken the lease before it failed: either way a release follows.
        mayHoldUnwanted = true;
        if (!error.transient) throw error;
        failure = error;
      }
      if (join) mayHoldUnwanted = true;

      if (answer.granted) {
        if (signal?.aborted) {
          // The abort came while the winning attempt was in flight: nobody will use this lease.
          mayHoldUnwanted = true;
          throw signal.reason;
        }
        won = true;
        return { elapsed: attempts === 1 ? 0 : performance.now() - start, sentAt };
      }

      const remaining = deadline - performance.now();
      if (remaining <= 0) {
        if (failure) throw failure;
        return null;
      }
      // The holder's lease runs out by itself after `retryIn`: look again then, even without a wake-up.
      const untilExpiry = answer.retryIn > 0 ? answer.retryIn + 1 : Infinity;
      const stepWait = Math.min(jittered(step), remaining, untilExpiry);
      const limit = failure ? stepWait : Math.min(jittered(policy.maxStep), remaining, untilExpiry);
      const handed = await lease.pause({ limit, step: Math.min(stepWait, limit) }, signal);
      if (handed !== null) {
        if (signal?.aborted) {
          // Handed over as the caller gave up: nobody will use it.
          mayHoldUnwanted = true;
          throw signal.reason;
        }
        won = true;
        return { elapsed: performance.now() - start, ...handed };
      }
      step = Math.min(step * policy.ratio, policy.maxStep);
    }
  } finally {
    if (!won && mayHoldUnwanted) lease.release().catch(ignore);
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
