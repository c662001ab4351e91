import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Cluster, Redis } from 'ioredis';
import { IndependentMasters, RedisClusterTopology, SentinelTopology } from '../support/topologies.js';
import { command, NotYet, waitFor } from '../support/topology-tools.js';
import { type HoldHistoryReport, runWorkers } from '../support/workers.js';

/** What the run measured, printed once at the end. */
const timings: Record<string, number> = {};
afterAll(() => {
  console.log(`topology timings (ms): ${JSON.stringify(timings)}`);
});

/** The redis-server processes this test process started and has not ended. */
function ownRedisServers(): string[] {
  const children = execFileSync('ps', ['--ppid', String(process.pid), '-o', 'pid=,comm='], { encoding: 'utf8' });
  return children
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.endsWith('redis-server'));
}

describe('a Redis Cluster of 3 primaries with a replica each', () => {
  let topology: RedisClusterTopology;
  let cluster: Cluster;

  beforeAll(async () => {
    topology = await RedisClusterTopology.start({ primaries: 3, replicasPerPrimary: 1 });
    timings.clusterStart = topology.startMs;
    cluster = new Cluster(topology.nodes);
  });
  afterAll(async () => {
    cluster?.disconnect();
    await topology?.stop();
  });

  it('has 3 primaries sharing the 16384 slots, each with one replica in sync', async () => {
    const primaries = await topology.primaries();
    const replicas = await topology.replicas();

    expect(topology.nodes).toHaveLength(6);
    expect(primaries).toHaveLength(3);
    expect(replicas).toHaveLength(3);
    expect(replicas.map((replica) => replica.primaryId).sort()).toEqual(primaries.map((primary) => primary.id).sort());
    const slots = primaries.flatMap((primary) => primary.slots).reduce((sum, [from, to]) => sum + to - from + 1, 0);
    expect(slots).toBe(16_384);
    for (const replica of replicas) {
      expect(String(await command(replica.port, ['INFO', 'replication']))).toContain('master_link_status:up');
    }
  });

  it('spreads keys over all three primaries through an ioredis Cluster client', async () => {
    const keys = Array.from({ length: 60 }, (_, i) => `spread:${i}`);
    for (const key of keys) await cluster.set(key, key);

    const sizes = await Promise.all((await topology.primaries()).map(({ port }) => command(port, ['DBSIZE'])));
    expect(sizes.map(Number).every((size) => size > 0)).toBe(true);
    expect(sizes.map(Number).reduce((sum, size) => sum + size, 0)).toBe(keys.length);
    expect(await Promise.all(keys.map((key) => cluster.get(key)))).toEqual(keys);
  });

  it('delivers SPUBLISH to SSUBSCRIBE (sharded pub/sub) on each of the three shards', async () => {
    // One channel served by each primary.
    const byPrimary = new Map<number, string>();
    for (let i = 0; byPrimary.size < 3; i++) {
      const channel = `events:${i}`;
      const { port } = await topology.primaryFor(channel);
      if (!byPrimary.has(port)) byPrimary.set(port, channel);
    }
    const channels = [...byPrimary.values()];
    const subscriber = new Cluster(topology.nodes, { shardedSubscribers: true });
    try {
      const received: string[] = [];
      subscriber.on('smessage', (channel: string, message: string) => received.push(`${channel}=${message}`));
      for (const channel of channels) await subscriber.ssubscribe(channel);

      const receivers = await Promise.all(channels.map((channel) => cluster.spublish(channel, `to ${channel}`)));
      await waitFor('three sharded messages', Date.now() + 5_000, async () => {
        if (received.length < 3) throw new Error(`${received.length} received`);
      });

      expect(receivers).toEqual([1, 1, 1]);
      expect(received.sort()).toEqual(channels.map((channel) => `${channel}=to ${channel}`).sort());
    } finally {
      subscriber.disconnect();
    }
  });

  it('moves a primary role with CLUSTER FAILOVER, and the cluster client keeps working', async () => {
    const key = 'failover:key';
    await cluster.set(key, 'before');
    const oldPrimary = await topology.primaryFor(key);
    const replica = (await topology.replicas()).find((node) => node.primaryId === oldPrimary.id)!;

    timings.clusterManualFailover = await topology.failover(replica);

    expect((await topology.primaryFor(key)).port).toBe(replica.port);
    const demoted = (await topology.replicas()).find((node) => node.port === oldPrimary.port);
    expect(demoted?.primaryId).toBe(replica.id);
    expect(await cluster.get(key)).toBe('before');
    await cluster.set(key, 'after');
    expect(await cluster.get(key)).toBe('after');
  });

  it("promotes a killed primary's replica within a bounded time; the old primary comes back as its replica", async () => {
    const key = 'crash:key';
    const primary = await topology.primaryFor(key);
    const replica = (await topology.replicas()).find((node) => node.primaryId === primary.id)!;
    const direct = new Redis(primary.port, '127.0.0.1');
    try {
      await direct.set(key, 'acknowledged');
      expect(await direct.wait(1, 2_000)).toBe(1);
    } finally {
      direct.disconnect();
    }

    await topology.kill(primary);
    timings.clusterPromotionAfterKill = await topology.waitForClusterOk(20_000);

    expect(timings.clusterPromotionAfterKill).toBeLessThan(15_000);
    expect((await topology.primaries()).map((node) => node.port)).toContain(replica.port);
    expect((await topology.primaryFor(key)).port).toBe(replica.port);
    expect(await cluster.get(key)).toBe('acknowledged');
    await cluster.set(key, 'after the crash');
    expect(await cluster.get(key)).toBe('after the crash');

    await topology.restart(primary);
    timings.clusterRejoinAfterRestart = await topology.waitForClusterOk(20_000);

    const back = (await topology.replicas()).find((node) => node.port === primary.port);
    expect(back?.primaryId).toBe(replica.id);
    expect(await command(primary.port, ['DBSIZE'])).toBe(await command(replica.port, ['DBSIZE']));
  });
});

