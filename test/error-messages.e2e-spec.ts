import { describe, expect, it } from '@jest/globals';
import { LockBackendError, LockTimeoutError, SemaphoreTimeoutError } from 'nest-lock';
import { bootLockModule, closeLockApp, STORE_KINDS, uniqueKey, useLockApp } from './support/lock-app.js';
import { RedisServer, useRedisClient, useRedisServer } from './support/redis-server.js';

describe.each(STORE_KINDS)('timeouts and elapsed times as users read them, on the %s store', (kind) => {
  const app = useLockApp(kind);

  it('says "at once" when a single attempt (timeout 0) found the lock held', async () => {
    const key = uniqueKey('order');
    const held = await app().locks.lock(key);

    const error = await app()
      .locks.lock(key, { timeout: 0 })
      .catch((e: unknown) => e);

    expect(error).toBeInstanceOf(LockTimeoutError);
    expect((error as Error).message).toBe(`Could not lock "${key}" at once: it is held by another owner`);
    expect(error).toMatchObject({ key, timeout: 0 });
    expect(Number.isInteger((error as LockTimeoutError).waited)).toBe(true);
    await held.unlock();
  });

  it('names the timeout it waited with, and the whole milliseconds it waited', async () => {
    const key = uniqueKey('order');
    const held = await app().locks.lock(key);

    const error = (await app()
      .locks.lock(key, { timeout: 120 })
      .catch((e: unknown) => e)) as LockTimeoutError;

    expect(error.message).toBe(`Could not lock "${key}" within 120 ms: it is held by another owner`);
    expect(Number.isInteger(error.waited)).toBe(true);
    expect(error.waited).toBeGreaterThanOrEqual(100);
    await held.unlock();
  });

  it('says "at once" for a full semaphore, distributed and local', async () => {
    const name = uniqueKey('reports');
    const permit = await app().semaphores.acquire(name, 1);
    const local = await app().semaphores.acquireLocal(name, 1);

    const distributed = await app()
      .semaphores.acquire(name, 1, { timeout: 0 })
      .catch((e: unknown) => e);
    const inProcess = await app()
      .semaphores.acquireLocal(name, 1, { timeout: 0 })
      .catch((e: unknown) => e);

    for (const error of [distributed, inProcess]) {
      expect(error).toBeInstanceOf(SemaphoreTimeoutError);
      expect((error as Error).message).toBe(`No permit of semaphore "${name}" (limit 1) at once: all are held`);
      expect(Number.isInteger((error as SemaphoreTimeoutError).waited)).toBe(true);
    }
    await permit.release();
    await local.release();
  });

  it('reports elapsed of a contended lock and permit in whole milliseconds', async () => {
    const key = uniqueKey('order');
    const held = await app().locks.lock(key);
    const name = uniqueKey('reports');
    const permit = await app().semaphores.acquire(name, 1);
    setTimeout(() => void held.unlock(), 30);
    setTimeout(() => void permit.release(), 30);

    const [lock, next] = await Promise.all([app().locks.lock(key), app().semaphores.acquire(name, 1)]);

    for (const { elapsed } of [lock, next]) {
      expect(elapsed).toBeGreaterThan(0);
      expect(Number.isInteger(elapsed)).toBe(true);
    }
    await lock.unlock();
    await next.release();
  });
});

describe('backend errors as users read them', () => {
  const server = useRedisServer();
  /** A plain client beside the library, to put a value of another type at its key. */
  const redis = useRedisClient(server);

  it('a stopped Redis: "Redis is unreachable", the client error kept as cause', async () => {
    const stopped = await RedisServer.start();
    const unreachable = await bootLockModule({ redis: stopped.url, commandTimeout: 200 });
    await stopped.stop();
    try {
      const key = uniqueKey('order');
      const error = (await unreachable.locks.lock(key, { timeout: 0 }).catch((e: unknown) => e)) as LockBackendError;

      expect(error).toBeInstanceOf(LockBackendError);
      // Since when and why, in the client's words (the connection closed; later, connect ECONNREFUSED …).
      expect(error.message).toMatch(
        /^Redis is unreachable \(since \d{4}-\d\d-\d\dT[\d:.]+Z: [^)]+\): could not take lock /,
      );
      expect(error.message.endsWith(`could not take lock "${key}"`)).toBe(true);
      expect(error).toMatchObject({ code: 'BACKEND_UNAVAILABLE', key });
      expect(error.cause).toBeInstanceOf(Error);
      expect((error.cause as Error).message).not.toBe('');
    } finally {
      await closeLockApp(unreachable);
    }
  });

  it('a frozen Redis: "did not answer within <commandTimeout> ms", naming what could not be done', async () => {
    const frozen = await bootLockModule({ redis: server().url, commandTimeout: 200 });
    const name = uniqueKey('reports');
    server().pause();
    try {
      const error = await frozen.semaphores.count(name).catch((e: unknown) => e);

      expect(error).toBeInstanceOf(LockBackendError);
      expect((error as Error).message).toBe(
        `Redis did not answer within 200 ms: could not count the permits of semaphore "${name}"`,
      );
    } finally {
      server().resume();
      await closeLockApp(frozen);
    }
  });

  it('a value of another type at the key: "Redis refused", with the server\'s reply and the cause', async () => {
    const onRedis = await bootLockModule({ redis: server().url });
    const key = uniqueKey('order');
    await redis().hset(`lock:{${key}}`, 'owner', 'someone else');
    try {
      const error = (await onRedis.locks.lock(key).catch((e: unknown) => e)) as LockBackendError;

      expect(error.code).toBe('BACKEND_ERROR');
      expect(error.message).toMatch(new RegExp(`^Redis refused to take lock "${key}": WRONGTYPE`));
      expect((error.cause as Error).name).toBe('ReplyError');
    } finally {
      await closeLockApp(onRedis);
    }
  });
});
