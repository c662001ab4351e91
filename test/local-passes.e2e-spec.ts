import { describe, expect, it } from '@jest/globals';
import { LockLostError, type Lock, type LockOptions } from 'nest-lock';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { type LockApp, bootLockModule, closeLockApp, STORE_KINDS, uniqueKey, useLockApp } from './support/lock-app.js';
import { useRedisClient } from './support/redis-server.js';
import { until } from './support/timing.js';
import { killWorker, spawnWorker, startWorker, workerExited } from './support/workers.js';
import { lockKind, LockStore, RedisStore } from './support/kinds.js';

/** The cohort's bound (docs/API.md, "Fairness"): leases passed in a row inside one process. */
const COHORT_BOUND = 16;

/**
 * Two callers of one process that ask for `key` together: the first takes it from the store, the
 * second queued behind it meanwhile — a waiter of its tenure, which its release passes the lock to.
 */
async function holderAndWaiter(
  app: LockApp,
  key: string,
  options: LockOptions = {},
  holderToken?: string,
  waiterToken?: string,
): Promise<{ first: Lock; second: Promise<Lock> }> {
  const first = app.locks.lock(key, { ...options, token: holderToken });
  const second = app.locks.lock(key, { timeout: 10_000, ...options, token: waiterToken });
  return { first: await first, second };
}

describe.each(STORE_KINDS)('a lock passed between holders of one process (%s store)', (kind) => {
  const app = useLockApp(kind, { commandTimeout: 200 });

  it("refuses the previous holder's unlock, expire and fence, by its object and by its token; the new holder's token works", async () => {
    const key = uniqueKey('passed');
    const { first, second } = await holderAndWaiter(app(), key);
    const firstFence = await first.fence();

    expect(await first.unlock()).toBe(true);
    const passed = await second;

    expect(passed.token).not.toBe(first.token);
    expect(await first.unlock()).toBe(false);
    expect(await first.expire(5_000)).toBe(false);
    await expect(first.fence()).rejects.toBeInstanceOf(LockLostError);
    expect(await app().locks.unlock(key, first.token)).toBe(false);
    expect(await app().locks.expire(key, first.token, 5_000)).toBe(false);
    expect(await app().locks.isLocked(key)).toBe(true);
    expect(passed.signal.aborted).toBe(false);

    // Fences increase in holding order across the pass.
    expect(await passed.fence()).toBeGreaterThan(firstFence);
    expect(await app().locks.expire(key, passed.token, 5_000)).toBe(true);
    expect(passed.validity).toBeGreaterThan(3_000);
    expect(await app().locks.unlock(key, passed.token)).toBe(true);
    expect(await app().locks.isLocked(key)).toBe(false);
    expect(passed.signal.aborted).toBe(true); // unlocked by token: its holder may not count on it
  });

  it('gives the new holder what the lease has left, and keeps renewing it', async () => {
    const key = uniqueKey('renewed');
    const { first, second } = await holderAndWaiter(app(), key, { ttl: 600, autoExtend: true });
    await delay(250); // past a renewal (every ttl / 3)
    await first.unlock();
    const passed = await second;

    expect(passed.validity).toBeGreaterThan(0);
    expect(passed.validity).toBeLessThanOrEqual(600);
    await delay(1_000); // longer than its ttl: only renewals keep it
    expect(passed.validity).toBeGreaterThan(0);
    expect(passed.signal.aborted).toBe(false);
    expect(await app().locks.isLocked(key)).toBe(true);
    expect(await passed.unlock()).toBe(true);
  });

  it.each([
    [
      'an unordered lock (fair: false)',
      1,
      (name: string, fn: () => Promise<void>) => app().locks.withLock(name, fn, { fair: false }),
    ],
    ['a lock', 1, (name: string, fn: () => Promise<void>) => app().locks.withLock(name, fn)],
    ['permits of 2', 2, (name: string, fn: () => Promise<void>) => app().semaphores.withPermit(name, 2, fn)],
  ] as const)(
    'keeps %s within its limit while 6 workers of one process pass it on, 5 sections each',
    async (_label, limit, section) => {
      const name = uniqueKey('passed-on');
      let inside = 0;
      let most = 0;
      let sections = 0;
      await Promise.all(
        Array.from({ length: 6 }, async () => {
          for (let i = 0; i < 5; i++) {
            await section(name, async () => {
              most = Math.max(most, ++inside);
              await delay(1);
              sections++;
              inside--;
            });
          }
        }),
      );

      expect(sections).toBe(30);
      expect(most).toBe(limit);
    },
  );

  it('passes through the store when the holder or the waiter chose its token: the store knows each by its own', async () => {
    /** Whether the store holds `key` under `token` (an extension by that token succeeds). */
    const storeKnows = (key: string, token: string) =>
      app().module.get<LockStore>(LockStore).extend(lockKind, key, token, 10_000);
    /** The holder's and the waiter's token as the store knows the lease once the holder passed it on. */
    async function passed(holderToken: string | undefined, waiterToken: string | undefined) {
      const key = uniqueKey('token-choice');
      const { first, second } = await holderAndWaiter(app(), key, {}, holderToken, waiterToken);
      await first.unlock();
      const next = await second;
      const known = { holder: await storeKnows(key, first.token), waiter: await storeKnows(key, next.token) };
      await next.unlock();
      return known;
    }

    // The control: passed here without a command, the lease stays under the first holder's token.
    expect(await passed(undefined, undefined)).toEqual({ holder: true, waiter: false });
    expect(await passed(uniqueKey('own-holder'), undefined)).toEqual({ holder: false, waiter: true });
    expect(await passed(undefined, uniqueKey('own-waiter'))).toEqual({ holder: false, waiter: true });
  });
});