describe('a primary, a replica and three sentinels', () => {
  let topology: SentinelTopology;

  beforeAll(async () => {
    topology = await SentinelTopology.start();
    timings.sentinelStart = topology.startMs;
  });
  afterAll(async () => {
    await topology?.stop();
  });

  it('tells ioredis the primary; after the primary crashes the replica takes over and writes work again', async () => {
    const client = new Redis({ sentinels: topology.sentinels, name: topology.name });
    client.on('error', () => undefined); // its reconnects while the primary is down
    try {
      const primary = await topology.primary();
      await client.set('sentinel:key', 'before');
      expect(await client.wait(1, 2_000)).toBe(1);
      expect(String(await client.info('server'))).toContain(`tcp_port:${primary.port}`);

      const killed = await topology.killPrimary();
      expect(killed).toEqual(primary);
      const failover = await topology.waitForFailover(killed.port, 30_000);
      timings.sentinelFailover = failover.ms;

      expect(failover.primary.port).not.toBe(killed.port);
      expect(failover.ms).toBeLessThan(20_000);
      expect(await topology.primary()).toEqual(failover.primary);
      expect(await client.get('sentinel:key')).toBe('before');
      await client.set('sentinel:key', 'after');
      expect(await client.get('sentinel:key')).toBe('after');
      expect(String(await client.info('server'))).toContain(`tcp_port:${failover.primary.port}`);
    } finally {
      client.disconnect();
    }
  });
});

