import { describe, expect, it } from '@jest/globals';
import { Injectable } from '@nestjs/common';
import { Redis } from 'ioredis';
import { type Lock, LockBackendError, WithLock } from 'nest-lock';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
// A value import, so that `design:returntype` names Observable and the lock is taken on subscription.
import { interval, map, Observable } from 'rxjs';
import { bootLockModule, closeLockApp, uniqueKey, useLockApp, useLockApps } from './support/lock-app.js';
import { freePort, RedisServer, useRedisClient, useRedisServer } from './support/redis-server.js';
import { until } from './support/timing.js';

/** Short, so that a frozen server makes attempts time out (and be retried) quickly. */
const COMMAND_TIMEOUT = 200;

@Injectable()
class PriceFeed {
  /** Waits long for its lock: only the unsubscribe may end the wait. */
  @WithLock('feed:{0}', { timeout: 10_000 })
  prices(sku: string): Observable<string> {
    return interval(50).pipe(map((tick) => `${sku}@${tick}`));
  }
}

/**
 * Whether the lease is given back within `ms`. A lease that a late attempt took and nobody released stays
 * for its whole ttl (30 s here), so `ms` only has to cover a release still on its way.
 */
async function freedWithin(isHeld: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  for (;;) {
    if (!(await isHeld())) return true;
    if (performance.now() >= deadline) return false;
    await delay(50);
  }
}

/** How many replies of `prefix` (READONLY, BUSY, …) the server has sent since it started (INFO errorstats). */
async function errorCount(redis: Redis, prefix: string): Promise<number> {
  const stats = await redis.info('errorstats');
  return Number(new RegExp(`^errorstat_${prefix}:count=(\\d+)`, 'm').exec(stats)?.[1] ?? 0);
}

/**
 * A wait that ends by abort after an attempt whose reply was lost must send the compensating release
 * (issue 7, defect 3). The server is frozen (SIGSTOP) so that attempts time out on the client while the
 * server still has them in its socket buffer; on SIGCONT it applies them, and only a release sent after
 * them on the same connection can give the key back.
 */
describe('a wait that ends after an attempt whose reply was lost', () => {
  const app = useLockApp('redis', { commandTimeout: COMMAND_TIMEOUT }, [PriceFeed]);
  const locks = () => app().locks;
  const semaphores = () => app().semaphores;

  /** Freezes Redis, runs `during` (which starts a wait and ends it), then thaws Redis. */
  async function withRedisFrozen(during: () => Promise<void>): Promise<void> {
    app().server!.pause();
    try {
      await during();
    } finally {
      app().server!.resume();
    }
  }

  it('leaves no lock behind when the wait is aborted by its AbortSignal', async () => {
    const key = uniqueKey();
    const controller = new AbortController();
    const reason = new Error('the client went away');

    await withRedisFrozen(async () => {
      const waiting = locks().lock(key, { timeout: 10_000, ttl: 30_000, signal: controller.signal });
      // Several attempts have timed out by now; the deadline is far away.
      await delay(3 * COMMAND_TIMEOUT + 100);
      controller.abort(reason);
      await expect(waiting).rejects.toBe(reason);
    });

    // Sent on the same connection after the late attempts, so the server has applied them when it answers.
    await locks().isLocked(key);
    expect(await freedWithin(() => locks().isLocked(key), 1_000)).toBe(true);
    const next = await locks().lock(key, { timeout: 0 });
    expect(await next.unlock()).toBe(true);
  });

  it('leaves no permit behind when the wait for a permit is aborted by its AbortSignal', async () => {
    const name = uniqueKey('sem');
    const controller = new AbortController();

    await withRedisFrozen(async () => {
      const waiting = semaphores().acquire(name, 1, { timeout: 10_000, ttl: 30_000, signal: controller.signal });
      await delay(3 * COMMAND_TIMEOUT + 100);
      controller.abort(new Error('the client went away'));
      await expect(waiting).rejects.toThrow('the client went away');
    });

    await semaphores().count(name);
    expect(await freedWithin(async () => (await semaphores().count(name)) > 0, 1_000)).toBe(true);
    const next = await semaphores().acquire(name, 1, { timeout: 0 });
    expect(await next.release()).toBe(true);
  });

  it('leaves no lock behind when an Observable of a @WithLock method is unsubscribed while it waits', async () => {
    const sku = uniqueKey('sku');
    const feed = app().module.get(PriceFeed);

    await withRedisFrozen(async () => {
      const subscription = feed.prices(sku).subscribe({ error: () => undefined });
      await delay(3 * COMMAND_TIMEOUT + 100);
      subscription.unsubscribe();
      // The attempt in flight times out too, and the wait ends, before the server wakes up.
      await delay(2 * COMMAND_TIMEOUT + 100);
    });

    await locks().isLocked(`feed:${sku}`);
    expect(await freedWithin(() => locks().isLocked(`feed:${sku}`), 1_000)).toBe(true);
    const next = await locks().lock(`feed:${sku}`, { timeout: 0 });
    expect(await next.unlock()).toBe(true);
  });

  it('leaves no lock behind when the wait ends at its deadline (the path that already releases)', async () => {
    const key = uniqueKey();

    await withRedisFrozen(async () => {
      const error = await locks()
        .lock(key, { timeout: 3 * COMMAND_TIMEOUT, ttl: 30_000 })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockBackendError);
    });

    await locks().isLocked(key);
    expect(await freedWithin(() => locks().isLocked(key), 1_000)).toBe(true);
  });
});

