import { describe, expect, it } from '@jest/globals';
import { LockBackendError } from '../lock.errors.js';
import { sleep, waitForLease, type WaitPolicy } from './wait-for-lease.js';

/** An attempt that answers from a script (a fence, 0 = taken, or an error), recording when it was made. */
function scriptedLease(answers: (number | Error)[], fallback: number | Error = 0) {
  const attemptsAt: number[] = [];
  const start = performance.now();
  let releases = 0;
  return {
    attemptsAt,
    releases: () => releases,
    lease: {
      attempt: async () => {
        attemptsAt.push(performance.now() - start);
        const answer = answers.shift() ?? fallback;
        if (answer instanceof Error) throw answer;
        return answer;
      },
      release: async () => {
        releases++;
        return true;
      },
    },
  };
}

const policy = (overrides: Partial<WaitPolicy>): WaitPolicy => ({
  timeout: 1_000,
  step: 1,
  ratio: 2,
  maxStep: 500,
  ...overrides,
});

describe('waitForLease', () => {
  it('makes exactly one attempt when timeout is 0', async () => {
    const { lease, attemptsAt } = scriptedLease([0]);

    expect(await waitForLease(lease, policy({ timeout: 0 }), sleep)).toBeNull();
    expect(attemptsAt).toHaveLength(1);
  });

  it('returns elapsed exactly 0 when the first attempt succeeds', async () => {
    const { lease } = scriptedLease([7]);

    expect(await waitForLease(lease, policy({}), sleep)).toMatchObject({ elapsed: 0, fence: 7 });
  });

  it('grows the wait by ratio up to maxStep, with jitter within ±25 %', async () => {
    const pauses: number[] = [];
    const { lease } = scriptedLease([0, 0, 0, 0, 0, 0, 1]);
    const recordingPause = (ms: number) => {
      pauses.push(ms);
      return sleep(ms);
    };

    await waitForLease(lease, policy({ step: 2, ratio: 3, maxStep: 40 }), recordingPause);

    const steps = [2, 6, 18, 40, 40, 40];
    expect(pauses).toHaveLength(steps.length);
    pauses.forEach((ms, i) => {
      expect(ms).toBeGreaterThanOrEqual(steps[i] * 0.75);
      expect(ms).toBeLessThanOrEqual(steps[i] * 1.25);
    });
  });

  it('cuts the last wait to the deadline and makes one final attempt there', async () => {
    const { lease, attemptsAt } = scriptedLease([]);

    // The first wait (75–125 ms) cannot reach the deadline; the second is cut to end there.
    expect(await waitForLease(lease, policy({ timeout: 160, step: 100, ratio: 1, maxStep: 100 }), sleep)).toBeNull();

    // A timer may fire a millisecond early, which only adds one more attempt just before the deadline.
    expect(attemptsAt.length).toBeGreaterThanOrEqual(3);
    expect(attemptsAt.at(-1)).toBeGreaterThanOrEqual(155);
    expect(attemptsAt.at(-1)).toBeLessThan(250);
  });

  it('rides out backend failures until the lease is granted', async () => {
    const down = new LockBackendError('connection refused');
    const { lease } = scriptedLease([down, down, 3]);

    expect((await waitForLease(lease, policy({}), sleep))?.elapsed).toBeGreaterThan(0);
  });

  it('throws the backend failure of the final attempt, and sends a release for a late-applied attempt', async () => {
    const down = new LockBackendError('connection refused');
    const { lease, releases } = scriptedLease([], down);

    await expect(waitForLease(lease, policy({ timeout: 30 }), sleep)).rejects.toBe(down);
    expect(releases()).toBe(1);
  });

  it('reports a timeout, not a backend failure, when the backend came back but the lease stayed taken', async () => {
    const { lease } = scriptedLease([new LockBackendError('connection refused')], 0);

    expect(await waitForLease(lease, policy({ timeout: 30 }), sleep)).toBeNull();
  });

  it('passes an error that is not a backend failure through at once', async () => {
    const bug = new TypeError('bug');
    const { lease, attemptsAt } = scriptedLease([bug]);

    await expect(waitForLease(lease, policy({}), sleep)).rejects.toBe(bug);
    expect(attemptsAt).toHaveLength(1);
  });

  it('gives back a lease won by an attempt that was in flight when the signal aborted', async () => {
    const controller = new AbortController();
    const reason = new Error('aborted');
    const { lease, releases } = scriptedLease([]);
    lease.attempt = async () => {
      controller.abort(reason);
      return 1;
    };

    await expect(waitForLease(lease, policy({}), sleep, controller.signal)).rejects.toBe(reason);
    expect(releases()).toBe(1);
  });

  it('sends a release when the signal ends a wait after an attempt whose reply was lost', async () => {
    const controller = new AbortController();
    const reason = new Error('aborted');
    const { lease, releases } = scriptedLease([new LockBackendError('timed out')], 0);
    const abortingPause = async (ms: number, signal?: AbortSignal) => {
      controller.abort(reason);
      return sleep(ms, signal);
    };

    await expect(waitForLease(lease, policy({}), abortingPause, controller.signal)).rejects.toBe(reason);
    expect(releases()).toBe(1);
  });

  it('sends no release when the signal ends a wait whose attempts were all answered', async () => {
    const controller = new AbortController();
    const { lease, releases } = scriptedLease([], 0);
    const abortingPause = async (ms: number, signal?: AbortSignal) => {
      controller.abort(new Error('aborted'));
      return sleep(ms, signal);
    };

    await expect(waitForLease(lease, policy({}), abortingPause, controller.signal)).rejects.toThrow('aborted');
    expect(releases()).toBe(0);
  });

  it('throws an error that retrying cannot fix at once, without waiting for the deadline', async () => {
    const wrongType = new LockBackendError('WRONGTYPE', 'k', { code: 'BACKEND_ERROR' });
    const { lease, attemptsAt } = scriptedLease([wrongType]);

    await expect(waitForLease(lease, policy({ timeout: 5_000 }), sleep)).rejects.toBe(wrongType);
    expect(attemptsAt).toHaveLength(1);
  });
});
