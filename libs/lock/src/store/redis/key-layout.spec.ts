import { describe, expect, it } from '@jest/globals';
import { slotOf, slotOrder } from './key-layout.js';

describe('the order several keys are taken in on Redis', () => {
  it('orders keys by hash slot, then by key, whatever order they were named in', () => {
    const keys = ['b', 'a', 'account:7', 'account:1', 'z'];
    const [ordered] = slotOrder(keys, false);
    expect(slotOrder([...keys].reverse(), false)).toEqual([ordered]);
    for (let i = 1; i < ordered.length; i++) {
      const [before, after] = [ordered[i - 1], ordered[i]];
      expect(slotOf(before) < slotOf(after) || (slotOf(before) === slotOf(after) && before < after)).toBe(true);
    }
  });

  it('takes them in one run on one server, and a run per slot on a Cluster', () => {
    const keys = Array.from({ length: 40 }, (_, i) => `account:${i}`);
    expect(slotOrder(keys, false)).toHaveLength(1);
    const runs = slotOrder(keys, true);
    expect(runs.flat()).toEqual(slotOrder(keys, false)[0]);
    for (const run of runs) expect(new Set(run.map(slotOf)).size).toBe(1);
    expect(new Set(runs.map((run) => slotOf(run[0]))).size).toBe(runs.length);
  });
});