/**
 * A reply error that retrying cannot fix rejects at once with BACKEND_ERROR, naming the key and the
 * server's message; transient ones are retried until the deadline like an outage (issue 7, defect 4).
 */
describe('reply errors from Redis', () => {
  const app = useLockApp('redis', { commandTimeout: COMMAND_TIMEOUT });
  const server = () => app().server!;
  /** A plain client beside the library, to put values of other types at its keys. */
  const redis = useRedisClient(server);

  describe('that retrying cannot fix', () => {
    it('rejects lock() at once with BACKEND_ERROR when a hash sits at the lock key', async () => {
      const key = uniqueKey('order');
      await redis().hset(`lock:{${key}}`, 'owner', 'someone else');
      const started = performance.now();

      const error = await app()
        .locks.lock(key, { timeout: 5_000 })
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(LockBackendError);
      expect(error).toMatchObject({ code: 'BACKEND_ERROR', key });
      expect((error as Error).message).toContain(key);
      expect((error as Error).message).toContain('WRONGTYPE');
      expect(performance.now() - started).toBeLessThan(2_500);
      expect(await redis().hget(`lock:{${key}}`, 'owner')).toBe('someone else');
    });

    it('rejects acquire() at once with BACKEND_ERROR when a string sits at the semaphore key', async () => {
      const name = uniqueKey('reports');
      await redis().set(`lock:sem:{${name}}`, 'not a sorted set');
      const started = performance.now();

      const error = await app()
        .semaphores.acquire(name, 2, { timeout: 5_000 })
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(LockBackendError);
      expect(error).toMatchObject({ code: 'BACKEND_ERROR', key: name });
      expect((error as Error).message).toContain(name);
      expect((error as Error).message).toContain('WRONGTYPE');
      expect(performance.now() - started).toBeLessThan(2_500);
      expect(await redis().get(`lock:sem:{${name}}`)).toBe('not a sorted set');
    });

    it('reports the same error with BACKEND_ERROR from single commands (unlock, expire, count)', async () => {
      const key = uniqueKey('order');
      const name = uniqueKey('reports');
      await redis().hset(`lock:{${key}}`, 'owner', 'someone else');
      await redis().set(`lock:sem:{${name}}`, 'not a sorted set');

      const codes = {
        unlock: await app()
          .locks.unlock(key, 'token')
          .catch((e: { code?: string }) => e.code),
        expire: await app()
          .locks.expire(key, 'token', 1_000)
          .catch((e: { code?: string }) => e.code),
        count: await app()
          .semaphores.count(name)
          .catch((e: { code?: string }) => e.code),
      };

      expect(codes).toEqual({ unlock: 'BACKEND_ERROR', expire: 'BACKEND_ERROR', count: 'BACKEND_ERROR' });
    });

    it('rejects at once with BACKEND_MISCONFIGURED when the ACL user may not touch the lock key (NOPERM)', async () => {
      await redis().acl('SETUSER', 'orders-only', 'on', '>secret', '~order:*', '&*', '+@all');
      const limited = await bootLockModule({
        redis: `redis://orders-only:secret@127.0.0.1:${server().port}`,
        commandTimeout: COMMAND_TIMEOUT,
      });
      try {
        const key = uniqueKey('order');
        const started = performance.now();

        const error = await limited.locks.lock(key, { timeout: 3_000 }).catch((e: unknown) => e);

        expect(error).toMatchObject({ code: 'BACKEND_MISCONFIGURED', key });
        expect((error as Error).message).toContain('NOPERM');
        expect(performance.now() - started).toBeLessThan(2_500);
      } finally {
        await closeLockApp(limited);
      }
    });
  });

  describe('that are transient', () => {
    it('retries through BUSY (a slow script) and takes the lock once the server answers again', async () => {
      const key = uniqueKey('order');
      await redis().config('SET', 'busy-reply-threshold', '100');
      const runner = new Redis(server().url);
      const killer = new Redis(server().url);
      // Connected before the server turns busy: a connection whose ready check meets BUSY is not usable.
      await Promise.all([once(runner, 'ready'), once(killer, 'ready')]);
      try {
        const slowScript = runner.eval('while true do end', 0).catch((e: unknown) => e);
        // Proof that the server is answering BUSY now (past the threshold), not just slowly.
        let probe = '';
        await until('the server to answer BUSY', async () => {
          probe = String(await killer.set('probe', '1').catch((e: unknown) => e));
          return probe !== 'OK';
        });
        expect(probe).toContain('BUSY');

        const waiting = app().locks.lock(key, { timeout: 5_000 });
        await delay(500);
        await killer.script('KILL');
        await slowScript;

        const lock = await waiting;
        expect(lock.elapsed).toBeGreaterThan(0);
        expect(await lock.unlock()).toBe(true);
      } finally {
        // Whatever happened above, the slow script must not outlive this test.
        for (let tries = 0; tries < 50; tries++) {
          const answer = String(await killer.script('KILL').catch((e: unknown) => e));
          if (answer.includes('NOTBUSY')) break;
          await delay(20);
        }
        runner.disconnect();
        killer.disconnect();
        await redis().config('SET', 'busy-reply-threshold', '5000');
      }
    });

    it('retries through READONLY (the server became a replica) and takes the lock once it is a master again', async () => {
      const key = uniqueKey('order');
      // A master that nothing listens for: the server stays a read-only replica, its data kept.
      await redis().replicaof('127.0.0.1', String(await freePort()));
      try {
        expect(
          String(
            await redis()
              .set('probe', '1')
              .catch((e: unknown) => e),
          ),
        ).toContain('READONLY');

        const refusedBefore = await errorCount(redis(), 'READONLY');
        const waiting = app().locks.lock(key, { timeout: 5_000 });
        // Refused twice — its one-command try, then the first attempt of its wait — it waits on, to retry:
        // it takes the key only if it retries. (After the first refusal alone, the wait's first attempt
        // may still be on its way, and find the server a master again.)
        await until(
          'two attempts refused with READONLY',
          async () => (await errorCount(redis(), 'READONLY')) >= refusedBefore + 2,
        );
        await redis().replicaof('NO', 'ONE');

        const lock = await waiting;
        expect(lock.elapsed).toBeGreaterThan(0);
        expect(await lock.unlock()).toBe(true);
      } finally {
        await redis().replicaof('NO', 'ONE');
      }
    });

    it('reports a stopped server as BACKEND_UNAVAILABLE within the timeout, not BACKEND_ERROR', async () => {
      const stopped = await RedisServer.start();
      const unreachable = await bootLockModule({ redis: stopped.url, commandTimeout: COMMAND_TIMEOUT });
      await stopped.stop();
      try {
        const started = performance.now();
        const error = await unreachable.locks.lock(uniqueKey(), { timeout: 500 }).catch((e: unknown) => e);

        expect(error).toBeInstanceOf(LockBackendError);
        expect(error).toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
        expect(performance.now() - started).toBeGreaterThanOrEqual(450);
        expect(performance.now() - started).toBeLessThan(500 + 2_000);
      } finally {
        await closeLockApp(unreachable);
      }
    });
  });
});

