import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Redis } from 'ioredis';
import { LockBackendError, LockLostError } from 'nest-lock';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, type LockApp, STORE_KINDS, uniqueKey, useLockApp } from './support/lock-app.js';
import { lockKeyOf, pttlOnceGone, semaphoreKeyOf } from './support/redis-keys.js';
import { RedisServer, useRedisClient, useRedisServer } from './support/redis-server.js';
import { eventually } from './support/timing.js';
import { runWorkers } from './support/workers.js';
import { lockKind, LockStore, type RedisStore, semaphoreKind } from './support/kinds.js';

const PROCESSES = 4;
const ACQUISITIONS = 1_000;

function expectStrictlyIncreasing(fences: number[]): void {
  expect(fences.filter((fence) => !Number.isSafeInteger(fence) || fence < 1)).toEqual([]);
  const decreases = fences.flatMap((fence, i) => (i > 0 && fence <= fences[i - 1] ? [[fences[i - 1], fence]] : []));
  expect(decreases).toEqual([]);
}

/** Commands the server ran but INFO itself (INFO commandstats): every round trip of the library shows here. */
async function commandsRun(redis: Redis): Promise<number> {
  const stats = await redis.info('commandstats');
  let calls = 0;
  for (const [, command, count] of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (command !== 'info') calls += Number(count);
  }
  return calls;
}

/**
 * Fencing tokens (issue 7, section 2.3): `Lock.fence()` and `Permit.fence()` increase strictly with every
 * holder of a key, by any owner in any process, and outlive the lease itself. A fence is drawn when its
 * holder first asks, while it holds the lease — at any moment of its hold.
 */
