import { LockBackendError } from './lock.errors.js';

/** How a caller waits: the backoff of `lua-resty-lock`, in milliseconds. */
export interface WaitPolicy {
  timeout: number;
  step: number;
  ratio: number;
  maxStep: number;
}

/** One lease being taken: an attempt, and how to give it back if the caller no longer wants it. */
export interface LeaseAttempt {
  attempt(): Promise<boolean>;
  release(): Promise<unknown>;
}

/** Waits up to `ms`, sooner if the store sees the lease freed; rejects with the signal's reason on abort. */
export type Pause = (ms: number, signal?: AbortSignal) => Promise<void>;

/**
 * The one wait loop of locks and semaphores. Attempt; on failure wait `step` (±25 % jitter,
 * growing by `ratio` up to `maxStep`); the last wait is cut to end at the deadline, where
 * one final attempt is made. Resolves with the milliseconds spent waiting (exactly 0 when the
 * first attempt succeeds), or `null` when the deadline passed.
 *
 * A backend failure during the wait is retried like a busy lease until the deadline, so a
 * short outage (a failover) costs a delay, not an error; if the final attempt failed that
 * way, its `LockBackendError` is thrown instead of a timeout.
 */
export async function waitForLease(
  lease: LeaseAttempt,
  policy: WaitPolicy,
  pause: Pause,
  signal?: AbortSignal,
): Promise<number | null> {
  signal?.throwIfAborted();
  const start = performance.now();
  const deadline = start + policy.timeout;
  let step = policy.step;
  let backendFailed = false;

  for (let attempts = 1; ; attempts++) {
    let acquired = false;
    let failure: LockBackendError | undefined;
    try {
      acquired = await lease.attempt();
    } catch (error) {
      if (!(error instanceof LockBackendError)) throw error;
      failure = error;
      backendFailed = true;
    }

    if (acquired) {
      if (signal?.aborted) {
        // The abort came while the winning attempt was in flight: nobody will use this lease.
        await lease.release().catch(ignore);
        throw signal.reason;
      }
      return attempts === 1 ? 0 : performance.now() - start;
    }

    const remaining = deadline - performance.now();
    if (remaining <= 0) {
      if (backendFailed) {
        // An attempt that timed out may still be applied by the server later; this release,
        // sent after it on the same connection, makes sure it leaves nothing behind.
        lease.release().catch(ignore);
      }
      if (failure) throw failure;
      return null;
    }
    await pause(Math.min(jittered(step), remaining), signal);
    step = Math.min(step * policy.ratio, policy.maxStep);
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