/**
 * A single attempt (`tryLock`, `timeout: 0`) that Redis does not answer fails after that one attempt: its
 * lost command is undone by a release sent after it, and no second attempt follows (an outside review
 * saw two or three commands, and two or three command timeouts, for one attempt).
 */
describe('one attempt on a frozen Redis', () => {
  const app = useLockApp('redis', { commandTimeout: COMMAND_TIMEOUT });
  const admin = useRedisClient(() => app().server!);

  it('sends one attempt, rejects with BACKEND_UNAVAILABLE and leaves nothing held', async () => {
    const [key, first, second] = [uniqueKey('one-try'), uniqueKey('one-try-a'), uniqueKey('one-try-b')];
    const locks = app().locks;
    await (await locks.lock([first, second])).unlock(); // the scripts are cached
    // What the module's connections send (not what runs inside scripts): one attempt is a lock's
    // one-command `SET NX`, or its step for several keys (`EVALSHA`); undoing one is an `EVAL`.
    const monitor = await admin().monitor();
    const sent: string[] = [];
    monitor.on('monitor', (_time: string, [command]: string[], source: string) => {
      if (!source.startsWith('lua') && command !== 'info' && command !== 'exists') sent.push(command);
    });
    const outcomes: unknown[] = [];
    app().server!.pause();
    try {
      for (const call of [
        () => locks.tryLock(key),
        () => locks.lock(key, { timeout: 0 }),
        () => locks.withLock(key, () => 'ran', { timeout: 0 }),
        () => locks.tryLock([first, second]),
      ]) {
        outcomes.push(await call().catch((error: unknown) => error));
      }
    } finally {
      app().server!.resume();
    }

    for (const outcome of outcomes) {
      expect(outcome).toBeInstanceOf(LockBackendError);
      expect(outcome).toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    }
    const held = async (each: string) => (await admin().exists(`lock:{${each}}`)) > 0; // no command of the module
    for (const each of [key, first, second]) expect(await freedWithin(() => held(each), 2_000)).toBe(true);
    monitor.disconnect();
    // One attempt per call; each followed by its give-back (and that, unanswered too, by its retries).
    expect(sent.filter((command) => command !== 'eval')).toEqual(['set', 'set', 'set', 'evalsha']);
    expect(sent.filter((command) => command === 'eval').length).toBeGreaterThanOrEqual(5); // one a key
  });
});

