import { describe, expect, it } from '@jest/globals';
import { type LockModuleOptions } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, type LockApp, uniqueKey, useLockApp } from './support/lock-app.js';
import { useRedisClient } from './support/redis-server.js';
import { lockKind, LockStore, RedisStore, semaphoreKind } from './support/kinds.js';

/**
 * Processes of one deployment with different settings (a rolling deploy, two services configured
 * apart) share locks: what one writes on another's behalf, the other must read as written. Found by
 * the fourth outside review: a handover lease written by a releaser with a short `commandTimeout`
 * was counted by a waiter with a long one as its own, longer, handover lease — and a third process
 * took the lock while the waiter still had seconds of validity.
 */
describe('processes with different settings', () => {
  const app = useLockApp('redis');
  const server = () => app().server!;
  const redis = useRedisClient(server);
  const store = () => app().module.get<RedisStore>(LockStore);

  /** What the server holds for `token` on `key` right now, in ms (≤ 0: nothing). */
  const serverLease = async (kind: 'write' | 'read' | 'permit', key: string, token: string): Promise<number> => {
    const keys =
      kind === 'permit'
        ? store().keysOf(semaphoreKind, key, 1)
        : store()
            .keysOf(lockKind, key)
            .filter((_, i) => i !== 1);
    // Writer: the lock's PTTL when it holds the token; reader and permit: their deadline in a sorted set.
    const script = `
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      if ARGV[2] == 'write' then
        if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
        return redis.call('PTTL', KEYS[1])
      end
      local set = KEYS[1]
      if ARGV[2] == 'read' then set = KEYS[5] end
      local deadline = redis.call('ZSCORE', set, ARGV[1])
      if not deadline then return -1 end
      return tonumber(deadline) - now`;
    const usedKeys = kind === 'read' ? keys.slice(0, 5) : keys.slice(0, 1);
    return Number(await redis().eval(script, usedKeys.length, ...usedKeys, token, kind));
  };

  async function withApps<T>(settings: LockModuleOptions[], run: (apps: LockApp[]) => Promise<T>): Promise<T> {
    const apps: LockApp[] = [];
    try {
      for (const options of settings) apps.push(await bootLockModule({ redis: server().url, ...options }));
      return await run(apps);
    } finally {
      for (const each of apps.reverse()) await closeLockApp(each);
    }
  }

  /**
   * Waits until a waiter stands in the line of `key` and its process listens for the handover (the
   * release must hand the lease over by message, not free it, nor hand it to a waiter that misses it).
   */
  async function untilWaiting(kind: 'lock' | 'permit', key: string): Promise<void> {
    const line = kind === 'lock' ? store().keysOf(lockKind, key)[2] : store().keysOf(semaphoreKind, key)[2];
    const channels = `${store().channelOf(kind === 'lock' ? lockKind : semaphoreKind, key)}:*`;
    while ((await redis().zcard(line)) < 1 || (await redis().pubsub('CHANNELS', channels)).length < 1) await delay(2);
    // The waiter looks again once subscribed; it is told to wait by that attempt, which goes at once.
    await delay(20);
  }

  const handoverCases = [
    { label: 'a lock', kind: 'write' as const },
    { label: 'a read lock', kind: 'read' as const },
    { label: 'a permit (limit 1)', kind: 'permit' as const },
  ];
  const directions = [
    { label: 'waiter 3,000 ms, releaser 100 ms', waiter: 3_000, releaser: 100 },
    { label: 'waiter 100 ms, releaser 3,000 ms', waiter: 100, releaser: 3_000 },
  ];

  describe.each(handoverCases)('$label handed over between commandTimeouts 30× apart', ({ kind }) => {
    it.each(directions)(
      '$label: the waiter counts the lease the releaser wrote, and renews it before it runs out',
      async ({ waiter, releaser }) => {
        await withApps(
          [{ commandTimeout: releaser }, { commandTimeout: waiter }, {}],
          async ([releasing, waiting, third]) => {
            const key = uniqueKey(`mixed-${kind}`);
            const take = (from: LockApp, timeout: number) =>
              kind === 'permit'
                ? from.semaphores.acquire(key, 1, { ttl: 10_000, timeout })
                : from.locks.lock(key, { ttl: 10_000, timeout, mode: kind });
            const holder =
              kind === 'permit'
                ? await releasing.semaphores.acquire(key, 1, { ttl: 10_000 })
                : await releasing.locks.lock(key, { ttl: 10_000 });
            const handed = take(waiting, 10_000);
            await untilWaiting(kind === 'permit' ? 'permit' : 'lock', key);
            const release = 'unlock' in holder ? () => holder.unlock() : () => holder.release();
            expect(await release()).toBe(true);
            const lease = await handed;

            // Never more than the server holds, and close to it: the refused attempt that the lease is
            // counted from went just before the release.
            const onServer = await serverLease(kind, key, lease.token);
            expect(lease.validity).toBeLessThanOrEqual(onServer + 5);
            expect(lease.validity).toBeGreaterThan(onServer - 400);

            // Past the shortest handover lease (1 s): the waiter renewed its lease before it ran out, so
            // the third process is refused while the waiter is valid.
            await delay(1_300);
            const other =
              kind === 'permit'
                ? await third.semaphores.tryAcquire(key, 1, { ttl: 10_000 })
                : await third.locks.tryLock(key, { ttl: 10_000 });
            expect({ other: other?.token ?? null, aborted: lease.signal.aborted }).toEqual({
              other: null,
              aborted: false,
            });
            expect(lease.validity).toBeGreaterThan(0);
            expect(await serverLease(kind, key, lease.token)).toBeGreaterThan(lease.validity - 5);
            await ('unlock' in lease ? lease.unlock() : lease.release());
          },
        );
      },
      15_000,
    );
  });
});
