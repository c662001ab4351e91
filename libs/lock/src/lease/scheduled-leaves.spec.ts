import { describe, expect, it } from '@jest/globals';
import { setTimeout as delay } from 'node:timers/promises';
import type { ChainLease, HoldTicket } from './lease-chain.js';
import { ScheduledLeaves } from './scheduled-leaves.js';

/** A ticket that records when it was left. */
function recordedTicket() {
  const left: number[] = [];
  const lease = { held: true } as ChainLease;
  const ticket: HoldTicket<ChainLease> = {
    lease,
    handle: lease,
    run: (fn) => fn(),
    leave: async () => void left.push(performance.now()),
  };
  return { ticket, left };
}

describe('releases put off for holdAtLeast', () => {
  it('leaves no sooner than holdAtLeast after the start, and returns at once', async () => {
    const leaves = new ScheduledLeaves();
    const { ticket, left } = recordedTicket();
    const start = performance.now();
    const held = leaves.holdAtLeast(ticket, 150, 10_000);

    await held.leave();
    expect(left).toEqual([]);
    await delay(250);
    expect(left).toHaveLength(1);
    expect(left[0] - start).toBeGreaterThanOrEqual(140);
  });

  it('leaves at once when the routine ran longer than holdAtLeast', async () => {
    const leaves = new ScheduledLeaves();
    const { ticket, left } = recordedTicket();
    const held = leaves.holdAtLeast(ticket, 20, 10_000);
    await delay(40);

    await held.leave();
    expect(left).toHaveLength(1);
  });

  it('never puts a release off longer than the ttl', async () => {
    const leaves = new ScheduledLeaves();
    const { ticket, left } = recordedTicket();
    const held = leaves.holdAtLeast(ticket, 60_000, 100);

    await held.leave();
    await delay(250);
    expect(left).toHaveLength(1);
  });

  it('leaves every put-off release at once on shutdown, and puts none off after it', async () => {
    const leaves = new ScheduledLeaves();
    const [first, second] = [recordedTicket(), recordedTicket()];
    await leaves.holdAtLeast(first.ticket, 60_000, 60_000).leave();
    const later = leaves.holdAtLeast(second.ticket, 60_000, 60_000);

    await leaves.leaveAllNow();
    expect(first.left).toHaveLength(1);
    await later.leave();
    expect(second.left).toHaveLength(1);
  });
});