describe('fencing tokens', () => {
  describe('across processes', () => {
    const server = useRedisServer();
    const redis = useRedisClient(server);

    it(`gives ${ACQUISITIONS.toLocaleString('en')} acquisitions of one key across ${PROCESSES} processes strictly increasing fences, in the order the server granted them`, async () => {
      const key = 'fenced';
      // Each holder RPUSHes its fence while it holds the lock: the list is in the server's grant order.
      const listKey = 'fences-in-grant-order';
      const reports = await runWorkers<{ fences: number[] }>('fault-worker', PROCESSES, [
        JSON.stringify({
          mode: 'fence',
          lockUrl: server().url,
          key,
          listKey,
          count: ACQUISITIONS / PROCESSES,
          loops: 4,
        }),
      ]);

      const inGrantOrder = (await redis().lrange(listKey, 0, -1)).map(Number);
      expect(inGrantOrder).toHaveLength(ACQUISITIONS);
      expectStrictlyIncreasing(inGrantOrder);
      const reported = reports.flatMap((report) => report.fences);
      expect(reported.sort((a, b) => a - b)).toEqual(inGrantOrder);
    }, 60_000);
  });

  describe.each(STORE_KINDS)('on the %s store', (kind) => {
    const app = useLockApp(kind);

    it('increases with every holder of a key, whoever takes it and however', async () => {
      const key = uniqueKey('fence');
      const fences: number[] = [];
      for (let i = 0; i < 5; i++) {
        const lock = await app().locks.lock(key, { token: `owner-${i % 2}` });
        fences.push(await lock.fence());
        await lock.unlock();
        const tried = await app().locks.tryLock(key);
        fences.push(await tried!.fence());
        await tried!.unlock();
        fences.push(await app().locks.withLock(key, (held) => held.fence()));
      }

      expectStrictlyIncreasing(fences);
    });

    it('survives the expiry of the lock key: take, let it expire, take again gives a higher fence', async () => {
      const key = uniqueKey('fence-expiry');
      const first = await app().locks.lock(key, { ttl: 50 });
      const firstFence = await first.fence();
      await delay(150);
      expect(await app().locks.isLocked(key)).toBe(false);

      const second = await app().locks.lock(key, { ttl: 50 });

      expect(await second.fence()).toBeGreaterThan(firstFence);
      expect(await first.unlock()).toBe(false);
      expect(await second.unlock()).toBe(true);
    });

    it('is the same for every holder of a re-entrant withLock chain, and grows for the next chain', async () => {
      const key = uniqueKey('fence-reentrant');
      const [outer, inner] = await app().locks.withLock(key, async (lock) => [
        await lock.fence(),
        await app().locks.withLock(key, (nested) => nested.fence()),
      ]);
      const next = await app().locks.withLock(key, (lock) => lock.fence());

      expect(inner).toBe(outer);
      expect(next).toBeGreaterThan(outer);
    });

    it('increases for the permits of a semaphore, also across its expiry', async () => {
      const name = uniqueKey('fence-semaphore');
      const held = [];
      const fences: number[] = [];
      for (const options of [{}, {}, { ttl: 50 }]) {
        const permit = await app().semaphores.acquire(name, 3, options);
        held.push(permit);
        fences.push(await permit.fence());
      }
      await Promise.all(held.slice(0, 2).map((permit) => permit.release()));
      await delay(150);
      const later = await app().semaphores.acquire(name, 1);
      fences.push(await later.fence());

      expectStrictlyIncreasing(fences);
      await later.release();
    });

    it('draws a fence once: a second fence() gives the same number without a round trip to the store', async () => {
      const store = app().module.get<LockStore>(LockStore);
      const draws = jest.spyOn(store, 'fence');
      const redis = kind === 'redis' ? new Redis(app().server!.url) : undefined;
      const commands = async () => (redis ? commandsRun(redis) : 0);
      try {
        const lock = await app().locks.lock(uniqueKey('fence-once'));
        const permit = await app().semaphores.acquire(uniqueKey('fence-once-permits'), 2);
        expect(draws).not.toHaveBeenCalled(); // nothing drawn by the acquisitions

        for (const lease of [lock, permit]) {
          draws.mockClear();
          const before = await commands();
          const first = await lease.fence();
          const afterFirst = await commands();
          const second = await lease.fence();
          const afterSecond = await commands();

          expect(first).toBeGreaterThan(0);
          expect(second).toBe(first);
          expect(draws).toHaveBeenCalledTimes(1);
          if (redis) {
            expect(afterFirst - before).toBeGreaterThan(0); // the first is a round trip, seen here
            expect(afterSecond - afterFirst).toBe(0);
          }
        }
        await Promise.all([lock.unlock(), permit.release()]);
      } finally {
        draws.mockRestore();
        redis?.disconnect();
      }
    });

    it('shares one draw between fence() calls made at once on one lease', async () => {
      const store = app().module.get<LockStore>(LockStore);
      const draws = jest.spyOn(store, 'fence');
      try {
        const lock = await app().locks.lock(uniqueKey('fence-at-once'));
        const permit = await app().semaphores.acquire(uniqueKey('fence-at-once-permits'), 2);

        const lockFences = await Promise.all([lock.fence(), lock.fence(), lock.fence()]);
        const permitFences = await Promise.all([permit.fence(), permit.fence()]);

        expect(new Set(lockFences).size).toBe(1);
        expect(new Set(permitFences).size).toBe(1);
        expect(lockFences[0]).toBeGreaterThan(0);
        expect(permitFences[0]).toBeGreaterThan(0);
        expect(draws).toHaveBeenCalledTimes(2);
        await Promise.all([lock.unlock(), permit.release()]);
      } finally {
        draws.mockRestore();
      }
    });

    it('rejects fence() on a lease its holder released (LOCK_LOST, released), without aborting its signal', async () => {
      const lock = await app().locks.lock(uniqueKey('fence-released'));
      const permit = await app().semaphores.acquire(uniqueKey('fence-released-permits'), 1);
      expect(await lock.unlock()).toBe(true);
      expect(await permit.release()).toBe(true);

      for (const lease of [lock, permit]) {
        const error = await lease.fence().catch((failure: unknown) => failure);
        expect(error).toBeInstanceOf(LockLostError);
        expect(error).toMatchObject({ code: 'LOCK_LOST', reason: 'released', token: lease.token });
        expect((error as LockLostError).fence).toBeUndefined();
        expect((error as Error).message).not.toMatch(/\(fence/);
        expect(lease.signal.aborted).toBe(false);
      }
    });

    // Found by the outside review: a fence drawn once was returned from the cache after the release,
    // or after the lease was known lost — a caller asking "is it still mine?" heard yes.
    it('rejects fence() once its lease is released or known lost, even after a fence was drawn', async () => {
      const released = await app().locks.lock(uniqueKey('fenced-then-released'));
      const fence = await released.fence();
      expect(await released.unlock()).toBe(true);
      const afterRelease = await released.fence().catch((failure: unknown) => failure);
      expect(afterRelease).toMatchObject({ code: 'LOCK_LOST', reason: 'released', fence });

      const key = uniqueKey('fenced-then-forced');
      const forced = await app().locks.lock(key);
      await forced.fence();
      expect(await app().locks.forceUnlock(key)).toBe(true);
      const afterForce = await forced.fence().catch((failure: unknown) => failure);
      expect(afterForce).toBeInstanceOf(LockLostError);
      expect(afterForce).toMatchObject({ reason: 'taken' });
      expect(forced.signal.reason).toBe(afterForce);
    });

    it('rejects fence() on a lock found gone or taken by another owner (LOCK_LOST, taken), and aborts its signal', async () => {
      // Behind the holder's back, straight in the store (as another process would, or a restart):
      // this process's lock service would tell the holder at once.
      const store = app().module.get<LockStore>(LockStore);
      const key = uniqueKey('fence-taken');
      // Freed, then taken by another owner.
      const taken = await app().locks.lock(key, { ttl: 10_000 });
      expect(await store.release(lockKind, key, taken.token)).toBe(true);
      const asIntruder = { fair: false, liveness: 0, inLine: false };
      expect((await store.acquire(lockKind, key, undefined, 'intruder', 10_000, asIntruder)).granted).toBe(true);
      // Freed, and nobody holds it.
      const goneKey = uniqueKey('fence-gone');
      const gone = await app().locks.lock(goneKey, { ttl: 10_000 });
      expect(await store.release(lockKind, goneKey, gone.token)).toBe(true);

      for (const [lock, lockKey] of [
        [taken, key],
        [gone, goneKey],
      ] as const) {
        expect(lock.signal.aborted).toBe(false);
        const error = await lock.fence().catch((failure: unknown) => failure);
        expect(error).toBeInstanceOf(LockLostError);
        expect(error).toMatchObject({ code: 'LOCK_LOST', reason: 'taken', key: lockKey, token: lock.token });
        expect((error as LockLostError).fence).toBeUndefined();
        expect(lock.signal.aborted).toBe(true);
        expect(lock.signal.reason).toBe(error);
        expect(lock.validity).toBe(0);
      }
      // The intruder keeps the lock, and may draw its fence.
      expect(await taken.unlock()).toBe(false);
      expect(await store.fence(lockKind, key, 'intruder')).toBeGreaterThan(0);
      expect(await store.release(lockKind, key, 'intruder')).toBe(true);
    });

    it('keeps fences in hold order when they are drawn late in a hold: a later holder that draws at once is above', async () => {
      const key = uniqueKey('fence-late');
      const fences: number[] = [];
      // A holds, and draws its fence only after a while; B takes the lock after A, and draws at once.
      const a = await app().locks.lock(key, { token: 'A' });
      await delay(100);
      fences.push(await a.fence());
      await a.unlock();
      const b = await app().locks.lock(key, { token: 'B' });
      fences.push(await b.fence());
      // C, waiting for the lock meanwhile, is handed it by B's release, and asks late in its hold.
      const c = app().locks.lock(key, { token: 'C', timeout: 5_000 });
      await delay(50);
      await b.unlock();
      const cLock = await c;
      await delay(100);
      fences.push(await cLock.fence());
      // D, waiting meanwhile too, is handed it by C's release, and asks at once.
      const d = app().locks.lock(key, { token: 'D', timeout: 5_000 });
      await delay(50);
      await cLock.unlock();
      const dLock = await d;
      fences.push(await dLock.fence());
      await dLock.unlock();

      expectStrictlyIncreasing(fences);
    });
  });

  describe('on Redis, when the counter itself is gone', () => {
    const app = useLockApp('redis');
    /** Reconnects soon after the restart below. */
    const redis = useRedisClient(() => app().server!, { retryStrategy: () => 50 });

    it('keeps the counter long after the lock key expired, with an expiry of its own (an hour by default)', async () => {
      const key = uniqueKey('fence-counter');
      const [lockKey, counter] = app().module.get<typeof LockStore, RedisStore>(LockStore).keysOf(lockKind, key);
      const lock = await app().locks.lock(key, { ttl: 50 });
      expect(await lock.fence()).toBeGreaterThan(0);
      await delay(150);

      expect(await redis().exists(lockKey)).toBe(0);
      const counterTtl = await redis().pttl(counter);
      expect(counterTtl).toBeGreaterThan(3_500_000);
      expect(counterTtl).toBeLessThanOrEqual(3_600_000);
    });

    it('lets the counters expire after fenceCounterTtl, and fences keep increasing from the server clock', async () => {
      const shortLived = await bootLockModule({
        redis: app().server!.url,
        keyPrefix: 'short:',
        fenceCounterTtl: 1_000,
      });
      try {
        const key = uniqueKey('fence-expiring');
        const name = uniqueKey('fence-expiring-permits');
        const store = shortLived.module.get<typeof LockStore, RedisStore>(LockStore);
        const lock = await shortLived.locks.lock(key);
        const lockFence = await lock.fence();
        await lock.unlock();
        const permit = await shortLived.semaphores.acquire(name, 1);
        const permitFence = await permit.fence();
        await permit.release();
        const counters = [store.keysOf(lockKind, key)[1], store.keysOf(semaphoreKind, name)[1]];
        expect(await Promise.all(counters.map((counter) => redis().pttl(counter)))).toEqual([
          expect.any(Number),
          expect.any(Number),
        ]);
        for (const counter of counters) expect(await redis().pttl(counter)).toBeGreaterThan(0);

        await delay(1_200);
        expect(await redis().exists(...counters)).toBe(0);
        const later = await shortLived.locks.lock(key);
        const laterPermit = await shortLived.semaphores.acquire(name, 1);
        expect(await later.fence()).toBeGreaterThan(lockFence);
        expect(await laterPermit.fence()).toBeGreaterThan(permitFence);
        await Promise.all([later.unlock(), laterPermit.release()]);
      } finally {
        await closeLockApp(shortLived);
      }
    });

    it('keeps increasing after FLUSHALL and after a restart without persistence (seeded from the server clock)', async () => {
      const key = uniqueKey('fence-wiped');
      const fences: number[] = [];
      const take = async () => {
        const lock = await app().locks.lock(key, { timeout: 5_000 });
        fences.push(await lock.fence());
        await lock.unlock();
      };
      await take();
      await take();
      await redis().flushall();
      await take();
      await app().server!.restart();
      await take();
      await take();

      expectStrictlyIncreasing(fences);
    });

    // (A lease handed over by a release to a waiter of another process comes with a fence: that
    // release draws one, which the waiter needs to tell a fresh handover from a stale one.)
    it('writes no fence counter for a lease that is never fenced; the first fence drawn writes it', async () => {
      const store = app().module.get<typeof LockStore, RedisStore>(LockStore);
      const key = uniqueKey('never-fenced');
      const name = uniqueKey('never-fenced-permits');
      const lockCounter = `${lockKeyOf(key)}:fence`;
      const permitCounter = `${semaphoreKeyOf(name)}:fence`;
      expect(store.keysOf(lockKind, key)[1]).toBe(lockCounter);
      expect(store.keysOf(semaphoreKind, name)[1]).toBe(permitCounter);

      await (await app().locks.lock(key)).unlock();
      await (await app().locks.tryLock(key))!.unlock();
      await app().locks.withLock(key, () => undefined);
      await (await app().semaphores.acquire(name, 2)).release();
      await app().semaphores.withPermit(name, 2, () => undefined);
      // Passed from holder to waiter within the process, in the release itself: no fence either.
      const holder = await app().locks.lock(key);
      const waiters = [1, 2, 3].map(() => app().locks.withLock(key, () => undefined, { timeout: 5_000 }));
      const full = [await app().semaphores.acquire(name, 1)];
      const permitWaiter = app().semaphores.withPermit(name, 1, () => undefined, { timeout: 5_000 });
      await delay(100);
      await Promise.all([holder.unlock(), full[0].release()]);
      await Promise.all([...waiters, permitWaiter]);

      expect(await redis().exists(lockKeyOf(key), semaphoreKeyOf(name))).toBe(0);
      expect(await redis().exists(lockCounter, permitCounter)).toBe(0);

      const lock = await app().locks.lock(key);
      const permit = await app().semaphores.acquire(name, 2);
      const fences = [await lock.fence(), await permit.fence()];
      await Promise.all([lock.unlock(), permit.release()]);
      expect((await redis().mget(lockCounter, permitCounter)).map(Number)).toEqual(fences);
    });
  });
});

/*
 * Found by an outside review: fences when the counter holds something the library did not write, when
 * Redis comes back older, and when a new memory store starts. Each case failed before its fix.
 */

describe('a fence counter that holds no integer never leaves a lease held by nobody', () => {
  const app = useLockApp('redis');
  /** A plain client beside the library, to spoil its fence counters. */
  const redis = useRedisClient(() => app().server!);

  /** A fence is drawn over a counter holding a string that is no number (from the server clock, as
   * over a lost counter); a counter of another type fails the draw. */
  const corruptions: [string, 'a fence from the clock' | 'BACKEND_ERROR', (counter: string) => Promise<unknown>][] = [
    ['a string that is not a number', 'a fence from the clock', (counter) => redis().set(counter, 'not-a-number')],
    ['a hash', 'BACKEND_ERROR', (counter) => redis().hset(counter, 'a', '1')],
  ];

  /**
   * What `fence()` of a held lease came to with the counter spoilt: a fence from the server clock,
   * written over the counter, or a `LockBackendError` BACKEND_ERROR again on a second call (nothing
   * kept of a failed draw: the next call tries again).
   */
  async function expectDraw(
    lease: { fence(): Promise<number> },
    counter: string,
    expected: (typeof corruptions)[number][1],
  ): Promise<void> {
    const clockFloor = Date.now() * 1_000 - 1e9;
    const outcome = await lease.fence().catch((failure: unknown) => failure);
    if (expected === 'BACKEND_ERROR') {
      expect(outcome).toBeInstanceOf(LockBackendError);
      expect(outcome).toMatchObject({ code: 'BACKEND_ERROR' });
      await expect(lease.fence()).rejects.toMatchObject({ code: 'BACKEND_ERROR' });
    } else {
      expect(outcome).toBeGreaterThan(clockFloor);
      expect(Number(await redis().get(counter))).toBe(outcome);
    }
  }

  // No fence is drawn by the acquisition: the lease is granted whatever the counter holds, and stays
  // its holder's, whatever its fence() came to, until it is given back.
  it.each(corruptions)('lock(), with %s at the fence counter: fence() gives %s', async (_, expected, corrupt) => {
    const key = uniqueKey('fenced');
    const counter = `${lockKeyOf(key)}:fence`;
    await corrupt(counter);
    const lock = await app().locks.lock(key, { ttl: 10_000, timeout: 1_000 });

    await expectDraw(lock, counter, expected);

    expect(lock.validity).toBeGreaterThan(0);
    expect(lock.signal.aborted).toBe(false);
    expect(await redis().get(lockKeyOf(key))).toBe(lock.token);
    expect(await lock.unlock()).toBe(true);
    expect(await pttlOnceGone(redis(), lockKeyOf(key), 1_000)).toBe(-2);

    // Once the counter holds an integer again (or nothing), a holder draws a fence.
    await redis().del(counter);
    const next = await app().locks.lock(key, { timeout: 1_000 });
    expect(await next.fence()).toBeGreaterThan(0);
    expect(await next.unlock()).toBe(true);
  });

  it.each(corruptions)('acquire(), with %s at the fence counter: fence() gives %s', async (_, expected, corrupt) => {
    const name = uniqueKey('fenced-semaphore');
    const counter = `${semaphoreKeyOf(name)}:fence`;
    await corrupt(counter);
    const permit = await app().semaphores.acquire(name, 1, { ttl: 10_000, timeout: 1_000 });

    await expectDraw(permit, counter, expected);

    expect(permit.validity).toBeGreaterThan(0);
    expect(permit.signal.aborted).toBe(false);
    expect(await app().semaphores.count(name)).toBe(1);
    expect(await permit.release()).toBe(true);
    expect(
      await eventually(
        () => app().semaphores.count(name),
        (count) => count === 0,
        1_000,
      ),
    ).toBe(0);

    await redis().del(counter);
    const next = await app().semaphores.acquire(name, 1, { timeout: 1_000 });
    expect(await next.fence()).toBeGreaterThan(0);
    expect(await next.release()).toBe(true);
  });
});

describe('fences after Redis restarts from an older RDB snapshot', () => {
  let snapshotDir: string;
  let restarted: RedisServer;
  let admin: Redis;
  let app: LockApp;

  beforeAll(async () => {
    snapshotDir = mkdtempSync(join(tmpdir(), 'nest-lock-snapshot-'));
    restarted = await RedisServer.start({ args: ['--dir', snapshotDir] });
    admin = new Redis(restarted.url);
    app = await bootLockModule({ redis: restarted.url, commandTimeout: 200 });
  });
  afterAll(async () => {
    await closeLockApp(app);
    admin?.disconnect();
    await restarted?.stop();
    rmSync(snapshotDir, { recursive: true, force: true });
  });

  it('the next fence is greater than every fence handed out before the restart', async () => {
    const key = uniqueKey('account');
    const fences: number[] = [];
    const take = async () => {
      const lock = await app.locks.lock(key);
      fences.push(await lock.fence());
      await lock.unlock();
    };
    for (let i = 0; i < 3; i++) await take();
    await admin.set('snapshot-marker', 'taken');
    await admin.save();
    for (let i = 0; i < 3; i++) await take();

    await restarted.restart();
    expect(await admin.get('snapshot-marker')).toBe('taken'); // it came back from the snapshot
    let after: number | undefined;
    const deadline = performance.now() + 8_000;
    while (after === undefined && performance.now() < deadline) {
      try {
        const lock = await app.locks.lock(key, { timeout: 0 });
        try {
          after = await lock.fence();
        } finally {
          await lock.unlock().catch(() => undefined);
        }
      } catch {
        await delay(100); // the module's client is still reconnecting
      }
    }
    expect(after).toBeGreaterThan(Math.max(...fences));
  });
});

describe('memory-store fences are not reset by a new store', () => {
  it('a fence a new application takes is greater than one an earlier application took', async () => {
    const clockFloor = Date.now() * 1_000 - 1e9;
    const fenceOfANewApp = async () => {
      const app = await bootLockModule({});
      try {
        const lock = await app.locks.lock('memory-fence:account');
        const fence = await lock.fence();
        await lock.unlock();
        return fence;
      } finally {
        await closeLockApp(app);
      }
    };
    const earlier = await fenceOfANewApp();
    const later = await fenceOfANewApp();
    expect(later).toBeGreaterThan(earlier);
    // They come from the clock (µs), as on Redis.
    expect(earlier).toBeGreaterThan(clockFloor);
  });
});
