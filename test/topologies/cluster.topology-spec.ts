import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Cluster } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { checkHistory } from '../support/history.js';
import { bootLockModule, closeLockApp, type LockApp, uniqueKey } from '../support/lock-app.js';
import { RedisClusterTopology } from '../support/topologies.js';
import { command, parseInfo } from '../support/topology-tools.js';
import { slotOf } from '../../libs/lock/src/store/redis/key-layout.js';
import { type HoldHistoryReport, runHoldHistory, runWorker } from '../support/workers.js';
import { listeningChannelOf, lockKind, LockStore, RedisStore } from '../support/kinds.js';

/** What the runs measured, printed once at the end (for docs/DEPLOYMENT.md). */
const figures: Record<string, unknown> = {};
afterAll(() => console.log(`cluster figures: ${JSON.stringify(figures)}`));

/** Keys over many slots: plain, with a `{tag}` (several keys on one slot), and with stray braces. */
function spreadKeys(label: string, count: number): string[] {
  const odd = ['{}', '}{', 'a{b', 'x}y', '{tag}:1', '{tag}:2', 'user:{42}:cart', '{{x}}'];
  const plain = Array.from({ length: count - odd.length }, (_, i) => `${i}`);
  return [...plain, ...odd].map((key) => `${label}:${key}`);
}

/**
 * Every call of the workers ended within its timeout (plus a command timeout) with a lease or a clean
 * error (a timeout, Redis unavailable, or one of `alsoAllowed`); returns the slowest call in ms. A draw
 * of a fence that failed did so cleanly too: Redis unavailable, or the lease found lost (LOCK_LOST).
 */
function expectCallsWithinTimeout(reports: HoldHistoryReport[], timeout: number, alsoAllowed: string[] = []): number {
  const slowest = Math.max(...reports.map((report) => report.slowestCall));
  expect(slowest).toBeLessThan(timeout + 2_000);
  const allowed = ['LOCK_TIMEOUT', 'BACKEND_UNAVAILABLE', ...alsoAllowed];
  const errors = reports.flatMap((report) => Object.keys(report.errors));
  expect(errors.filter((code) => !allowed.includes(code))).toEqual([]);
  const fenceErrors = reports.flatMap((report) => Object.keys(report.fenceErrors));
  expect(fenceErrors.filter((code) => !['BACKEND_UNAVAILABLE', 'LOCK_LOST'].includes(code))).toEqual([]);
  return slowest;
}

