import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type Lock, type LockLostError, type Permit } from 'nest-lock';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import {
  bootLockModule,
  closeLockApp,
  createLockApp,
  type LockApp,
  STORE_KINDS,
  uniqueKey,
  useLockApps,
} from './support/lock-app.js';
import { lockKeyOf, untilWaitingAt } from './support/redis-keys.js';
import { abortReasonWithin } from './support/timing.js';

/**
 * `expire(ttl)` on a lease that is held — through `Lock.expire`, `Permit.expire` or
 * `LockService.expire(key, token, ttl)` — while the watchdog renews it: the holder's `validity`, its
 * renewals and its lost-lease deadline follow the lease the server holds.
 */

/** A lease of either kind, as these tests use it. */
type Lease = Lock | Permit;

/** Keeps the server busy for `ms` (a Lua loop on its own connection): every command sent meanwhile queues. */
async function stallServer(url: string, ms: number): Promise<void> {
  const admin = new Redis(url);
  try {
    await admin.eval(
      `local function now() local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) end
       local stop = now() + tonumber(ARGV[1])
       while now() < stop do end
       return 1`,
      0,
      ms,
    );
  } finally {
    admin.disconnect();
  }
}

describe.each(['lock', 'permit'] as const)('expire() racing a renewal of a %s on Redis', (leaseKind) => {
  const apps = useLockApps('redis', 2);
  const app = () => apps()[0];
  /** Another application on the same server: another process, as far as Redis can tell. */
  const other = () => apps()[1];

  /** Holds `id` through `withLock` / `withPermit` (limit 1) with `ttl`, renewed by the watchdog. */
  function hold<T>(id: string, ttl: number, fn: (lease: Lease) => Promise<T>): Promise<T> {
    return leaseKind === 'lock'
      ? app().locks.withLock(id, fn, { ttl })
      : app().semaphores.withPermit(id, 1, fn, { ttl });
  }

  /** What the server says the lease still runs, ms. */
  async function serverTtl(id: string): Promise<number> {
    if (leaseKind === 'lock') return (await app().locks.inspect(id)).ttl;
    const [permit] = await app().semaphores.holders(id);
    return permit?.ttl ?? 0;
  }

  /** One attempt of the other application: whether it got the key (and gives it back at once). */
  async function otherTakes(id: string): Promise<boolean> {
    const lease = leaseKind === 'lock' ? await other().locks.tryLock(id) : await other().semaphores.tryAcquire(id, 1);
    if (lease === null) return false;
    await ('unlock' in lease ? lease.unlock() : lease.release());
    return true;
  }

  it('never lets the holder count on more than the server holds when both answers arrive together (a slow command queues them)', async () => {
    const id = uniqueKey('expire-race-stalled');
    const overlaps: string[] = [];

    await hold(id, 3_000, async (lease) => {
      // The watchdog renews at ttl / 3 (~1,000 ms): the server is busy from 850 to 1,250 ms, so that the
      // renewal queues behind the busy script, and expire(500), sent at 1,100 ms, behind the renewal.
      await delay(850);
      const stalled = stallServer(app().server!.url, 400);
      await delay(250);
      expect(await lease.expire(500)).toBe(true);
      await stalled;
      await delay(20);

      const onServer = await serverTtl(id);
      expect(onServer).toBeLessThanOrEqual(500);
      expect(lease.validity).toBeLessThanOrEqual(onServer + 2);

      // Another process polls for the key while the holder believes in its lease.
      const until = performance.now() + 1_500;
      while (performance.now() < until) {
        if ((await otherTakes(id)) && lease.validity > 0 && !lease.signal.aborted) {
          overlaps.push(`taken by another process while the holder's validity was ${Math.round(lease.validity)} ms`);
        }
        await delay(20);
      }
    });

    expect(overlaps).toEqual([]);
  });

  it('applies answers in the order their commands were sent: 100 holders calling expire() in the millisecond of their renewal', async () => {
    // No stall: each holder calls expire(100) within a millisecond or two of its watchdog's renewal (at
    // ttl / 3 after the attempt was sent), so that the two commands often reach the server together and
    // their replies come back in one read. One holder at a time: renewals that fall due together share a
    // round trip, which would move them away from the expire() calls. (Before the fix: ~6 of 100 wrong.)
    const ttl = 300;
    const wrong: string[] = [];

    for (let i = 0; i < 100; i++) {
      const id = uniqueKey(`expire-race-${i}`);
      const offset = (i % 5) * 0.5 - 0.5;
      const before = performance.now();
      await hold(id, ttl, async (lease) => {
        await delay(Math.max(0, before + ttl / 3 + offset - performance.now()));
        expect(await lease.expire(100)).toBe(true);
        await delay(10);
        const onServer = await serverTtl(id);
        const validity = lease.validity;
        if (validity > onServer + 2) {
          wrong.push(`trial ${i}: validity ${Math.round(validity)} ms, server ${onServer} ms`);
        }
      });
    }

    expect(wrong).toEqual([]);
  }, 60_000);
});