describe('await using, with a release that fails while Redis is frozen', () => {
  const server = useRedisServer();

  it('logs the failure for every key of a lock on several keys, as for one key', async () => {
    const warnings: string[] = [];
    const logger = { log: () => undefined, error: () => undefined, warn: (line: string) => void warnings.push(line) };
    const app = await bootLockModule({ redis: server().url, commandTimeout: COMMAND_TIMEOUT, logger });
    try {
      const [single, first, second] = [uniqueKey('dispose'), uniqueKey('dispose-a'), uniqueKey('dispose-b')];
      const one = await app.locks.lock(single);
      const several = await app.locks.lock([first, second]);
      server().pause();
      try {
        await one[Symbol.asyncDispose]();
        await several[Symbol.asyncDispose]();
      } finally {
        server().resume();
      }
      // Besides the outage itself (logged once when commands stop being answered).
      expect(warnings.filter((line) => !line.startsWith('Redis is unreachable since'))).toEqual(
        [single, ...several.keys].map((key) => expect.stringContaining(`Could not release lock "${key}"`)),
      );
    } finally {
      await closeLockApp(app);
    }
  });
});

/**
 * A release that fails during a short outage is tried again until the lease would have run out, so the
 * key comes back soon after Redis does, not a whole ttl later (found by the fault suite).
 */
