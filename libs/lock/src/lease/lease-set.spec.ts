import { describe, expect, it } from '@jest/globals';
import { type TakeSteps, takeInOrder } from './lease-set.js';

/** Steps that record what they were asked, take a run at once unless it holds a `busy` key, and fail on `failing`. */
function recordedSteps(busy: string[] = [], failing?: string) {
  const calls: string[] = [];
  const givenBack: string[] = [];
  const steps: TakeSteps<string> = {
    all: async (run) => {
      calls.push(`all ${run.join(',')}`);
      return run.some((key) => busy.includes(key)) ? undefined : [...run];
    },
    one: async (key) => {
      calls.push(`one ${key}`);
      if (key === failing) throw new Error(`${key} timed out`);
      return key;
    },
    giveBack: async (key) => void givenBack.push(key),
  };
  return { steps, calls, givenBack };
}

describe('taking several keys', () => {
  it('takes a free run in one step, and a run with a busy key key by key, in order', async () => {
    const { steps, calls } = recordedSteps(['c1']);
    const taken = await takeInOrder([['a1', 'a2'], ['b1'], ['c1', 'c2']], 1_000, steps);

    expect(taken).toEqual(['a1', 'a2', 'b1', 'c1', 'c2']);
    expect(calls).toEqual(['all a1,a2', 'one b1', 'all c1,c2', 'one c1', 'one c2']);
  });

  it('gives back every lease taken so far when one key cannot be taken, and throws its error', async () => {
    const { steps, givenBack } = recordedSteps(['b2'], 'b2');

    await expect(
      takeInOrder(
        [
          ['a1', 'a2'],
          ['b1', 'b2', 'b3'],
        ],
        1_000,
        steps,
      ),
    ).rejects.toThrow('b2 timed out');
    expect(givenBack.sort()).toEqual(['a1', 'a2', 'b1']);
  });

  it('tells each key what is left of the timeout', async () => {
    const timesLeft: number[] = [];
    const steps: TakeSteps<string> = {
      all: async () => undefined,
      one: async (key, timeLeft) => {
        timesLeft.push(timeLeft);
        await new Promise((resolve) => setTimeout(resolve, 30));
        return key;
      },
      giveBack: async () => undefined,
    };
    await takeInOrder([['a', 'b']], 1_000, steps);

    expect(timesLeft[0]).toBeGreaterThan(990);
    expect(timesLeft[1]).toBeLessThanOrEqual(timesLeft[0] - 25);
  });
});
