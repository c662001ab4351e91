import { LockBackendError } from '../lock.errors.js';

/** How a caller waits: the backoff of `lua-resty-lock`, in milliseconds. */
export interface WaitPolicy {
  timeout: number;
  step: number;
  ratio: number;
  maxStep: number;
}
/** One lease being taken: an attempt, and how to give it back if the caller no longer wants it. */
export interface LeaseAttempt {
  /** Resolves with the lease's fence when it was granted, `0` when it is taken. */
  attempt(): Promise<number>;
  release(): Promise<unknown>;
}

/** A lease the wait loop won. */
export interface WonLease {
  /** Milliseconds spent waiting (exactly 0 when the first attempt succeeded). */
  elapsed: number;
  fence: number;
  /** `performance.now()` when the winning attempt was sent: the lease runs at least `ttl` from then. */
  sentAt: number;
}

/** Waits up to `ms`, sooner if the store sees the lease freed; rejects with the signal's reason on abort. */
export type Pause = (ms: number, signal?: AbortSignal) => Promise<void>;

/**
 * The one wait loop of locks and semaphores. Attempt; on failure wait `step` (±25 % jitter,
 * growing by `ratio` up to `maxStep`); the last wait is cut to end at the deadline, where
 * one final attempt is made. Resolves with the lease won, or `null` when the deadline passed.
 *
 * A transient backend failure during the wait is retried like a busy lease until the deadline,
 * so a short outage (a failover) costs a delay, not an error; if the final attempt failed that
 * way, its `LockBackendError` is thrown instead of a timeout. An error that retrying cannot fix
 * (`BACKEND_ERROR`) is thrown at once.
 */
export async function waitForLease(
  lease: LeaseAttempt,
  policy: WaitPolicy,
  pause: Pause,
  signal?: AbortSignal,
): Promise<WonLease | null> {
  signal?.throwIfAborted();
  const start = performance.now();
  const deadline = start + policy.timeout;
  let step = policy.step;
  // An attempt whose reply was lost (a timeout) may still be applied by the server later, and a
  // lease won after an abort is not wanted: either way, however the wait ends without the caller
  // taking the lease, a release is sent after it on the same connection, so nothing stays held.
  let mayHoldUnwanted = false;
  let won = false;

  try {
    for (let attempts = 1; ; attempts++) {
      const sentAt = performance.now();
      let fence = 0;
      let failure: LockBackendError | undefined;
      try {
        fence = await lease.attempt();
      } catch (error) {
        if (!(error instanceof LockBackendError) || !error.transient) throw error;
        failure = error;
        mayHoldUnwanted = true;
      }

      if (fence > 0) {
        if (signal?.aborted) {
          // The abort came while the winning attempt was in flight: nobody will use this lease.
          mayHoldUnwanted = true;
          throw signal.reason;
        }
        won = true;
        return { elapsed: attempts === 1 ? 0 : performance.now() - start, fence, sentAt };
      }

      const remaining = deadline - performance.now();
      if (remaining <= 0) {
        if (failure) throw failure;
        return null;
      }
      await pause(Math.min(jittered(step), remaining), signal);
      step = Math.min(step * policy.ratio, policy.maxStep);
    }
  } finally {
    if (!won && mayHoldUnwanted) lease.release().catch(ignore);
  }
}

/** `setTimeout` as a promise that an `AbortSignal` cuts short with its reason. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Spreads waiters that failed together so that they do not retry in lockstep. */
function jittered(step: number): number {
  return step * (0.75 + Math.random() * 0.5);
}

function ignore(): void {}