describe('independent masters', () => {
  let masters: IndependentMasters;

  beforeAll(async () => {
    masters = await IndependentMasters.start(5);
    timings.fiveMastersStart = masters.startMs;
  });
  afterAll(async () => {
    await masters?.stop();
  });

  it('starts 5 unrelated servers; 2 killed stop answering; a restarted one is back on its port, empty', async () => {
    const ports = masters.addresses.map(({ port }) => port);
    expect(new Set(ports).size).toBe(5);
    for (const port of ports) expect(await command(port, ['SET', 'resource', `held on ${port}`])).toBe('OK');
    for (const port of ports) expect(await command(port, ['ROLE'])).toEqual(['master', 0, []]);

    await masters.kill(0);
    await masters.kill(1);
    await expect(command(ports[0], ['PING'])).rejects.toThrow();
    await expect(command(ports[1], ['PING'])).rejects.toThrow();
    for (const port of ports.slice(2)) expect(await command(port, ['GET', 'resource'])).toBe(`held on ${port}`);

    await masters.restart(0);
    expect(await command(ports[0], ['GET', 'resource'])).toBeNull();
    expect(await command(ports[0], ['DBSIZE'])).toBe(0);
    await expect(command(ports[1], ['PING'])).rejects.toThrow();
  });

  it('freezes and resumes one server', async () => {
    const { port } = masters.addresses[2];
    masters.pause(2);
    await expect(command(port, ['PING'], 300)).rejects.toThrow(/no answer to PING within 300 ms/);
    masters.resume(2);
    expect(await command(port, ['PING'])).toBe('PONG');
  });
});

describe('a start that cannot finish in time', () => {
  it('throws a clear error and leaves no server running', async () => {
    const before = ownRedisServers();

    await expect(RedisClusterTopology.start({ timeoutMs: 300 })).rejects.toThrow(/did not finish within 0\.3 s/);
    expect(ownRedisServers()).toEqual(before);
  });
});

describe("the workers' start line on a Redis Cluster", () => {
  let topology: RedisClusterTopology;

  beforeAll(async () => {
    topology = await RedisClusterTopology.start({ primaries: 3, replicasPerPrimary: 1 });
  });
  afterAll(async () => {
    await topology?.stop();
  });

  // A fault spec starts its workers, then kills a primary on a schedule: on a loaded machine the workers may
  // still be at their start line then. Their plain client's commands fail during the failover ("Too many
  // Cluster redirections"), and the rejection reached the worker's top-level await: the process ended with
  // an unhandled rejection (exit code 1) — all of them at once, since they all poll the same key.
  it('holds while the primary serving it is killed: the workers waiting there start once the replica took over', async () => {
    const keys = [0, 1, 2, 3].map((i) => `start-line:${process.pid}:${i}`);
    const startLine = `${keys[0]}:ready`;
    const target = `cluster:${topology.nodes.map(({ host, port }) => `${host}:${port}`).join(',')}`;
    // hold-history <target> <keys> <processes> <workers> <durationMs> <timeoutMs> lock: 3 processes check in.
    const args = [target, keys.join(','), 3, 2, 1_000, 5_000, 'lock'];
    const first = runWorkers<HoldHistoryReport>('hold-history', 2, args);
    first.catch(() => undefined); // settled below, after the failover
    const owner = await topology.primaryFor(startLine);
    // Two of the three have checked in and poll the start line (a counter or a set, whichever the workers keep).
    await waitFor('two workers at the start line', Date.now() + 30_000, async () => {
      const type = String(await command(owner.port, ['TYPE', startLine]));
      const count =
        type === 'set'
          ? await command(owner.port, ['SCARD', startLine])
          : await command(owner.port, ['GET', startLine]);
      if (Number(count) < 2) throw new NotYet(`${Number(count)} checked in (${type})`);
    });
    await topology.kill(owner);
    await topology.waitForClusterOk();
    // The third one checks in once the replica serves the start line: then all three run their loops.
    const third = runWorkers<HoldHistoryReport>('hold-history', 1, args);
    const [early, late] = await Promise.allSettled([first, third]);
    // Rejected with each failed worker's stderr (the unhandled rejection) when they did not hold.
    if (early.status === 'rejected') throw early.reason;
    if (late.status === 'rejected') throw late.reason;
    const reports = [...early.value, ...late.value];
    expect(reports).toHaveLength(3);
    for (const report of reports) expect(report.holds.length).toBeGreaterThan(0);
  }, 90_000);
});

describe('after every topology stopped', () => {
  it('no redis-server started here is left running', () => {
    expect(ownRedisServers()).toEqual([]);
  });
});