describe('a release that fails while Redis is away', () => {
  it('is retried in the background, so the lock and the permit come back soon after Redis does', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nest-lock-release-'));
    const server = await RedisServer.start({ args: ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir] });
    const app = await bootLockModule({ redis: server.url, commandTimeout: COMMAND_TIMEOUT });
    const key = uniqueKey('retried-release');
    try {
      await app.semaphores.withPermit(key, 1, () =>
        app.locks.withLock(key, async () => {
          await server.kill(); // the releases that follow fail: nothing answers
        }),
      );
      await server.restart(); // AOF: the lock and the permit are still there
      const restartedAt = performance.now();

      // Until the module's client has reconnected, an answer is an error: count that as still held.
      const held = (ask: () => Promise<boolean>) => () => ask().catch(() => true);
      expect(
        await freedWithin(
          held(() => app.locks.isLocked(key)),
          5_000,
        ),
      ).toBe(true);
      expect(
        await freedWithin(
          held(async () => (await app.semaphores.count(key)) > 0),
          5_000,
        ),
      ).toBe(true);
      // The default ttl is 30 s: only a retried release frees them this soon.
      expect(performance.now() - restartedAt).toBeLessThan(5_000);
    } finally {
      await closeLockApp(app);
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/*
 * Found by an outside review: the background retry of a release that failed during a freeze must not
 * delete a lock taken since with the same (caller's) token.
 */
describe('a custom token reused for a new lock() right after an unlock() that failed during a freeze', () => {
  const apps = useLockApps('redis', 2, { commandTimeout: 150 });
  const frozen = () => apps()[0].server!;
  /** A plain client beside the library, to empty the script cache. */
  const admin = useRedisClient(frozen);

  /**
   * Locks with a token of the caller's, freezes Redis, unlocks (which fails), and `lockAfterMs` later locks
   * again with the same token; Redis resumes 250 ms after that. Then another application tries the key
   * every 100 ms for 2.5 s: the old release is retried for up to its lease (10 s), backing off up to 1 s.
   * Each intrusion is the validity (ms) the new lock still claimed while the other application held its key.
   */
  async function reuseTokenAfterAFailedUnlock(lockAfterMs: number) {
    const [owner, other] = apps();
    const key = uniqueKey('job');
    const token = uniqueKey('worker');
    const first = await owner.locks.lock(key, { token, ttl: 10_000 });
    let again: Lock;
    frozen().pause();
    try {
      const unlocked = await first.unlock().then(String, (error: { code?: string }) => error.code);
      expect(unlocked).toBe('BACKEND_UNAVAILABLE');
      await delay(lockAfterMs);
      const resumed = delay(250).then(() => frozen().resume());
      again = await owner.locks.lock(key, { token, ttl: 10_000, timeout: 5_000 });
      await resumed;
    } finally {
      frozen().resume();
    }

    const intrusions: number[] = [];
    for (let i = 0; i < 25; i++) {
      await delay(100);
      const intruder = await other.locks.tryLock(key);
      if (intruder === null) continue;
      if (again.validity > 0) intrusions.push(Math.round(again.validity));
      await intruder.unlock();
    }
    const validityLeft = again.validity > 0;
    await again.unlock();
    return { intrusions: intrusions.length, firstIntrusionAtValidity: intrusions[0], validityLeft };
  }

  const NO_INTRUSION = { intrusions: 0, firstIntrusionAtValidity: undefined, validityLeft: true };
  const warmScripts = async () => (await apps()[0].locks.lock(uniqueKey('warm'))).unlock();

  it('scripts cached, lock() at once: the background retry of the old release does not delete the new lock', async () => {
    await warmScripts();
    expect(await reuseTokenAfterAFailedUnlock(0)).toEqual(NO_INTRUSION);
  });

  it('scripts cached, lock() 100 ms later, while a retry of the old release is in flight: it does not delete the new lock', async () => {
    await warmScripts();
    expect(await reuseTokenAfterAFailedUnlock(100)).toEqual(NO_INTRUSION);
  });

  it("release script not cached yet (as in the review's repro): the old release does not delete the new lock", async () => {
    // An empty script cache (a fresh server, a restart, SCRIPT FLUSH): the release goes out as EVALSHA, is
    // answered NOSCRIPT only once Redis resumes, and would be sent again as EVAL after the new lock was taken.
    await admin().script('FLUSH');
    expect(await reuseTokenAfterAFailedUnlock(0)).toEqual(NO_INTRUSION);
  });
});