describe('local passes on Redis', () => {
  const app = useLockApp('redis', { commandTimeout: 200 });
  const server = () => app().server!;
  const redis = useRedisClient(server);
  const store = () => app().module.get<RedisStore>(LockStore);

  /** The commands clients send that name `key` (not those a script runs inside the server), by MONITOR, while `during` runs. */
  async function commandsNaming(key: string, during: () => Promise<unknown>): Promise<string[]> {
    const client = new Redis(server().url);
    const monitor = await client.monitor(); // a connection of its own
    const seen: string[] = [];
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (source !== 'lua' && args.some((arg) => arg.includes(key))) seen.push(args.join(' '));
    });
    try {
      await during();
      await redis().ping(); // once MONITOR shows a later command, it has shown every earlier one
      await delay(50);
      return seen;
    } finally {
      monitor.disconnect();
      client.disconnect();
    }
  }

  it('8 workers of one process running 5 withLock sections each on one key send at most 12 commands naming it', async () => {
    // The scripts cached on the server (a first call of each is sent again by its text: NOSCRIPT).
    const warm = uniqueKey('warm');
    await Promise.all(Array.from({ length: 3 }, () => app().locks.withLock(warm, () => delay(1))));
    const key = uniqueKey('eight-workers');
    let inside = 0;
    let overlaps = 0;
    let sections = 0;
    const commands = await commandsNaming(key, () =>
      Promise.all(
        Array.from({ length: 8 }, async () => {
          for (let i = 0; i < 5; i++) {
            await app().locks.withLock(key, async () => {
              if (++inside > 1) overlaps++;
              await delay(1);
              sections++;
              inside--;
            });
          }
        }),
      ),
    );

    expect(sections).toBe(40);
    expect(overlaps).toBe(0);
    expect(commands.length).toBeLessThanOrEqual(12);
    expect(await app().locks.isLocked(key)).toBe(false);
  });

  it('passes without a command: the release and the new holder’s start send nothing', async () => {
    const key = uniqueKey('no-command');
    const { first, second } = await holderAndWaiter(app(), key);
    let passed!: Lock;
    const commands = await commandsNaming(key, async () => {
      await first.unlock();
      passed = await second;
    });

    expect(commands).toEqual([]);
    expect((await app().locks.inspect(key)).held).toBe(true);
    await passed.unlock();
  });

  it("aborts the new holder's signal when the lease is lost while it holds it", async () => {
    const key = uniqueKey('lost-after-pass');
    const { first, second } = await holderAndWaiter(app(), key, { ttl: 300, autoExtend: true });
    await first.unlock();
    const passed = await second;
    await redis().del(store().keysOf(lockKind, key)[0]); // an operator's hand, behind the library's back

    await expect(
      new Promise((resolve) => passed.signal.addEventListener('abort', () => resolve(passed.signal.reason))),
    ).resolves.toBeInstanceOf(LockLostError);
    expect(await passed.unlock()).toBe(false);
  });

  it('serves a waiter of another process queued behind 8 waiters of this one within the cohort bound', async () => {
    const key = uniqueKey('cohort-bound');
    const other = await bootLockModule({ redis: server().url });
    try {
      const holder = await other.locks.lock(key);
      const granted = `${key}:granted`;
      // 8 waiters here, each taking the lock again and again: the first stands in Redis's line.
      let stop = false;
      const locals = Array.from({ length: 8 }, async (_, worker) => {
        while (!stop) {
          await app().locks.withLock(key, () => redis().rpush(granted, `local-${worker}`), { timeout: 20_000 });
        }
      });
      await untilInLine(key, 1);
      const remote = spawnWorker('line-up', [server().url, key, 'remote', 'fair']);
      await untilInLine(key, 2);

      await holder.unlock();
      await workerExited(remote);
      stop = true;
      await Promise.all(locals);

      const order = await redis().lrange(granted, 0, -1);
      const localsBefore = order.indexOf('remote');
      expect(localsBefore).toBeGreaterThan(0); // the first of this process was ahead of it in Redis's line
      expect(localsBefore).toBeLessThanOrEqual(COHORT_BOUND + 1);
    } finally {
      await closeLockApp(other);
    }
  });

  // Found by an outside review: in the moment between a pass and its new holder's start, a by-token
  // call with the token the store holds the lease under went to Redis and freed the new holder's lease.
  it.each(['unlock', 'expire'] as const)(
    'refuses %s by the tenure token in the same tick as the pass: the new holder keeps the lock',
    async (call) => {
      const other = await bootLockModule({ redis: server().url });
      try {
        const key = uniqueKey(`tenure-token-${call}`);
        const { first, second } = await holderAndWaiter(app(), key);
        const released = first.unlock(); // passes to `second` here, without a command
        const answer =
          call === 'unlock'
            ? await app().locks.unlock(key, first.token)
            : await app().locks.expire(key, first.token, 30);
        await released;
        const passed = await second;
        await delay(60);

        expect(answer).toBe(false);
        expect(await other.locks.tryLock(key)).toBeNull();
        expect(passed.validity).toBeGreaterThan(1_000);
        // A caller may not ask with that token again either: the store would answer "yours already".
        await expect(app().locks.tryLock(key, { token: first.token })).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
          argument: 'token',
        });
        await passed.unlock();
      } finally {
        await closeLockApp(other);
      }
    },
  );

  // Found by an outside review: a shorter expire() whose answer was lost (Redis frozen past the command
  // timeout, then applying it) lowered the holder's validity, but its pass gave the next holder the
  // validity of the lease before it.
  it('gives the next holder no more validity than its predecessor had, after a shorter expire() whose answer was lost', async () => {
    const frozen = await bootLockModule({ redis: server().url, commandTimeout: 100 });
    try {
      const key = uniqueKey('shortened');
      const first = frozen.locks.lock(key, { ttl: 9_000 });
      const second = frozen.locks.lock(key, { ttl: 9_000, timeout: 10_000 });
      const holder = await first;
      await holder.expire(9_000); // the extend script is cached
      server().pause();
      const shortened = holder.expire(4_000);
      await expect(shortened).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
      server().resume();
      await until(
        'Redis applied the shorter expire',
        async () => (await redis().pttl(store().keysOf(lockKind, key)[0])) <= 4_000,
      );
      const before = holder.validity;

      await holder.unlock();
      const passed = await second;
      expect(passed.validity).toBeLessThanOrEqual(before);
      expect(passed.validity).toBeLessThanOrEqual(await redis().pttl(store().keysOf(lockKind, key)[0]));
      await passed.unlock();
    } finally {
      server().resume();
      await closeLockApp(frozen);
    }
  });

  // Found by an outside review: a permit passed inside the process admitted its new holder beyond its
  // own limit, another process holding a permit under a higher limit meanwhile. Permits go through Redis.
  it('admits nobody beyond its own limit: a released permit is not passed to a waiter of a lower limit', async () => {
    const other = await bootLockModule({ redis: server().url });
    try {
      const name = uniqueKey('mixed-limits');
      const holder = await app().semaphores.acquire(name, 1);
      const higher = await other.semaphores.acquire(name, 2); // 2 held: within its own limit
      const waiter = app().semaphores.acquire(name, 1, { timeout: 5_000 });
      await delay(50);

      await holder.release();
      const early = await Promise.race([waiter, delay(300).then(() => null)]);
      expect(early).toBeNull();
      await higher.release();
      await (await waiter).release();
    } finally {
      await closeLockApp(other);
    }
  });

  it('frees the key within its ttl when the process dies in the middle of a run of passes', async () => {
    const key = uniqueKey('killed-cohort');
    const ttl = 1_000;
    const { child } = await startWorker<{ sections: number }>('local-passes-until-killed', [server().url, key, ttl]);
    expect(await app().locks.isLocked(key)).toBe(true);
    await killWorker(child);
    const killedAt = performance.now();
    const lock = await app().locks.lock(key, { timeout: 5_000 });
    const after = performance.now() - killedAt;

    // Within its ttl; and when a waiter of the dead process stood first in Redis's line, the lock
    // handed to it comes back once that handover lease (its ttl here) runs out.
    expect(after).toBeLessThan(2 * ttl + 500);
    await lock.unlock();
  });

  async function untilInLine(key: string, waiters: number): Promise<void> {
    const deadline = performance.now() + 10_000;
    while ((await redis().zcard(store().keysOf(lockKind, key)[2])) < waiters) {
      if (performance.now() > deadline) throw new Error(`${waiters} waiters never stood in line for ${key}`);
      await delay(10);
    }
  }
});