describe('nest-lock on a Redis Cluster of 3 primaries with a replica each', () => {
  let topology: RedisClusterTopology;
  let app: LockApp;
  let target: string;

  beforeAll(async () => {
    topology = await RedisClusterTopology.start({ primaries: 3, replicasPerPrimary: 1 });
    const nodes = topology.nodes.map(({ host, port }) => `redis://${host}:${port}`);
    target = `cluster:${topology.nodes.map(({ host, port }) => `${host}:${port}`).join(',')}`;
    app = await bootLockModule({ redis: { cluster: { nodes } }, commandTimeout: 1_000 });
  });
  afterAll(async () => {
    await closeLockApp(app);
    await topology?.stop();
  });

  const store = () => app.module.get<RedisStore>(LockStore);

  it('locks, extends and releases keys in every slot range, odd braces included, without CROSSSLOT', async () => {
    const keys = spreadKeys(uniqueKey('spread'), 120);
    for (const key of keys) {
      const lock = await app.locks.lock(key, { timeout: 0 });
      expect(await lock.expire(5_000)).toBe(true);
      expect(await lock.fence()).toBeGreaterThan(0);
      const permit = await app.semaphores.acquire(key, 2, { timeout: 0 });
      expect(await app.semaphores.count(key)).toBe(1);
      expect(await permit.fence()).toBeGreaterThan(0);
      expect(await permit.release()).toBe(true);
      expect(await lock.unlock()).toBe(true);
    }
    // The fence counters (written by the fences drawn) stay: every primary served some of the keys.
    const primaries = await topology.primaries();
    const sizes = await Promise.all(primaries.map(({ port }) => command(port, ['DBSIZE'])));
    expect(sizes.map(Number).every((size) => size > 0)).toBe(true);
  });

  it('holds read-write locks on keys of every primary: readers of two applications together, a writer alone', async () => {
    const other = await bootLockModule({
      redis: { cluster: { nodes: topology.nodes.map(({ host, port }) => `redis://${host}:${port}`) } },
    });
    try {
      for (const key of spreadKeys(uniqueKey('read-write'), 12)) {
        const readers = [await app.locks.lock(key, { mode: 'read' }), await other.locks.lock(key, { mode: 'read' })];
        expect(await app.locks.inspect(key)).toMatchObject({ held: true, mode: 'read', readers: 2 });
        const writer = other.locks.lock(key, { timeout: 5_000 });
        await delay(20);
        for (const reader of readers) expect(await reader.unlock()).toBe(true);
        const held = await writer;
        expect(await app.locks.inspect(key)).toMatchObject({ mode: 'write', readers: 0 });
        expect(await held.unlock()).toBe(true);
      }
    } finally {
      await closeLockApp(other);
    }
  });

  it('locks several keys across slots as one, and never deadlocks on opposite orders', async () => {
    const keys = spreadKeys(uniqueKey('many'), 6);
    const lock = await app.locks.lock(keys);
    expect([...lock.keys].sort()).toEqual([...keys].sort());
    for (const key of keys) expect(await app.locks.isLocked(key)).toBe(true);
    expect(await lock.unlock()).toBe(true);

    let sections = 0;
    const loop = async (order: string[]) => {
      for (let i = 0; i < 15; i++) await app.locks.withLock(order, () => void sections++, { timeout: 5_000 });
    };
    await Promise.all([loop(keys), loop([...keys].reverse()), loop(keys.slice(2).concat(keys.slice(0, 2)))]);
    expect(sections).toBe(45);
  });

  it('takes free keys of one slot in one command, all or none, and keys of other slots after them', async () => {
    // Two keys whose hash tags share a slot (a CRC16 collision), and one of another slot.
    const base = uniqueKey('slot-mate');
    const first = `${base}:0`;
    let mate = 1;
    while (slotOf(`${base}:${mate}`) !== slotOf(first)) mate++;
    const sameSlot = [first, `${base}:${mate}`];
    const { port } = await topology.primaryFor(`{${first}}`);
    // The other key lives on another primary, so that its own SET is not counted with the slot's.
    let elsewhere = uniqueKey('other-slot');
    while ((await topology.primaryFor(`{${elsewhere}}`)).port === port) elsewhere = uniqueKey('other-slot');
    const callsOf = async (name: string) => {
      const stats = parseInfo(await command(port, ['INFO', 'commandstats']));
      return Number(/calls=(\d+)/.exec(stats[`cmdstat_${name}`] ?? '')?.[1] ?? 0);
    };
    await (await app.locks.lock(sameSlot)).unlock(); // the script is cached on that primary

    const [evalshaBefore, setBefore] = [await callsOf('evalsha'), await callsOf('set')];
    const lock = await app.locks.lock([...sameSlot, elsewhere]);
    // One script for the two keys of the slot (its two SETs count as calls), nothing else there.
    expect((await callsOf('evalsha')) - evalshaBefore).toBe(1);
    expect((await callsOf('set')) - setBefore).toBe(2);
    expect([...lock.keys].sort()).toEqual([...sameSlot, elsewhere].sort());
    for (const key of [...sameSlot, elsewhere]) expect(await app.locks.isLocked(key)).toBe(true);
    expect(await lock.unlock()).toBe(true);

    // One key of the slot held: the call takes none of them in the end.
    const holder = await app.locks.lock(sameSlot[1]);
    expect(await app.locks.tryLock([...sameSlot, elsewhere])).toBeNull();
    for (const key of [sameSlot[0], elsewhere]) expect(await app.locks.isLocked(key)).toBe(false);
    await holder.unlock();
  });

  it('wakes a waiter by a sharded message (SSUBSCRIBE on the primary of its slot), not by polling', async () => {
    for (const fair of [true, false]) {
      const key = uniqueKey(`sharded-wake-${fair}`);
      const holder = await app.locks.lock(key);
      const waiter = app.locks.lock(key, { fair, step: 5_000, maxStep: 5_000 });
      const channel = listeningChannelOf(store(), lockKind, key);
      const { port } = await topology.primaryFor(channel);
      // Subscribed with SSUBSCRIBE on the channel's primary, not with SUBSCRIBE.
      for (let tries = 0; ; tries++) {
        const [, shardSubscribers] = (await command(port, ['PUBSUB', 'SHARDNUMSUB', channel])) as [string, number];
        if (Number(shardSubscribers) === 1 || tries > 100) break;
        await delay(20);
      }
      expect(await command(port, ['PUBSUB', 'SHARDNUMSUB', channel])).toEqual([channel, 1]);
      expect(await command(port, ['PUBSUB', 'NUMSUB', channel])).toEqual([channel, 0]);
      await delay(200); // asleep for 5 s unless told

      const releasedAt = performance.now();
      await holder.unlock();
      const lock = await waiter;

      expect(performance.now() - releasedAt).toBeLessThan(1_000);
      await lock.unlock();
    }
  });

  it('keeps mutual exclusion across processes with keys on all slots (counters exact)', async () => {
    const keys = spreadKeys(uniqueKey('exclusion'), 12);
    const reports = await runHoldHistory({
      target,
      keys,
      processes: 3,
      workers: 4,
      durationMs: 3_000,
      timeoutMs: 10_000,
    });
    const holds = reports.flatMap((report) => report.holds);
    const history = checkHistory(holds);

    expect(history.overlaps).toEqual([]);
    expect(history.fenceOrder).toEqual([]);
    expect(reports.flatMap((report) => Object.keys(report.errors))).toEqual([]);
    // Every holder drew its fence, at some moment of its hold.
    expect(reports.flatMap((report) => Object.keys(report.fenceErrors))).toEqual([]);
    expect(holds.filter((hold) => hold.fence === undefined)).toEqual([]);
    // Every counter saw exactly its sections: no lost update.
    const client = new Cluster(topology.nodes);
    try {
      for (const key of keys) {
        const sections = holds.filter((hold) => hold.key === key).length;
        expect(Number(await client.get(`${key}:counter`))).toBe(sections);
      }
    } finally {
      client.disconnect();
    }
    figures.sectionsPerSecond = Math.round(holds.length / 3);
  });

  it('never lets more than the limit hold permits across processes, semaphores on all slots', async () => {
    const names = spreadKeys(uniqueKey('permits'), 10);
    const reports = await runHoldHistory({
      target,
      keys: names,
      processes: 3,
      workers: 6,
      durationMs: 3_000,
      timeoutMs: 10_000,
      semaphoreLimit: 2,
    });
    const holds = reports.flatMap((report) => report.holds);

    const history = checkHistory(holds);
    expect(history.permitLimit).toEqual([]);
    // Fences drawn at any moment of a permit's hold, in the order they were drawn.
    expect(history.fenceOrder).toEqual([]);
    expect(reports.flatMap((report) => Object.keys(report.errors))).toEqual([]);
    expect(reports.flatMap((report) => Object.keys(report.fenceErrors))).toEqual([]);
    expect(holds.filter((hold) => hold.fence === undefined)).toEqual([]);
    // Contended: some name had its two permits held at once.
    expect(holds.length).toBeGreaterThan(100);
  });

  it('serves waiters of several processes in the order they arrived', async () => {
    const key = uniqueKey('order');
    const holder = await app.locks.lock(key);
    const client = new Cluster(topology.nodes);
    try {
      const line = store().keysOf(lockKind, key)[2];
      const labels = ['first', 'second', 'third'];
      const children = [];
      for (const [i, label] of labels.entries()) {
        children.push(runWorker('line-up', [target, key, label, 'fair']));
        while ((await client.zcard(line)) < i + 1) await delay(10);
      }

      await holder.unlock();
      await Promise.all(children);

      expect(await client.lrange(`${key}:granted`, 0, -1)).toEqual(labels);
    } finally {
      client.disconnect();
    }
  });

  it('starts while the cluster reports itself down, and serves locks once it is up again', async () => {
    // Every node says cluster_state:fail: ioredis's first ready check fails and it reconnects by itself
    // (a module start once waited for that first connect() forever).
    const owner = await topology.uncoverSlot(0);
    const nodes = topology.nodes.map(({ host, port }) => `redis://${host}:${port}`);
    const bootStart = Date.now();
    const booting = bootLockModule({ redis: { cluster: { nodes } }, commandTimeout: 1_000, logger: false });
    await delay(1_000);
    await topology.recoverSlot(0, owner);
    const giveUp = new AbortController();
    const started = await Promise.race([
      booting,
      delay(15_000, undefined, { signal: giveUp.signal }).then(() => {
        throw new Error('the module did not start within 15 s');
      }),
    ]).finally(() => giveUp.abort());
    try {
      figures.startThroughClusterDownMs = Date.now() - bootStart;
      const lock = await started.locks.lock(uniqueKey('after-down'), { timeout: 5_000 });
      expect(await lock.fence()).toBeGreaterThan(0);
      expect(await lock.unlock()).toBe(true);
    } finally {
      await closeLockApp(started);
    }
  });

  it('answers every caller within its timeout when a primary is killed, and leases resume once its replica took over', async () => {
    const keys = spreadKeys(uniqueKey('killed'), 12);
    const timeout = 8_000;
    const run = runHoldHistory({
      target,
      keys,
      processes: 3,
      workers: 4,
      durationMs: 12_000,
      timeoutMs: timeout,
    });
    await delay(2_500);
    const [primary] = await topology.primaries();
    const killedAt = Date.now();
    await topology.kill(primary);
    figures.promotionAfterKillMs = await topology.waitForClusterOk();
    const reports = await run;

    const holds = reports.flatMap((report) => report.holds);
    const after = holds.filter((hold) => hold.acquiredAt > killedAt + (figures.promotionAfterKillMs as number));
    expect(after.length).toBeGreaterThan(50);
    // The sections' own plain client may fail too while the slot moves (not nest-lock's error).
    const slowest = expectCallsWithinTimeout(reports, timeout, ['SECTION_CLIENT']);
    figures.killErrors = reports.map((report) => report.errors);
    figures.killFenceErrors = reports.map((report) => report.fenceErrors);
    figures.killSlowestCallMs = slowest;
    // Asynchronous replication may lose a lock granted just before the kill: reported, not asserted.
    figures.overlapsAcrossKill = checkHistory(holds).overlaps.length;
    await topology.restart(primary);
    await topology.waitForClusterOk();
  });

  it('keeps mutual exclusion and answers every caller within its timeout through a primary failover', async () => {
    const keys = spreadKeys(uniqueKey('failover'), 12);
    const timeout = 10_000;
    const run = runHoldHistory({
      target,
      keys,
      processes: 3,
      workers: 4,
      durationMs: 8_000,
      timeoutMs: timeout,
    });
    await delay(2_500);
    const [replica] = await topology.replicas();
    figures.manualFailoverMs = await topology.failover(replica);
    const reports = await run;

    const holds = reports.flatMap((report) => report.holds);
    const history = checkHistory(holds);
    expect(history.overlaps).toEqual([]);
    expect(history.fenceOrder).toEqual([]);
    const slowest = expectCallsWithinTimeout(reports, timeout);
    expect(holds.length).toBeGreaterThan(100);
    figures.failoverErrors = reports.map((report) => report.errors);
    figures.failoverFenceErrors = reports.map((report) => report.fenceErrors);
    figures.failoverSlowestCallMs = slowest;
  });
});
