import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { LoggerService } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  InvalidArgumentError,
  LockLostError,
  LockModule,
  type LockModuleOptions,
  LockService,
  SemaphoreService,
} from 'nest-lock';
import { once } from 'node:events';
import { deferred } from './support/deferred.js';
import { bootLockModule, closeLockApp, STORE_KINDS, uniqueKey } from './support/lock-app.js';
import { lockKeyOf, untilWaitingAt } from './support/redis-keys.js';
import { RedisServer } from './support/redis-server.js';

class WarningLog implements LoggerService {
  readonly warnings: string[] = [];
  log() {}
  error() {}
  warn(message: string) {
    this.warnings.push(message);
  }
}

describe.each(STORE_KINDS)('inspect, holders and forceUnlock, on the %s store', (kind) => {
  let server: RedisServer | undefined;
  let module: TestingModule;
  let locks: LockService;
  let semaphores: SemaphoreService;
  const log = new WarningLog();

  beforeAll(async () => {
    server = kind === 'redis' ? await RedisServer.start() : undefined;
    const options: LockModuleOptions = server ? { redis: server.url } : { store: 'memory' };
    module = await Test.createTestingModule({ imports: [LockModule.forRoot(options)] })
      .setLogger(log)
      .compile();
    await module.init();
    locks = module.get(LockService);
    semaphores = module.get(SemaphoreService);
  });
  afterAll(async () => {
    await module.close();
    await server?.stop();
  });

  it('inspect() finds a key that was never locked free, with no fence', async () => {
    expect(await locks.inspect(uniqueKey('order'))).toEqual({ held: false, readers: 0, ttl: 0 });
  });

  it("inspect() finds a held lock with the lease's remaining ttl, and its fence once its holder drew one", async () => {
    const key = uniqueKey('order');
    const lock = await locks.lock(key, { ttl: 10_000 });

    const seen = await locks.inspect(key);

    expect(seen.held).toBe(true);
    expect(seen.ttl).toBeGreaterThan(5_000);
    expect(seen.ttl).toBeLessThanOrEqual(10_000);
    // No fence is drawn by the acquisition itself.
    expect(seen.fence).toBeUndefined();
    const fence = await lock.fence();
    expect(await locks.inspect(key)).toMatchObject({ held: true, fence });
    await lock.unlock();
  });

  // Found by the outside review: Redis's PTTL is 0 in a lease's last millisecond, and inspect() read
  // it as "held, ttl 0", where ttl 0 means free.
  it("inspect() never says held with a ttl of 0, down to the lease's last millisecond", async () => {
    const key = uniqueKey('last-millisecond');
    const heldTtls: number[] = [];
    for (let round = 0; round < 5; round++) {
      await locks.lock(key, { ttl: 20, timeout: 1_000 });
      for (;;) {
        const seen = await locks.inspect(key);
        if (!seen.held) break;
        heldTtls.push(seen.ttl);
      }
    }
    expect(heldTtls.length).toBeGreaterThan(5);
    expect(heldTtls.filter((ttl) => ttl <= 0)).toEqual([]);
  });

  it('inspect() after unlock: free; Redis still knows the last fence, the memory store does not', async () => {
    const key = uniqueKey('order');
    const lock = await locks.lock(key);
    const fence = await lock.fence();
    await lock.unlock();

    expect(await locks.inspect(key)).toEqual(
      kind === 'redis' ? { held: false, readers: 0, ttl: 0, fence } : { held: false, readers: 0, ttl: 0 },
    );
  });

  it('holders() lists the unexpired permits, soonest to run out first, as many as count()', async () => {
    const name = uniqueKey('reports');
    const long = await semaphores.acquire(name, 3, { ttl: 20_000 });
    const short = await semaphores.acquire(name, 3, { ttl: 5_000 });

    const holders = await semaphores.holders(name);

    expect(holders).toHaveLength(2);
    expect(holders[0].ttl).toBeLessThanOrEqual(5_000);
    expect(holders[0].ttl).toBeGreaterThan(2_000);
    expect(holders[1].ttl).toBeGreaterThan(15_000);
    expect(holders.length).toBe(await semaphores.count(name));
    await short.release();
    expect(await semaphores.holders(name)).toHaveLength(1);
    await long.release();
    expect(await semaphores.holders(name)).toEqual([]);
  });

  it('forceUnlock() releases a lock whoever holds it, logs it, and the holder learns it lost the lock', async () => {
    const key = uniqueKey('order');
    let lost: unknown;
    const running = deferred<void>();
    const holding = locks.withLock(
      key,
      async (lock) => {
        const aborted = once(lock.signal, 'abort');
        running.resolve();
        await aborted;
        lost = lock.signal.reason;
      },
      { ttl: 300 },
    );
    // The routine runs (and listens) before the operator steps in: a key held is not enough, the
    // routine may not have started yet.
    await running.promise;

    expect(await locks.forceUnlock(key)).toBe(true);

    expect(await locks.inspect(key)).toMatchObject({ held: false });
    await holding;
    expect(lost).toBeInstanceOf(LockLostError);
    expect(log.warnings).toContain(`forceUnlock("${key}"): an operator released the lock, whoever held it`);
  });

  it('forceUnlock() in the process that holds the lock: the holder stops counting on it before the key is free', async () => {
    const key = uniqueKey('order');
    const held = await locks.lock(key, { ttl: 3_000 });
    const waiting = locks.lock(key, { timeout: 5_000 });
    await untilWaitingAt(server?.url, lockKeyOf(key), { orAfterMs: 50 });

    const released = locks.forceUnlock(key);
    // Before the release reaches the store: the next owner may be granted it at any moment from now.
    expect(held.validity).toBe(0);
    expect(held.signal.reason).toMatchObject({ code: 'LOCK_LOST', reason: 'taken', key });
    expect(await released).toBe(true);
    const next = await waiting;
    expect(next.validity).toBeGreaterThan(0);
    expect(held.validity).toBe(0);
    await next.unlock();
  });

  it('forceUnlock() of a free key is false, and logged as such', async () => {
    const key = uniqueKey('order');

    expect(await locks.forceUnlock(key)).toBe(false);
    expect(log.warnings).toContain(`forceUnlock("${key}"): the lock was not held, nothing released`);
  });

  it("forceUnlock() lets the waiter in at once rather than after the holder's lease", async () => {
    const key = uniqueKey('order');
    const stuck = await locks.lock(key, { ttl: 30_000 });
    const stuckFence = await stuck.fence();
    const waiting = locks.lock(key, { timeout: 10_000 });
    await untilWaitingAt(server?.url, lockKeyOf(key), { orAfterMs: 50 });

    const started = performance.now();
    await locks.forceUnlock(key);
    const next = await waiting;

    expect(performance.now() - started).toBeLessThan(5_000);
    expect(await next.fence()).toBeGreaterThan(stuckFence);
    expect(await stuck.unlock()).toBe(false);
    await next.unlock();
  });
});

describe('inspect, holders and forceUnlock refuse bad input before any Redis call', () => {
  it('with Redis stopped, a bad key is INVALID_ARGUMENT, not a backend error', async () => {
    const server = await RedisServer.start();
    const app = await bootLockModule({ redis: server.url, commandTimeout: 200 });
    await server.stop();
    try {
      await expect(app.locks.inspect('')).rejects.toThrow(InvalidArgumentError);
      await expect(app.locks.forceUnlock('a\uD800')).rejects.toThrow(InvalidArgumentError);
      await expect(app.locks.inspect(42 as never)).rejects.toThrow(InvalidArgumentError);
      await expect(app.semaphores.holders('')).rejects.toThrow(InvalidArgumentError);
    } finally {
      await closeLockApp(app);
    }
  });
});
