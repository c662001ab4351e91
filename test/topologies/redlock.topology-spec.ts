import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import {
  InvalidArgumentError,
  LockBackendError,
  LockError,
  LockTimeoutError,
  type Lock,
  type LockModuleOptions,
} from 'nest-lock';
import { type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import {
  type AppliedWrite,
  checkFencedWork,
  checkFenceOrder,
  checkMutualExclusion,
  type FencedWorkRecord,
  type HoldRecord,
} from '../support/history.js';
import { bootLockModule, type LockApp } from '../support/lock-app.js';
import { RedisServer } from '../support/redis-server.js';
import { IndependentMasters } from '../support/topologies.js';
import { killWorker, startWorker } from '../support/workers.js';

/** What the run measured, printed once at the end. */
const timings: Record<string, number | string> = {};
afterAll(() => {
  console.log(`redlock topology timings (ms): ${JSON.stringify(timings)}`);
});

const COMMAND_TIMEOUT = 200;

/** Boots a module on Redlock over `urls`, and waits until a lock can be taken (every node out of quarantine). */
async function bootRedlock(
  urls: NonNullable<LockModuleOptions['redlock']>['nodes'],
  redlock: Partial<NonNullable<LockModuleOptions['redlock']>>,
  ttl: number,
) {
  const app = await bootLockModule({
    redlock: { nodes: urls, ...redlock },
    commandTimeout: COMMAND_TIMEOUT,
    defaults: { ttl, timeout: 2_000, maxStep: 50 },
    logger: false,
  });
  return app;
}

/** Waits until `app` can take a probe lock (the nodes it needs are out of quarantine); returns how long that took. */
async function untilLockable(app: LockApp, within = 15_000): Promise<number> {
  const start = Date.now();
  for (;;) {
    const probe = await app.locks.tryLock(`probe:${Date.now()}:${Math.random()}`, { ttl: 500 }).catch(() => null);
    if (probe) {
      await probe.unlock();
      return Date.now() - start;
    }
    if (Date.now() - start > within) throw new Error(`no lock could be taken within ${within} ms`);
    await delay(50);
  }
}

/** A hold as the history checker reads it, from a lock held in this process (its intervals: no fence drawn). */
function holdOf(lock: Lock, pid: number, requestedAt: number, acquiredAt: number): HoldRecord {
  return {
    pid,
    worker: 0,
    key: lock.key,
    kind: 'lock',
    token: lock.token,
    requestedAt,
    acquiredAt,
    validUntil: acquiredAt + lock.validity,
    releasedAt: Date.now() + 60_000,
  };
}

/**
 * Until `validUntil` (the first owner's validity), `other` must never get `key`: each try is refused, or
 * fails with LockBackendError (right after a restart a client may not have reconnected to a node yet
 * and cannot reach a quorum: no grant either). The control: `careless` (the same client with
 * `quarantine: 0`) does get it, and the history checker reports the overlap with `first`.
 */
async function expectNoSecondOwner(
  key: string,
  first: HoldRecord,
  validUntil: number,
  other: LockApp,
  careless: LockApp,
): Promise<void> {
  let refusals = 0;
  let controlled = false;
  while (Date.now() < validUntil - 50) {
    const attempt = await other.locks.tryLock(key).catch((error: unknown) => error);
    if (attempt !== null) expect(attempt).toBeInstanceOf(LockBackendError);
    else refusals++;
    if (!controlled && refusals >= 3) {
      const requested = Date.now();
      const intruder = await careless.locks.tryLock(key).catch(() => null);
      if (intruder !== null) {
        controlled = true;
        const overlaps = checkMutualExclusion([first, holdOf(intruder, 2, requested, Date.now())]);
        expect(overlaps).toHaveLength(1);
        expect(overlaps[0].check).toBe('overlap');
        expect(await intruder.unlock()).toBe(true);
      }
    }
    await delay(25);
  }
  expect(refusals).toBeGreaterThan(5);
  expect(controlled).toBe(true);
}

describe('Redlock over 3 independent masters', () => {
  const TTL = 2_000;
  let masters: IndependentMasters;
  let app: LockApp;

  let socketDir: string;

  beforeAll(async () => {
    socketDir = await mkdtemp(join(tmpdir(), 'nest-lock-sockets-'));
    masters = await IndependentMasters.start(3, { socketDir });
    app = await bootRedlock(masters.urls, { quarantine: TTL }, TTL);
    // Fresh masters are young too: the first lock waits out the quarantine from the module's start.
    timings.firstLockAfterStart3 = await untilLockable(app);
  });
  afterAll(async () => {
    await app?.module.close();
    await masters?.stop();
    await rm(socketDir, { recursive: true, force: true });
  });

  it('counts one server once however it is listed: its unix socket beside its TCP port is no second master', async () => {
    // Nodes 0 and 1 are one server: with the real second master frozen, no quorum of servers is left.
    const aliased = await bootRedlock([masters.urls[0], { path: masters.socketOf(0) }, masters.urls[1]], {}, TTL);
    try {
      await untilLockable(aliased);
      masters.pause(1);
      try {
        const refused = await aliased.locks.lock('aliased', { timeout: 500 }).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(LockError);
        expect(['LOCK_TIMEOUT', 'BACKEND_UNAVAILABLE']).toContain((refused as LockError).code);
        expect(await aliased.locks.isLocked('aliased').catch(() => false)).toBe(false);
      } finally {
        masters.resume(1);
      }
      const lock = await aliased.locks.lock('aliased', { timeout: 2_000 });
      expect(await lock.unlock()).toBe(true);
    } finally {
      await aliased.module.close();
    }
  });

  it('says why a lock is refused while the masters are in quarantine, not "held by another owner"', async () => {
    const fresh = await IndependentMasters.start(3);
    const young = await bootRedlock(fresh.urls, { quarantine: TTL }, TTL);
    try {
      const error = await young.locks.lock('young', { timeout: 300 }).catch((failure: unknown) => failure);
      expect(error).toBeInstanceOf(LockTimeoutError);
      expect((error as Error).message).toMatch(
        /only 0 of the 3 Redlock masters may grant it \(quorum 2\); 3 restarted or were seen for the first time less than redlock.quarantine \(2000 ms\) ago/,
      );
      expect(await young.locks.inspect('young')).toMatchObject({ held: false });
    } finally {
      await young.module.close();
      await fresh.stop();
    }
  });

  it('locks, unlocks and expires, with fences that go up and a validity within ttl − drift', async () => {
    const first = await app.locks.lock('basic', { ttl: 1_000 });
    const firstFence = await first.fence();
    expect(firstFence).toBeGreaterThan(0);
    expect(first.validity).toBeGreaterThan(0);
    expect(first.validity).toBeLessThanOrEqual(1_000 - (1_000 * 0.01 + 2));
    expect(await app.locks.tryLock('basic')).toBeNull();
    expect(await app.locks.isLocked('basic')).toBe(true);
    const inspected = await app.locks.inspect('basic');
    expect(inspected.held).toBe(true);
    expect(inspected.ttl).toBeGreaterThan(0);
    expect(inspected.ttl).toBeLessThanOrEqual(1_000);
    expect(inspected.fence).toBe(firstFence);
    // Every node holds it; every node's fence counter expires (an hour after its last fence).
    for (const url of masters.urls) {
      const node = new Redis(url);
      expect(await node.get('lock:{basic}')).toBe(first.token);
      expect(await node.pttl('lock:{basic}:fence')).toBeGreaterThan(3_500_000);
      expect(await node.pttl('lock:{basic}:fence')).toBeLessThanOrEqual(3_600_000);
      node.disconnect();
    }
    expect(await first.expire(1_500)).toBe(true);
    expect(first.validity).toBeGreaterThan(1_000);
    expect(await first.unlock()).toBe(true);
    expect(await first.unlock()).toBe(false);
    expect(await app.locks.isLocked('basic')).toBe(false);

    const second = await app.locks.lock('basic', { ttl: 300 });
    const secondFence = await second.fence();
    expect(secondFence).toBeGreaterThan(firstFence);
    // Not released: it runs out, and another owner gets it after that.
    const waitedFrom = Date.now();
    const third = await app.locks.lock('basic', { timeout: 2_000 });
    expect(Date.now() - waitedFrom).toBeGreaterThanOrEqual(200);
    expect(await third.fence()).toBeGreaterThan(secondFence);
    expect(await second.unlock()).toBe(false);
    expect(await app.locks.forceUnlock('basic')).toBe(true);
    expect(await third.unlock()).toBe(false);
  });

  it('follows driftFactor in the validity, and refuses a ttl above the quarantine and semaphores at call time', async () => {
    const drifting = await bootRedlock(masters.urls, { quarantine: TTL, driftFactor: 0.2 }, TTL);
    try {
      const lock = await drifting.locks.lock('drift', { ttl: 1_000 });
      expect(lock.validity).toBeLessThanOrEqual(1_000 - (1_000 * 0.2 + 2));
      expect(lock.validity).toBeGreaterThan(600);
      await lock.unlock();
      await expect(drifting.locks.lock('drift', { ttl: TTL + 1 })).rejects.toThrow(InvalidArgumentError);
      await expect(drifting.locks.lock('drift', { ttl: TTL + 1 })).rejects.toThrow(/redlock.quarantine/);
      await expect(drifting.locks.lock('drift', { ttl: 19 })).rejects.toThrow(/must be at least 20 ms/);
      await expect(drifting.semaphores.acquire('pool', 2)).rejects.toThrow(/semaphores need one Redis/);
      await expect(drifting.semaphores.count('pool')).rejects.toThrow(InvalidArgumentError);
      // Read locks too (a quorum holds one owner's token per key); write locks work as before.
      const readError = await drifting.locks.lock('drift', { mode: 'read' }).catch((error: unknown) => error);
      expect(readError).toBeInstanceOf(InvalidArgumentError);
      expect(readError).toMatchObject({
        argument: 'mode',
        message: expect.stringMatching(/read locks need one Redis/),
      });
      const writer = await drifting.locks.lock('drift', { mode: 'write', ttl: 1_000 });
      expect(await writer.unlock()).toBe(true);
      // Several keys: each a Redlock lock of its own, taken in the one global order.
      const both = await drifting.locks.lock(['drift:b', 'drift:a'], { ttl: 1_000 });
      expect([...both.keys].sort()).toEqual(['drift:a', 'drift:b']);
      expect(await drifting.locks.isLocked('drift:a')).toBe(true);
      expect(await both.unlock()).toBe(true);
    } finally {
      await drifting.module.close();
    }
  });

  it('keeps working with one master killed', async () => {
    await masters.kill(2);
    try {
      const lock = await app.locks.lock('one-down', { ttl: 1_000, timeout: 1_000 });
      const fence = await lock.fence();
      expect(fence).toBeGreaterThan(0);
      expect(await app.locks.tryLock('one-down')).toBeNull();
      expect(await lock.expire()).toBe(true);
      expect(await lock.unlock()).toBe(true);
      const again = await app.locks.lock('one-down', { ttl: 1_000, timeout: 1_000 });
      expect(await again.fence()).toBeGreaterThan(fence);
      expect(await again.unlock()).toBe(true);
    } finally {
      await masters.restart(2);
    }
  });

  it('fails cleanly within the timeout with two masters killed, and never hangs', async () => {
    await masters.kill(0);
    await masters.kill(1);
    try {
      const start = Date.now();
      const failure = await app.locks.lock('two-down', { ttl: 1_000, timeout: 800 }).catch((error: unknown) => error);
      const took = Date.now() - start;
      timings.twoDownFailureMs = took;
      // The last attempt could not reach a quorum: the library's rule is the backend error, not a timeout.
      expect(failure).toBeInstanceOf(LockBackendError);
      expect((failure as LockBackendError).code).toBe('BACKEND_UNAVAILABLE');
      expect((failure as Error).message).toMatch(/Only 1 of 3 Redlock nodes answered \(quorum 2\)/);
      expect(took).toBeLessThan(800 + 3 * COMMAND_TIMEOUT + 300);
      expect(await app.locks.tryLock('two-down').catch((error: unknown) => error)).toBeInstanceOf(LockBackendError);
    } finally {
      await masters.restart(0);
      await masters.restart(1);
    }
    // Back (empty, so young): locks come back once the quarantine is over.
    timings.lockableAfterTwoRestarts = await untilLockable(app);
  });

  it('keeps a master that restarted empty from letting a second owner in while the first owner is valid', async () => {
    await untilLockable(app);
    const other = await bootRedlock(masters.urls, { quarantine: TTL }, TTL);
    // The control: the same client without the quarantine lets the second owner in, and the checker sees it.
    const careless = await bootRedlock(masters.urls, { quarantine: 0 }, TTL);
    try {
      // A holds the lock on nodes 0 and 1 only: node 2 is down when A takes it, and comes back empty.
      await masters.kill(2);
      const requestedA = Date.now();
      const a = await app.locks.lock('restarted', { ttl: TTL });
      const acquiredA = Date.now();
      const fenceA = await a.fence();
      await masters.restart(2);
      // Node 1 crashes and comes back empty: of A's two nodes only node 0 remembers A.
      await masters.kill(1);
      await masters.restart(1);
      const validUntilA = Date.now() + a.validity;
      expect(a.validity).toBeGreaterThan(500);

      // Nodes 1 and 2 would grant the lock (a quorum), but they are young: no second owner while A is valid.
      await expectNoSecondOwner('restarted', holdOf(a, 1, requestedA, acquiredA), validUntilA, other, careless);

      // After A's validity (and the quarantine of the restarted nodes), the second client gets it.
      const b = await other.locks.lock('restarted', { timeout: 5_000 });
      timings.secondOwnerAfterValidityMs = Date.now() - validUntilA;
      expect(Date.now()).toBeGreaterThanOrEqual(validUntilA);
      expect(await b.fence()).toBeGreaterThan(fenceA);
      expect(checkMutualExclusion([holdOf(a, 1, requestedA, acquiredA), holdOf(b, 2, Date.now(), Date.now())])).toEqual(
        [],
      );
      await b.unlock();
    } finally {
      await other.module.close();
      await careless.module.close();
    }
  });
});

describe('Redlock over 3 masters that persist RDB snapshots', () => {
  const TTL = 2_000;
  let snapshotDir: string;
  let masters: IndependentMasters;
  let app: LockApp;

  beforeAll(async () => {
    snapshotDir = await mkdtemp(join(tmpdir(), 'nest-lock-rdb-'));
    masters = await IndependentMasters.start(3, { snapshotDir });
    app = await bootRedlock(masters.urls, { quarantine: TTL }, TTL);
    await untilLockable(app);
  });
  afterAll(async () => {
    await app?.module.close();
    await masters?.stop();
    await rm(snapshotDir, { recursive: true, force: true });
  });

  it('keeps masters restored from snapshots older than a lease from letting a second owner in while it is valid', async () => {
    const other = await bootRedlock(masters.urls, { quarantine: TTL }, TTL);
    const careless = await bootRedlock(masters.urls, { quarantine: 0 }, TTL);
    try {
      // Snapshots of masters 0 and 1 from before the lease: they hold every node's birth marker, not A's lease.
      await masters.snapshot(0);
      await masters.snapshot(1);
      const requestedA = Date.now();
      const a = await app.locks.lock('restored', { ttl: TTL });
      const acquiredA = Date.now();
      const fenceA = await a.fence();
      // Both crash and come back from those snapshots: a majority that has forgotten A.
      await masters.kill(0);
      await masters.kill(1);
      await masters.restart(0);
      await masters.restart(1);
      const validUntilA = Date.now() + a.validity;
      expect(a.validity).toBeGreaterThan(500);
      const restored = new Redis(masters.urls[0]);
      try {
        expect(await restored.get('lock:redlock:born')).not.toBeNull();
        expect(await restored.get('lock:{restored}')).toBeNull();
      } finally {
        restored.disconnect();
      }

      await expectNoSecondOwner('restored', holdOf(a, 1, requestedA, acquiredA), validUntilA, other, careless);

      const b = await other.locks.lock('restored', { timeout: 5_000 });
      expect(Date.now()).toBeGreaterThanOrEqual(validUntilA);
      expect(await b.fence()).toBeGreaterThan(fenceA);
      await b.unlock();
    } finally {
      await other.module.close();
      await careless.module.close();
    }
  });
});

interface WorkerSummary {
  pid: number;
  holds: number;
  errors: Record<string, number>;
  unexpected: string[];
  unhandledRejections: number;
  /** Draws of a fence that failed (the hold went without one), by code. */
  fenceErrors: Record<string, number>;
}

describe('Redlock over 5 independent masters: mutual exclusion under kills and empty restarts', () => {
  const TTL = 1_500;
  const PROCESSES = 3;
  const LOOPS = 3;
  const FAULT_PHASE_MS = 15_000;
  let masters: IndependentMasters;
  let resourceServer: RedisServer;
  let resource: Redis;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    masters = await IndependentMasters.start(5);
    resourceServer = await RedisServer.start();
    resource = new Redis(resourceServer.url);
  });
  afterAll(async () => {
    await Promise.all(children.map((child) => killWorker(child)));
    resource?.disconnect();
    await resourceServer?.stop();
    await masters?.stop();
  });

  it('never grants a lock twice at once, keeps fences in order and writes every unit once (history checker)', async () => {
    const run = 'rl5';
    const keys = ['a', 'b'].map((key) => `${run}:${key}`);
    const slowKey = `${run}:slow`;
    const seeded: string[] = [];
    for (const key of [...keys, slowKey]) {
      const units = Array.from({ length: 3_000 }, (_, i) => `${key}#${i}`);
      seeded.push(...units);
      await resource.rpush(`${run}:queue:${key}`, ...units);
    }
    const config = {
      mode: 'lock',
      run,
      redlockUrls: masters.urls,
      quarantine: TTL,
      resourceUrl: resourceServer.url,
      keys,
      slowKey,
      loops: LOOPS,
      ttl: TTL,
      timeout: 4_000,
      maxStep: 25,
      commandTimeout: COMMAND_TIMEOUT,
      sectionMs: 2,
      slowSectionMs: TTL * 1.5,
    };
    const exits: Promise<unknown[]>[] = [];
    for (let i = 0; i < PROCESSES; i++) {
      const { child } = await startWorker('fault-worker', [JSON.stringify(config)]);
      children.push(child);
      exits.push(once(child, 'exit'));
    }

    // Up to two masters down at a time, each killed one coming back EMPTY on its port.
    const down = new Set<number>();
    let kills = 0;
    let restarts = 0;
    const faultsUntil = Date.now() + FAULT_PHASE_MS;
    while (Date.now() < faultsUntil) {
      await delay(300 + Math.random() * 600);
      const up = [0, 1, 2, 3, 4].filter((i) => !down.has(i));
      if (down.size < 2 && (down.size === 0 || Math.random() < 0.6)) {
        const victim = up[Math.floor(Math.random() * up.length)];
        await masters.kill(victim);
        down.add(victim);
        kills++;
      } else {
        const back = [...down][Math.floor(Math.random() * down.size)];
        await masters.restart(back);
        down.delete(back);
        restarts++;
      }
    }
    for (const i of down) await masters.restart(i);
    restarts += down.size;
    // A while with every master back (out of quarantine), so that the run ends with locks granted again.
    await delay(TTL * 2);
    const holdsBeforeStop = await resource.llen(`${run}:holds`);

    await resource.set(`${run}:stop`, '1');
    const codes = await Promise.all(
      exits.map((exit) => Promise.race([exit, delay(30_000, ['timeout'], { ref: false })])),
    );
    const parse = <T>(lines: string[]) => lines.map((line) => JSON.parse(line) as T);
    const holds = parse<HoldRecord>(await resource.lrange(`${run}:holds`, 0, -1));
    const work = parse<FencedWorkRecord>(await resource.lrange(`${run}:work`, 0, -1));
    const applied = parse<AppliedWrite>(await resource.lrange(`${run}:applied`, 0, -1));
    const pending: string[] = [];
    for (const key of [...keys, slowKey]) pending.push(...(await resource.lrange(`${run}:queue:${key}`, 0, -1)));
    const pendingSet = new Set(pending);
    const summaries = Object.values(await resource.hgetall(`${run}:summaries`)).map(
      (json) => JSON.parse(json) as WorkerSummary,
    );

    const overlaps = checkMutualExclusion(holds);
    const fenceOrder = checkFenceOrder(holds);
    const fencedWork = checkFencedWork(work, {
      units: seeded.filter((unit) => !pendingSet.has(unit)),
      pending,
      resourceLog: applied,
    });
    Object.assign(timings, {
      fiveMasters: `${holds.length} holds by ${new Set(holds.map((hold) => hold.pid)).size} processes, ${kills} kills, ${restarts} empty restarts, ${applied.length} fenced writes`,
      fiveMastersUnfencedHolds: holds.filter((hold) => hold.fence === undefined).length,
      fiveMastersFenceDrawsFailed: JSON.stringify(summaries.map((summary) => summary.fenceErrors)),
    });
    expect(overlaps.map((violation) => violation.message)).toEqual([]);
    expect(fenceOrder.map((violation) => violation.message)).toEqual([]);
    expect(fencedWork.map((violation) => violation.message)).toEqual([]);
    expect(kills).toBeGreaterThanOrEqual(5);
    expect(holds.length).toBeGreaterThanOrEqual(300);
    // The fence checks judged most holds: a draw fails only when the lease was lost or no quorum answered.
    expect(holds.filter((hold) => hold.fence !== undefined).length).toBeGreaterThan(holds.length / 2);
    expect(holdsBeforeStop).toBeGreaterThan(0);
    expect(new Set(holds.map((hold) => hold.pid)).size).toBe(PROCESSES);
    expect(applied.length).toBeGreaterThan(100);
    expect(codes.map(([code]) => code)).toEqual(Array.from({ length: PROCESSES }, () => 0));
    expect(summaries).toHaveLength(PROCESSES);
    expect(summaries.flatMap((summary) => summary.unexpected)).toEqual([]);
    expect(summaries.reduce((sum, summary) => sum + summary.unhandledRejections, 0)).toBe(0);
  });

  it('control: the same checker finds overlaps when workers release by a raw DEL on every master', async () => {
    const run = 'rl5-broken';
    const config = {
      mode: 'broken',
      run,
      redlockUrls: masters.urls,
      quarantine: TTL,
      resourceUrl: resourceServer.url,
      keys: [`${run}:k`],
      loops: LOOPS,
      ttl: 300,
      timeout: 4_000,
      maxStep: 25,
      commandTimeout: COMMAND_TIMEOUT,
      sectionMs: 5,
      longEvery: 3,
    };
    const exits: Promise<unknown[]>[] = [];
    for (let i = 0; i < PROCESSES; i++) {
      const { child } = await startWorker('fault-worker', [JSON.stringify(config)]);
      children.push(child);
      exits.push(once(child, 'exit'));
    }
    await delay(4_000);
    await resource.set(`${run}:stop`, '1');
    await Promise.all(exits.map((exit) => Promise.race([exit, delay(30_000, ['timeout'], { ref: false })])));
    const holds = (await resource.lrange(`${run}:holds`, 0, -1)).map((line) => JSON.parse(line) as HoldRecord);

    const overlaps = checkMutualExclusion(holds);
    timings.brokenControl = `${holds.length} holds, ${overlaps.length} overlaps`;
    expect(holds.length).toBeGreaterThan(20);
    expect(overlaps.length).toBeGreaterThan(0);
    expect(overlaps[0].check).toBe('overlap');
  });
});
