import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { counter, Fleet, percentile } from '../support/leader-fleet.js';
import { RedisServer } from '../support/redis-server.js';

/** The chaos rounds, in turn. */
const FAULTS = ['sigkill', 'sigterm', 'sigstop', 'restart', 'pause'] as const;
type Fault = (typeof FAULTS)[number];

describe('leader election under chaos: 5 processes, SIGKILL / SIGTERM / SIGSTOP / Redis restart / CLIENT PAUSE', () => {
  let lock: RedisServer;
  let resource: RedisServer;
  let resourceClient: Redis;
  const fleets: Fleet[] = [];
  /** What the run measured, printed once at the end. */
  const figures: Record<string, unknown> = {};

  beforeAll(async () => {
    [lock, resource] = await Promise.all([RedisServer.start(), RedisServer.start()]);
    resourceClient = new Redis(resource.url);
  });
  afterAll(async () => {
    console.log(`leader chaos: ${JSON.stringify(figures)}`);
    await Promise.all(fleets.map((fleet) => fleet.stop()));
    resourceClient?.disconnect();
    await Promise.all([lock?.stop(), resource?.stop()]);
  });

  it('200 rounds: a new leader every round under a higher term, 0 stale writes, failover within its bounds', async () => {
    const ttls = [500, 600];
    const fairs = ['true', 'strict', 'false'];
    const fleet = new Fleet(lock.url, resource.url, 'chaos', 'nest-lock');
    fleets.push(fleet);
    for (let i = 0; i < 5; i++) fleet.spawn(ttls[i % ttls.length], fairs[i % fairs.length]);
    let leader = await fleet.nextLeader(0, 20_000);
    const failovers: Record<Fault, number[]> = { sigkill: [], sigterm: [], sigstop: [], restart: [], pause: [] };
    const admin = new Redis(lock.url, { maxRetriesPerRequest: null });
    admin.on('error', () => undefined);
    try {
      for (let round = 0; round < 200; round++) {
        const fault = FAULTS[round % FAULTS.length];
        const { ttl } = fleet.settingsOf(leader.pid);
        const storeFault =
          fault === 'restart' ? () => lock.restart() : () => admin.call('CLIENT', 'PAUSE', String(ttl * 2), 'ALL');
        const { next, failover } = await fleet.round(leader, fault, storeFault);
        failovers[fault].push(failover);
        leader = next;
        const { violations, first } = await counter(resourceClient, 'chaos');
        if (violations > 0) throw new Error(`round ${round} (${fault}): ${violations} stale writes, first: ${first}`);
      }
    } finally {
      admin.disconnect();
    }
    await delay(100);
    const { writes, late, violations } = await counter(resourceClient, 'chaos');
    const terms = fleet.elections().map((election) => election.term!);
    figures.rounds = 200;
    figures.writes = writes;
    figures.lateWritesRefusedByTheFence = late;
    figures.elections = terms.length;
    for (const fault of FAULTS) {
      figures[`${fault} failover p50/p99/max ms`] = [0.5, 0.99, 1].map((p) => percentile(failovers[fault], p));
    }
    expect(violations).toBe(0);
    expect(writes).toBeGreaterThan(200);
    // Terms only grow, election after election.
    expect(terms.every((term, i) => i === 0 || term > terms[i - 1])).toBe(true);
    // A leader killed: another leads within its lease and one renewal interval (ttl ≤ 600: 800 ms).
    expect(percentile(failovers.sigkill, 0.99)).toBeLessThanOrEqual(600 + 600 / 3);
    // A leader shut down (SIGTERM, app.close()): it resigns, and another leads within a second.
    expect(percentile(failovers.sigterm, 0.99)).toBeLessThan(1_000);
    // 200 rounds of failovers take about 110 s on a quiet machine: the suite's 120 s left no margin.
  }, 300_000);

  it('the control: a hand-written SET NX election, its leader SIGSTOPped past its lease, leads beside the next', async () => {
    const fleet = new Fleet(lock.url, resource.url, 'naive', 'naive');
    fleets.push(fleet);
    for (let i = 0; i < 3; i++) fleet.spawn(500, 'true');
    const leader = await fleet.nextLeader(0, 20_000);
    await delay(30);
    const { child } = fleet.settingsOf(leader.pid);
    child.kill('SIGSTOP');
    await fleet.nextLeader(leader.term!, 10_000);
    await delay(60);
    child.kill('SIGCONT');
    await delay(100);
    const { violations } = await counter(resourceClient, 'naive');
    figures.controlViolations = violations;
    expect(violations).toBeGreaterThan(0);
  });
});