describe.each(STORE_KINDS)('expire() with another ttl on the %s store', (kind) => {
  const lost: LockLostError[] = [];
  let app: LockApp;
  let other: LockApp | undefined;

  beforeAll(async () => {
    app = await createLockApp(kind, { onLockLost: (error) => lost.push(error) });
    // On Redis another application plays the other process; the memory store is one process.
    if (kind === 'redis') other = await bootLockModule({ redis: app.server!.url });
  });
  afterAll(async () => {
    await closeLockApp(other);
    await closeLockApp(app);
  });

  /**
   * Runs `fn` on an application of its own: its watchdog has no timer of other tests' leases, which could
   * fire in time by chance and hide a timer that was never moved.
   */
  async function inFreshApp(fn: (fresh: LockApp) => Promise<void>): Promise<void> {
    const fresh = kind === 'redis' ? await bootLockModule({ redis: app.server!.url }) : await createLockApp(kind);
    try {
      await fn(fresh);
    } finally {
      await closeLockApp(fresh);
    }
  }

  /**
   * Whether somebody else can take `key` from the holder's application now: another process on Redis,
   * another call chain of the same application in memory.
   */
  async function someoneElseTakes(key: string, holder: LockApp = app): Promise<boolean> {
    const locks = (other ?? holder).locks;
    const lock = await new Promise<Lock | null>((resolve, reject) =>
      setImmediate(() => void locks.tryLock(key).then(resolve, reject)),
    );
    if (lock === null) return false;
    await lock.unlock();
    return true;
  }

  /** Tries to take `key` as somebody else every 50 ms for `ms`; when (ms from the start) that worked. */
  async function takesDuring(key: string, ms: number): Promise<number[]> {
    const taken: number[] = [];
    const start = performance.now();
    while (performance.now() - start < ms) {
      await delay(50);
      if (await someoneElseTakes(key)) taken.push(Math.round(performance.now() - start));
    }
    return taken;
  }

  it('renews a lock on the new ttl at once: withLock(ttl 5,000) then expire(600) keeps it past 600 ms', async () => {
    const key = uniqueKey('shorter');
    const takenBy: number[] = [];

    await app.locks.withLock(
      key,
      async (lock) => {
        expect(await lock.expire(600)).toBe(true);
        expect(lock.validity).toBeLessThanOrEqual(600);
        takenBy.push(...(await takesDuring(key, 1_300)));
        expect(lock.signal.aborted).toBe(false);
        expect(lock.validity).toBeGreaterThan(0);
        expect(lock.validity).toBeLessThanOrEqual(600);
      },
      { ttl: 5_000 },
    );

    expect(takenBy).toEqual([]);
    expect(lost).toEqual([]);
  });

  it('renews a bare lock() with autoExtend on the new ttl at once', async () => {
    await inFreshApp(async (fresh) => {
      const key = uniqueKey('bare-auto');
      const lock = await fresh.locks.lock(key, { ttl: 5_000, autoExtend: true });
      expect(await lock.expire(600)).toBe(true);

      await delay(1_200);
      expect(await someoneElseTakes(key, fresh)).toBe(false);
      expect(lock.signal.aborted).toBe(false);
      expect(await lock.unlock()).toBe(true);
    });
  });

  it('renews a permit on the new ttl at once', async () => {
    await inFreshApp(async (fresh) => {
      const name = uniqueKey('permit-shorter');
      await fresh.semaphores.withPermit(
        name,
        1,
        async (permit) => {
          expect(await permit.expire(600)).toBe(true);
          await delay(1_200);
          expect(await fresh.semaphores.count(name)).toBe(1);
          const [holder] = await fresh.semaphores.holders(name);
          expect(holder.ttl).toBeLessThanOrEqual(600);
          expect(permit.signal.aborted).toBe(false);
        },
        { ttl: 5_000 },
      );
    });
  });

  it('moves the lost-lease deadline of a lease nobody renews to the new lease: the signal aborts when it runs out', async () => {
    await inFreshApp(async (fresh) => {
      const key = uniqueKey('bare-deadline');
      const lock = await fresh.locks.lock(key, { ttl: 30_000 });
      const start = performance.now();
      expect(await lock.expire(1_000)).toBe(true);

      const reason = await abortReasonWithin(lock.signal, 2_000);
      expect(reason).toMatchObject({ code: 'LOCK_LOST', reason: 'expired' });
      const abortedAfter = performance.now() - start;
      expect(abortedAfter).toBeGreaterThan(900);
      expect(abortedAfter).toBeLessThan(1_500);
      expect(lock.validity).toBe(0);
    });
  });

  it('LockService.expire(key, token, ttl) on a lease this process holds: its validity and renewals follow', async () => {
    const key = uniqueKey('service-expire');
    const takenBy: number[] = [];

    await app.locks.withLock(
      key,
      async (lock) => {
        expect(await app.locks.expire(key, lock.token, 600)).toBe(true);
        expect(lock.validity).toBeLessThanOrEqual(600);
        takenBy.push(...(await takesDuring(key, 1_300)));
        expect(lock.signal.aborted).toBe(false);
        expect(lock.validity).toBeLessThanOrEqual(600);
      },
      { ttl: 5_000 },
    );

    expect(takenBy).toEqual([]);
  });

  it('LockService.expire(key, token, ttl) moves the lost-lease deadline of a bare lock this process holds', async () => {
    await inFreshApp(async (fresh) => {
      const key = uniqueKey('service-deadline');
      const lock = await fresh.locks.lock(key, { ttl: 30_000 });
      expect(await fresh.locks.expire(key, lock.token, 800)).toBe(true);

      expect(await abortReasonWithin(lock.signal, 2_000)).toMatchObject({ reason: 'expired' });
    });
  });

  it('LockService.unlock(key, token) passes the lock at once to the next waiter of the holder’s process', async () => {
    const key = uniqueKey('service-unlock-next');
    const first = await app.locks.lock(key, { ttl: 10_000 });
    // Two waiters of this process: the second waits for the first to pass the lock on, in no line of the store.
    const second = app.locks.lock(key, { ttl: 10_000, timeout: 5_000, maxStep: 2_000 });
    await untilWaitingAt(app.server?.url, lockKeyOf(key), { orAfterMs: 50 });
    const third = app.locks.lock(key, { timeout: 5_000, maxStep: 2_000 });
    await delay(50);
    expect(await first.unlock()).toBe(true);
    const holder = await second;

    const started = performance.now();
    expect(await app.locks.unlock(key, holder.token)).toBe(true);
    const next = await third;

    // Not after the waiter's next look (maxStep): at once, as the holder's own unlock() would.
    expect(performance.now() - started).toBeLessThan(300);
    await next.unlock();
  });

  it('LockService.unlock(key, token) loses every Lock of this process that holds the key with that token', async () => {
    const key = uniqueKey('service-unlock-twice');
    const first = await app.locks.lock(key, { token: 'shared-token', ttl: 5_000 });
    const second = await app.locks.lock(key, { token: 'shared-token', ttl: 5_000, timeout: 0 });

    expect(await app.locks.unlock(key, 'shared-token')).toBe(true);

    expect(first.validity).toBe(0);
    expect(second.validity).toBe(0);
    expect(first.signal.aborted).toBe(true);
    expect(second.signal.aborted).toBe(true);
  });

  it('LockService.unlock(key, token) of a lease this process holds: its holder stops counting on it before the key is free', async () => {
    const key = uniqueKey('service-unlock');
    const lostBefore = lost.length;

    await app.locks.withLock(
      key,
      async (lock) => {
        const unlocked = app.locks.unlock(key, lock.token);
        // Before the release reaches the store: nobody else may hold the key while this holder still counts on it.
        expect(lock.validity).toBe(0);
        expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST', reason: 'taken' });
        expect(await unlocked).toBe(true);
        expect(await someoneElseTakes(key)).toBe(true);
      },
      { ttl: 600 },
    );

    expect(lost.slice(lostBefore)).toEqual([expect.objectContaining({ key, reason: 'taken' })]);
  });
});
