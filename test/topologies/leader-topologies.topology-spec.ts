import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { counter, Fleet, percentile } from '../support/leader-fleet.js';
import { RedisServer } from '../support/redis-server.js';
import { IndependentMasters, RedisClusterTopology, SentinelTopology } from '../support/topologies.js';

/** The faults every topology takes in turn: the leader's own process (the store's faults are node-specific). */
const FAULTS = ['sigkill', 'sigterm', 'sigstop'] as const;
const ROUNDS = 30;

/**
 * 5 processes (leases of 500 and 600 ms, every fairness) campaigning on `target` through 30 rounds of
 * SIGKILL / SIGTERM / SIGSTOP of the leader, against a fenced counter on a separate Redis: a new leader
 * every round under a higher term, and no process that found itself leading after a newer leader began.
 */
async function chaos(target: string, resource: RedisServer, name: string): Promise<Record<string, number[]>> {
  const fleet = new Fleet(target, resource.url, name, 'nest-lock');
  const ttls = [500, 600];
  const fairs = ['true', 'strict', 'false'];
  const failovers: Record<string, number[]> = { sigkill: [], sigterm: [], sigstop: [] };
  const resourceClient = new Redis(resource.url);
  try {
    for (let i = 0; i < 5; i++) fleet.spawn(ttls[i % ttls.length], fairs[i % fairs.length]);
    let leader = await fleet.nextLeader(0, 30_000);
    for (let round = 0; round < ROUNDS; round++) {
      const fault = FAULTS[round % FAULTS.length];
      const { next, failover } = await fleet.round(leader, fault);
      failovers[fault].push(failover);
      leader = next;
    }
    await delay(100);
    const { writes, violations, first } = await counter(resourceClient, name);
    expect({ violations, first }).toEqual({ violations: 0, first: undefined });
    expect(writes).toBeGreaterThan(ROUNDS);
    return failovers;
  } finally {
    resourceClient.disconnect();
    await fleet.stop();
  }
}

describe('leader election on other topologies: 5 processes, 30 rounds of SIGKILL / SIGTERM / SIGSTOP', () => {
  let resource: RedisServer;
  const figures: Record<string, unknown> = {};

  beforeAll(async () => {
    resource = await RedisServer.start();
  });
  afterAll(async () => {
    console.log(`leader election on topologies (failover p50/p99 ms): ${JSON.stringify(figures)}`);
    await resource?.stop();
  });

  it('on a Redis Cluster of 3 primaries', async () => {
    const cluster = await RedisClusterTopology.start({ primaries: 3, replicasPerPrimary: 0 });
    try {
      const target = `cluster:${cluster.nodes.map(({ host, port }) => `${host}:${port}`).join(',')}`;
      const failovers = await chaos(target, resource, 'on-cluster');
      for (const [fault, times] of Object.entries(failovers))
        figures[`cluster ${fault}`] = [percentile(times, 0.5), percentile(times, 0.99)];
      expect(percentile(failovers.sigkill, 0.99)).toBeLessThanOrEqual(600 + 600 / 3);
      expect(percentile(failovers.sigterm, 0.99)).toBeLessThan(1_000);
    } finally {
      await cluster.stop();
    }
  });

  it('on Redlock over 3 independent masters', async () => {
    const masters = await IndependentMasters.start(3);
    try {
      const failovers = await chaos(`redlock:${masters.urls.join(',')}`, resource, 'on-redlock');
      for (const [fault, times] of Object.entries(failovers))
        figures[`redlock ${fault}`] = [percentile(times, 0.5), percentile(times, 0.99)];
      expect(percentile(failovers.sigkill, 0.99)).toBeLessThanOrEqual(600 + 600 / 3);
      expect(percentile(failovers.sigterm, 0.99)).toBeLessThan(1_000);
    } finally {
      await masters.stop();
    }
  });
});

describe('leader election across a Sentinel failover (waitForReplicas: 1 replica)', () => {
  let topology: SentinelTopology;
  let resource: RedisServer;

  beforeAll(async () => {
    [topology, resource] = await Promise.all([SentinelTopology.start(), RedisServer.start()]);
  });
  afterAll(async () => {
    await Promise.all([topology?.stop(), resource?.stop()]);
  });

  it('the primary killed: no two leaders across the failover; a leader again once a replica acknowledges', async () => {
    const target = `sentinel:mymaster,${topology.sentinels.map(({ host, port }) => `${host}:${port}`).join(',')}`;
    const fleet = new Fleet(target, resource.url, 'on-sentinel', 'nest-lock');
    const resourceClient = new Redis(resource.url);
    try {
      for (let i = 0; i < 3; i++) fleet.spawn(i % 2 === 0 ? 1_000 : 1_500, ['true', 'strict', 'false'][i]);
      const leader = await fleet.nextLeader(0, 30_000);
      await delay(500);
      const killed = await topology.killPrimary();
      await topology.waitForFailover(killed.port);
      // The promoted replica has no replica of its own: with waitForReplicas it grants nothing until
      // the old primary is back as its replica (documented), then a campaign leads again.
      await delay(1_000);
      expect(fleet.elections().filter((election) => election.term! > leader.term!)).toEqual([]);
      await topology.restartNode(killed.port);
      await topology.waitForReplica(killed.port);
      const next = await fleet.nextLeader(leader.term!, 30_000);
      await delay(1_000);
      const { writes, violations, first } = await counter(resourceClient, 'on-sentinel');
      expect({ violations, first }).toEqual({ violations: 0, first: undefined });
      expect(writes).toBeGreaterThan(10);
      expect(next.term).toBeGreaterThan(leader.term!);
    } finally {
      resourceClient.disconnect();
      await fleet.stop();
    }
  });
});
