import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { type Lock, LockLostError, LockStore, RedisStore } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, type LockApp, uniqueKey } from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';

/**
 * A lock passed inside the process ahead of Redis's line is passed as the release is *sent*: the
 * next local waiter starts without waiting for the round trip, with the fence after the holder's,
 * and learns from the release's reply whether the pass happened after all.
 */
describe('a lock passed inside the process as the release is sent', () => {
  let server: RedisServer;
  let app: LockApp;
  let redis: Redis;

  beforeAll(async () => {
    server = await RedisServer.start();
    app = await bootLockModule({ redis: server.url });
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    redis.disconnect();
    await closeLockApp(app);
    await server.stop();
  });

  const store = () => app.module.get<RedisStore>(LockStore);

  /**
   * `holder` holds `key` and `next` waits behind it in this process, since before this process took
   * the lock (so the release passes to `next` ahead of Redis's line).
   */
  async function holderAndNext(key: string, options: { token?: string } = {}) {
    const first = await app.locks.lock(key);
    const second = app.locks.lock(key, { timeout: 10_000, ...options });
    const next = app.locks.lock(key, { timeout: 10_000 });
    await delay(50);
    await first.unlock();
    return { holder: await second, next };
  }

  /** Runs `during` while Redis holds back every write (CLIENT PAUSE WRITE), so a release waits on the server. */
  async function whileWritesPaused<T>(ms: number, during: () => Promise<T>): Promise<T> {
    await redis.call('CLIENT', 'PAUSE', String(ms), 'WRITE');
    return during();
  }

  /** Whether `promise` is still pending after this turn of the event loop. */
  async function pending(promise: Promise<unknown>): Promise<boolean> {
    let settled = false;
    promise.then(
      () => (settled = true),
      () => (settled = true),
    );
    await new Promise((resolve) => setImmediate(resolve));
    return !settled;
  }

  it('starts the next waiter before the release is answered, with the fence after the holder’s', async () => {
    const key = uniqueKey('early-pass');
    const lockKey = store().keysOf('lock', key)[0];
    const { holder, next } = await holderAndNext(key);
    const holderValidity = holder.validity;

    let lock!: Lock;
    let released!: Promise<boolean>;
    await whileWritesPaused(300, async () => {
      released = holder.unlock();
      lock = await next;
      // Redis has not run the release yet: the lock is still the holder's there.
      expect(await pending(released)).toBe(true);
    });
    expect(lock.fence).toBe(holder.fence + 1);
    // Until Redis answers, it counts on no more than the holder's own lease.
    expect(lock.validity).toBeLessThanOrEqual(holderValidity);

    expect(await released).toBe(true);
    expect(await redis.get(lockKey)).toBe(lock.token);
    expect(lock.signal.aborted).toBe(false);
    expect(lock.validity).toBeGreaterThan(store().handoverLease / 2);
    expect(Number(await redis.get(store().keysOf('lock', key)[1]))).toBeGreaterThanOrEqual(lock.fence);
    expect(await lock.unlock()).toBe(true);
    // The fences go on increasing after it.
    const after = await app.locks.lock(key);
    expect(after.fence).toBeGreaterThan(lock.fence);
    await after.unlock();
  });

  it('loses the passed lock when the release finds the holder’s lease gone after all', async () => {
    const key = uniqueKey('early-pass-lost');
    const lockKey = store().keysOf('lock', key)[0];
    const { holder, next } = await holderAndNext(key);
    // The holder's lease is gone without its knowing (an operator's DEL, a restart without
    // persistence), and another client took the lock.
    await redis.set(lockKey, 'intruder', 'PX', 10_000);

    const released = holder.unlock();
    const lock = await next;
    expect(await released).toBe(false);
    await delay(10);
    expect(lock.signal.aborted).toBe(true);
    expect(lock.signal.reason).toBeInstanceOf(LockLostError);
    expect(lock.validity).toBe(0);
    expect(await redis.get(lockKey)).toBe('intruder');
    expect(await lock.unlock()).toBe(false);
    await redis.del(lockKey);
  });

  it('waits for the answer when the holder’s token is the caller’s own (it may be held elsewhere too)', async () => {
    const key = uniqueKey('early-pass-own-token');
    const { holder, next } = await holderAndNext(key, { token: `caller-${key}` });

    await whileWritesPaused(300, async () => {
      const released = holder.unlock();
      expect(await pending(next)).toBe(true);
      expect(await released).toBe(true);
    });
    const lock = await next;
    expect(lock.signal.aborted).toBe(false);
    expect(await lock.unlock()).toBe(true);
  });

  it('waits for the answer when the holder’s lease is nearly over', async () => {
    const key = uniqueKey('early-pass-short');
    const first = await app.locks.lock(key);
    const second = app.locks.lock(key, { timeout: 10_000, ttl: 10_000 });
    const next = app.locks.lock(key, { timeout: 10_000 });
    await delay(50);
    await first.unlock();
    const holder = await second;
    // Shortened below half the handover lease: a release might reach Redis after it ran out.
    await holder.expire(store().handoverLease / 4);

    await whileWritesPaused(300, async () => {
      const released = holder.unlock();
      expect(await pending(next)).toBe(true);
      expect(await released).toBe(true);
    });
    const lock = await next;
    expect(lock.signal.aborted).toBe(false);
    expect(await lock.unlock()).toBe(true);
  });
});
