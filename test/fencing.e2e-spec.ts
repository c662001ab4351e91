import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { LockStore, type RedisStore } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import {
  bootLockModule,
  closeLockApp,
  createLockApp,
  type LockApp,
  STORE_KINDS,
  uniqueKey,
  useLockApp,
} from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';
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
    let server: RedisServer;
    let redis: Redis;

    beforeAll(async () => {
      server = await RedisServer.start();
      redis = new Redis(server.url);
    });
    afterAll(async () => {
      redis.disconnect();
      await server.stop();
    });

    it(`gives ${ACQUISITIONS.toLocaleString('en')} acquisitions of one key across ${PROCESSES} processes strictly increasing fences, in the order the server granted them`, async () => {
      const key = 'fenced';
      // Each holder RPUSHes its fence while it holds the lock: the list is in the server's grant order.
      const listKey = 'fences-in-grant-order';
      const reports = await runWorkers<{ fences: number[] }>('fault-worker', PROCESSES, [
        JSON.stringify({ mode: 'fence', lockUrl: server.url, key, listKey, count: ACQUISITIONS / PROCESSES, loops: 4 }),
      ]);

      const inGrantOrder = (await redis.lrange(listKey, 0, -1)).map(Number);
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
    let app: LockApp;
    let redis: Redis;

    beforeAll(async () => {
      app = await createLockApp('redis');
      redis = new Redis(app.server!.url, { retryStrategy: () => 50 });
    });
    afterAll(async () => {
      redis.disconnect();
      await closeLockApp(app);
    });

    it('keeps the counter long after the lock key expired, with an expiry of its own (an hour by default)', async () => {
      const key = uniqueKey('fence-counter');
      const [lockKey, counter] = app.module.get<typeof LockStore, RedisStore>(LockStore).keysOf(lockKind, key);
      await app.locks.lock(key, { ttl: 50 });
      await delay(150);

      expect(await redis.exists(lockKey)).toBe(0);
      const counterTtl = await redis.pttl(counter);
      expect(counterTtl).toBeGreaterThan(3_500_000);
      expect(counterTtl).toBeLessThanOrEqual(3_600_000);
    });

    it('lets the counters expire after fenceCounterTtl, and fences keep increasing from the server clock', async () => {
      const shortLived = await bootLockModule({ redis: app.server!.url, keyPrefix: 'short:', fenceCounterTtl: 1_000 });
      try {
        const key = uniqueKey('fence-expiring');
        const name = uniqueKey('fence-expiring-permits');
        const store = shortLived.module.get<typeof LockStore, RedisStore>(LockStore);
        const lock = await shortLived.locks.lock(key);
        await lock.unlock();
        const permit = await shortLived.semaphores.acquire(name, 1);
        await permit.release();
        const counters = [store.keysOf(lockKind, key)[1], store.keysOf(semaphoreKind, name)[1]];
        expect(await Promise.all(counters.map((counter) => redis.pttl(counter)))).toEqual([
          expect.any(Number),
          expect.any(Number),
        ]);
        for (const counter of counters) expect(await redis.pttl(counter)).toBeGreaterThan(0);

        await delay(1_200);
        expect(await redis.exists(...counters)).toBe(0);
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
        const lock = await app.locks.lock(key, { timeout: 5_000 });
        fences.push(lock.fence);
        await lock.unlock();
      };
      await take();
      await take();
      await redis.flushall();
      await take();
      await app.server!.restart();
      await take();
      await take();

      expectStrictlyIncreasing(fences);
    });
  });
});
