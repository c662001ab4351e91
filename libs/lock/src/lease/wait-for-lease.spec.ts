import { describe, expect, it } from '@jest/globals';
import { LockBackendError } from '../lock.errors.js';
import type { TurnWait } from '../store/store.js';
import { sleep } from '../util/sleep.js';
import { type HandedLease, waitForLease, type WaitPolicy } from './wait-for-lease.js';

/** An attempt that answers from a script (1 = granted, 0 = taken, or an error), recording when it was made. */
function scriptedLease(answers: (number | Error)[], fallback: number | Error = 0) {
  const attemptsAt: number[] = [];
  const start = performance.now();
  let releases = 0;
  return {
    attemptsAt,
    releases: () => releases,
    lease: {
      attempt: async (_join: boolean) => {
        attemptsAt.push(performance.now() - start);
        const answer = answers.shift() ?? fallback;
        if (answer instanceof Error) throw answer;
        return { granted: answer > 0, retryIn: 0 };
      },
      // A store that cannot promise wake-ups: every wait lasts the backoff step.
      pause: ({ step }: TurnWait, signal?: AbortSignal): Promise<HandedLease | null> =>
        sleep(step, signal).then(() => null),
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

    expect(await waitForLease(lease, policy({ timeout: 0 }))).toBeNull();
    expect(attemptsAt).toHaveLength(1);
  });

  it('returns elapsed exactly 0 when the first attempt succeeds', async () => {
    const { lease } = scriptedLease([1]);

    const won = await waitForLease(lease, policy({}));
    expect(won).toMatchObject({ elapsed: 0 });
    // An attempt draws no fence: the holder draws one when it asks.
    expect(won).not.toHaveProperty('fence');
  });

  it('grows the wait by ratio up to maxStep, with jitter within ±25 %', async () => {
    const pauses: number[] = [];
    const { lease } = scriptedLease([0, 0, 0, 0, 0, 0, 1]);
    lease.pause = ({ step }: TurnWait) => {
      pauses.push(step);
      return sleep(step).then(() => null);
    };

    await waitForLease(lease, policy({ step: 2, ratio: 3, maxStep: 40 }));

    const steps = [2, 6, 18, 40, 40, 40];
    expect(pauses).toHaveLength(steps.length);
    pauses.forEach((ms, i) => {
      expect(ms).toBeGreaterThanOrEqual(steps[i] * 0.75);
      expect(ms).toBeLessThanOrEqual(steps[i] * 1.25);
    });
  });

  it('cuts the last wait to the deadline and makes one final attempt there', async () => {
    const { lease, attemptsAt } = scriptedLease([]);

    // Waits of 75–125 ms: the ones that cannot reach the deadline are whole, the last is cut to end
    // there. (Room for timers that fire late on a loaded machine: 200 ms late would still cut one.)
    expect(await waitForLease(lease, policy({ timeout: 400, step: 100, ratio: 1, maxStep: 100 }))).toBeNull();

    // A timer may fire a millisecond early, which only adds one more attempt just before the deadline.
    expect(attemptsAt.length).toBeGreaterThanOrEqual(3);
    expect(attemptsAt.at(-1)).toBeGreaterThanOrEqual(395);
    expect(attemptsAt.at(-1)).toBeLessThan(500);
  });

  it('rides out backend failures until the lease is granted', async () => {
    const down = new LockBackendError('connection refused');
    const { lease } = scriptedLease([down, down, 3]);

    expect((await waitForLease(lease, policy({})))?.elapsed).toBeGreaterThan(0);
  });

  it('throws the backend failure of the final attempt, and sends a release for a late-applied attempt', async () => {
    const down = new LockBackendError('connection refused');
    const { lease, releases } = scriptedLease([], down);

    await expect(waitForLease(lease, policy({ timeout: 30 }))).rejects.toBe(down);
    expect(releases()).toBe(1);
  });

  it('reports a timeout, not a backend failure, when the backend came back but the lease stayed taken', async () => {
    const { lease } = scriptedLease([new LockBackendError('connection refused')], 0);

    expect(await waitForLease(lease, policy({ timeout: 30 }))).toBeNull();
  });

  it('passes an error that is not a backend failure through at once', async () => {
    const bug = new TypeError('bug');
    const { lease, attemptsAt } = scriptedLease([bug]);

    await expect(waitForLease(lease, policy({}))).rejects.toBe(bug);
    expect(attemptsAt).toHaveLength(1);
  });

  it('gives back a lease won by an attempt that was in flight when the signal aborted', async () => {
    const controller = new AbortController();
    const reason = new Error('aborted');
    const { lease, releases } = scriptedLease([]);
    lease.attempt = async () => {
      controller.abort(reason);
      return { granted: true, retryIn: 0 };
    };

    await expect(waitForLease(lease, policy({}), controller.signal)).rejects.toBe(reason);
    expect(releases()).toBe(1);
  });

  it('sends a release when the signal ends a wait after an attempt whose reply was lost', async () => {
    const controller = new AbortController();
    const reason = new Error('aborted');
    const { lease, releases } = scriptedLease([new LockBackendError('timed out')], 0);
    lease.pause = async ({ step }: TurnWait, signal?: AbortSignal) => {
      controller.abort(reason);
      return sleep(step, signal).then(() => null);
    };

    await expect(waitForLease(lease, policy({}), controller.signal)).rejects.toBe(reason);
    expect(releases()).toBe(1);
  });

  it('leaves the line when the signal ends a wait whose attempts were all answered', async () => {
    const controller = new AbortController();
    const { lease, releases } = scriptedLease([], 0);
    lease.pause = async ({ step }: TurnWait, signal?: AbortSignal) => {
      controller.abort(new Error('aborted'));
      return sleep(step, signal).then(() => null);
    };

    await expect(waitForLease(lease, policy({}), controller.signal)).rejects.toThrow('aborted');
    // It waited in line: giving up leaves the line.
    expect(releases()).toBe(1);
  });

  it('sends no attempt after an abort that came while a pause ended without a lease', async () => {
    const controller = new AbortController();
    const reason = new Error('aborted');
    const { lease, attemptsAt, releases } = scriptedLease([], 0);
    lease.pause = async () => {
      controller.abort(reason);
      return null;
    };

    await expect(waitForLease(lease, policy({}), controller.signal)).rejects.toBe(reason);
    expect(attemptsAt).toHaveLength(1);
    expect(releases()).toBe(1);
  });

  it('gives back a lease handed over while the signal aborted', async () => {
    const controller = new AbortController();
    const reason = new Error('aborted');
    const { lease, releases } = scriptedLease([], 0);
    lease.pause = async () => {
      controller.abort(reason);
      return { fence: 9, sentAt: performance.now(), serverTtl: 1_000 };
    };

    await expect(waitForLease(lease, policy({}), controller.signal)).rejects.toBe(reason);
    expect(releases()).toBe(1);
  });

  it('throws an error that retrying cannot fix at once, without waiting for the deadline', async () => {
    const wrongType = new LockBackendError('WRONGTYPE', 'k', { code: 'BACKEND_ERROR' });
    const { lease, attemptsAt } = scriptedLease([wrongType]);

    await expect(waitForLease(lease, policy({ timeout: 5_000 }))).rejects.toBe(wrongType);
    expect(attemptsAt).toHaveLength(1);
  });
});

