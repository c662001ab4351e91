import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { LockStore, type RedisStore } from 'nest-lock';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, type LockApp, STORE_KINDS, uniqueKey, useLockApp } from './support/lock-app.js';
import { errorOf } from './support/outcomes.js';
import { lockKeyOf, pttlOnceGone, semaphoreKeyOf } from './support/redis-keys.js';
import { RedisServer, useRedisClient, useRedisServer } from './support/redis-server.js';
import { eventually } from './support/timing.js';
import { runWorkers } from './support/workers.js';
import { lockKind, semaphoreKind } from './support/kinds.js';

const PROCESSES = 4;
const ACQUISITIONS = 1_000;

function expectStrictlyIncreasing(fences: number[]): void {
  expect(fences.filter((fence) => !Number.isSafeInteger(fence) || fence < 1)).toEqual([]);
  const decreases = fences.flatMap((fence, i) => (i > 0 && fence <= fences[i - 1] ? [[fences[i - 1], fence]] : []));
  expect(decreases).toEqual([]);
}

/**
 * Fencing tokens (issue 7, section 2.3): `Lock.fence` and `Permit.fence` increase strictly with every
 * acquisition of a key, by any owner in any process, and outlive the lease itself.
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

    it('increases with every acquisition of a key, whoever takes it and however', async () => {
      const key = uniqueKey('fence');
      const fences: number[] = [];
      for (let i = 0; i < 5; i++) {
        const lock = await app().locks.lock(key, { token: `owner-${i % 2}` });
        fences.push(lock.fence);
        await lock.unlock();
        const tried = await app().locks.tryLock(key);
        fences.push(tried!.fence);
        await tried!.unlock();
        fences.push(await app().locks.withLock(key, (held) => held.fence));
      }

      expectStrictlyIncreasing(fences);
    });

    it('survives the expiry of the lock key: take, let it expire, take again gives a higher fence', async () => {
      const key = uniqueKey('fence-expiry');
      const first = await app().locks.lock(key, { ttl: 50 });
      await delay(150);
      expect(await app().locks.isLocked(key)).toBe(false);

      const second = await app().locks.lock(key, { ttl: 50 });

      expect(second.fence).toBeGreaterThan(first.fence);
      expect(await first.unlock()).toBe(false);
      expect(await second.unlock()).toBe(true);
    });

    it('is the same for every holder of a re-entrant withLock chain, and grows for the next chain', async () => {
      const key = uniqueKey('fence-reentrant');
      const [outer, inner] = await app().locks.withLock(key, async (lock) => [
        lock.fence,
        await app().locks.withLock(key, (nested) => nested.fence),
      ]);
      const next = await app().locks.withLock(key, (lock) => lock.fence);

      expect(inner).toBe(outer);
      expect(next).toBeGreaterThan(outer);
    });

    it('increases for the permits of a semaphore, also across its expiry', async () => {
      const name = uniqueKey('fence-semaphore');
      const held = [
        await app().semaphores.acquire(name, 3),
        await app().semaphores.acquire(name, 3),
        await app().semaphores.acquire(name, 3, { ttl: 50 }),
      ];
      await Promise.all(held.slice(0, 2).map((permit) => permit.release()));
      await delay(150);
      const later = await app().semaphores.acquire(name, 1);

      expectStrictlyIncreasing([...held, later].map((permit) => permit.fence));
      await later.release();
    });
  });

  describe('on Redis, when the counter itself is gone', () => {
    const app = useLockApp('redis');
    /** Reconnects soon after the restart below. */
    const redis = useRedisClient(() => app().server!, { retryStrategy: () => 50 });

    it('keeps the counter long after the lock key expired, with an expiry of its own (an hour by default)', async () => {
      const key = uniqueKey('fence-counter');
      const [lockKey, counter] = app().module.get<typeof LockStore, RedisStore>(LockStore).keysOf(lockKind, key);
      await app().locks.lock(key, { ttl: 50 });
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
        await lock.unlock();
        const permit = await shortLived.semaphores.acquire(name, 1);
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
        expect(later.fence).toBeGreaterThan(lock.fence);
        expect(laterPermit.fence).toBeGreaterThan(permit.fence);
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
        fences.push(lock.fence);
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

  const corruptions: [string, (counter: string) => Promise<unknown>][] = [
    ['a string that is not a number', (counter) => redis().set(counter, 'not-a-number')],
    ['a hash', (counter) => redis().hset(counter, 'a', '1')],
  ];

  it.each(corruptions)('lock(), with %s at the fence counter', async (_, corrupt) => {
    const key = uniqueKey('fenced');
    await corrupt(`${lockKeyOf(key)}:fence`);
    const outcome = await errorOf(app().locks.lock(key, { ttl: 10_000, timeout: 1_000 }));
    expect(outcome === 'resolved' ? outcome : String((outcome as { code?: string }).code)).toMatch(
      /^(resolved|BACKEND_ERROR)$/,
    );
    expect(await pttlOnceGone(redis(), lockKeyOf(key), 1_000)).toBe(-2);
  });

  it.each(corruptions)('acquire(), with %s at the fence counter', async (_, corrupt) => {
    const name = uniqueKey('fenced-semaphore');
    await corrupt(`${semaphoreKeyOf(name)}:fence`);
    const outcome = await errorOf(app().semaphores.acquire(name, 1, { ttl: 10_000, timeout: 1_000 }));
    expect(outcome === 'resolved' ? outcome : String((outcome as { code?: string }).code)).toMatch(
      /^(resolved|BACKEND_ERROR)$/,
    );
    expect(
      await eventually(
        () => app().semaphores.count(name),
        (count) => count === 0,
        1_000,
      ),
    ).toBe(0);
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
      fences.push(lock.fence);
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
        after = lock.fence;
        await lock.unlock();
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
        await lock.unlock();
        return lock.fence;
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