describe('waitForLease with wake-ups', () => {
  it('takes a lease handed over during a pause, as the store dates it', async () => {
    const { lease, attemptsAt } = scriptedLease([0]);
    lease.pause = async () => ({ fence: 42, sentAt: 5, serverTtl: 1_000 });

    const won = await waitForLease(lease, policy({}));

    expect(won).toMatchObject({ fence: 42, sentAt: 5, serverTtl: 1_000 });
    expect(attemptsAt).toHaveLength(1);
  });

  it('told of releases, waits up to maxStep (to keep its place in line); the step bounds only a wait that may not be told', async () => {
    const waits: TurnWait[] = [];
    const { lease } = scriptedLease([0, 0, 0, 1]);
    lease.pause = async (wait: TurnWait) => {
      waits.push(wait);
      return null;
    };

    await waitForLease(lease, policy({ step: 2, ratio: 2, maxStep: 400, timeout: 10_000 }));

    expect(waits).toHaveLength(3);
    waits.forEach((wait, i) => {
      expect(wait.limit).toBeGreaterThanOrEqual(300);
      expect(wait.limit).toBeLessThanOrEqual(500);
      expect(wait.step).toBeGreaterThanOrEqual(2 * 2 ** i * 0.75);
      expect(wait.step).toBeLessThanOrEqual(2 * 2 ** i * 1.25);
    });
  });

  it('after a failed attempt waits only the step, told of releases or not', async () => {
    const waits: TurnWait[] = [];
    const { lease } = scriptedLease([new LockBackendError('connection refused'), 1]);
    lease.pause = async (wait: TurnWait) => {
      waits.push(wait);
      return null;
    };

    await waitForLease(lease, policy({ step: 20, maxStep: 400 }));

    expect(waits).toHaveLength(1);
    expect(waits[0].limit).toBe(waits[0].step);
    expect(waits[0].limit).toBeLessThanOrEqual(25);
  });

  it("looks again when the holder's lease runs out by itself, even with a long step", async () => {
    const pauses: number[] = [];
    const { lease } = scriptedLease([]);
    lease.attempt = async () => ({ granted: pauses.length > 0, retryIn: 30 });
    lease.pause = async ({ limit, step }: TurnWait) => {
      pauses.push(limit, step);
      return null;
    };

    await waitForLease(lease, policy({ step: 400, maxStep: 400 }));

    expect(pauses).toEqual([31, 31]);
  });

  it('does not join the line on the one attempt of timeout 0, so nothing needs to be left', async () => {
    const joins: boolean[] = [];
    const { lease, releases } = scriptedLease([]);
    lease.attempt = async (join: boolean) => {
      joins.push(join);
      return { granted: false, retryIn: 0 };
    };

    expect(await waitForLease(lease, policy({ timeout: 0 }))).toBeNull();
    expect(joins).toEqual([false]);
    expect(releases()).toBe(0);
  });
});
