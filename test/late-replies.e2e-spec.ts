import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type LockLostError, LockTimeoutError } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { deferred } from './support/deferred.js';
import { DelayProxy } from './support/delay-proxy.js';
import { bootLockModule, closeLockApp, type LockApp, uniqueKey } from './support/lock-app.js';
import { lockKeyOf } from './support/redis-keys.js';
import { useRedisClient, useRedisServer } from './support/redis-server.js';
import { busyWait, eventually, heldAfter, until } from './support/timing.js';

/*
 * Replies that come late: Redis applied the command on time, and its answer reaches the application
 * after the lease it speaks of ran out, or after the event loop stalled, or not before the caller gave
 * up. Redis is real throughout: reached through a proxy that holds back its replies, or frozen with
 * SIGSTOP; nothing is mocked. Found by an outside review; each case failed before its fix.
 */

const server = useRedisServer();
/** A plain client beside the library, to look at what it wrote. */
const redis = useRedisClient(server);

describe('a grant whose reply arrives after its lease ran out is not handed to the caller', () => {
  let proxy: DelayProxy;
  /** Reaches Redis through the proxy: its replies can be held back. */
  let slow: LockApp;
  let fast: LockApp;

  beforeAll(async () => {
    proxy = await DelayProxy.start(server().port);
    slow = await bootLockModule({ redis: proxy.url, commandTimeout: 3_000 });
    fast = await bootLockModule({ redis: server().url });
  });
  afterAll(async () => {
    await closeLockApp(fast);
    await closeLockApp(slow);
    await proxy?.stop();
  });

  it('withLock does not run fn under it: it waits on, and runs fn only under a lease that is its own', async () => {
    const key = uniqueKey('late-grant');
    // Scripts cached, so that the next acquisition is one round trip.
    await (await slow.locks.lock(uniqueKey('warm'))).unlock();

    await proxy.setReplyDelay(600);
    const runs: object[] = [];
    let otherHolds = false;
    const outcome = slow.locks
      .withLock(
        key,
        async (lock) => {
          const { validity } = lock;
          const seen = { validity: Math.round(validity), validityLeft: validity > 0, aborted: lock.signal.aborted };
          const otherHoldsNow = otherHolds;
          const heldOnRedis = (await redis().get(lockKeyOf(key))) === lock.token;
          runs.push({ ...seen, otherHolds: otherHoldsNow, heldOnRedis });
          return 'ran';
        },
        { ttl: 200, timeout: 8_000 },
      )
      .catch((error: unknown) => error);
    // Replies after the grant's come back at once (still in order).
    setTimeout(() => void proxy.setReplyDelay(0), 150);

    // The first attempt took the key on Redis; its answer is on its way back for 600 ms, longer than the ttl.
    expect(
      await eventually(
        () => redis().exists(lockKeyOf(key)),
        (exists) => exists === 1,
        1_000,
      ),
    ).toBe(1);
    // Another owner takes the key as soon as that lease runs out on the server, and keeps it for a second.
    let otherGotIt = false;
    for (let tries = 0; tries < 100 && !otherGotIt; tries++) {
      const lock = await fast.locks.tryLock(key, { ttl: 5_000 });
      if (lock === null) {
        await delay(20);
        continue;
      }
      otherGotIt = true;
      otherHolds = true;
      await delay(1_000);
      otherHolds = false;
      await lock.unlock();
    }

    const result = await outcome;
    expect(otherGotIt).toBe(true);
    expect(result === 'ran' || result instanceof LockTimeoutError).toBe(true);
    for (const run of runs) {
      expect(run).toEqual({
        validity: expect.any(Number),
        validityLeft: true,
        aborted: false,
        otherHolds: false,
        heldOnRedis: true,
      });
    }
  });
});

describe('a lock whose grants all come back after their lease ran out', () => {
  // Found by the fourth outside review: on a free key, lock() rejected with "it is held by another
  // owner" after its whole timeout, and nobody else held it — its own grants came back too late.
  it.each(['lock', 'acquire'] as const)(
    '%s on a free key says why it timed out, and that nobody else held it',
    async (call) => {
      const proxy = await DelayProxy.start(server().port);
      const slow = await bootLockModule({ redis: proxy.url, commandTimeout: 3_000 });
      try {
        const key = uniqueKey('late-every-time');
        await (await slow.locks.lock(uniqueKey('warm'))).unlock();
        await (await slow.semaphores.acquire(uniqueKey('warm'), 1)).release();
        // Every answer comes back 80 ms late: later than a 50 ms lease leaves it valid.
        await proxy.setReplyDelay(80);
        const options = { ttl: 50, timeout: 400 };
        const outcome =
          call === 'acquire'
            ? await slow.semaphores.acquire(key, 1, options).catch((error: unknown) => error)
            : await slow.locks.lock(key, options).catch((error: unknown) => error);

        expect(outcome).toMatchObject({ code: call === 'acquire' ? 'SEMAPHORE_TIMEOUT' : 'LOCK_TIMEOUT' });
        const { message } = outcome as Error;
        expect(message).not.toMatch(/another owner|held by/);
        expect(message).toMatch(/granted, but the answer came back \d+ ms after/);
        expect((outcome as LockTimeoutError).refusal).toMatch(/given back/);
        await proxy.setReplyDelay(0);
        // Each grant was given back: the key is free.
        expect(await redis().exists(lockKeyOf(key))).toBe(0);
      } finally {
        await closeLockApp(slow);
        await proxy.stop();
      }
    },
  );
});

describe('the watchdog does not declare a lease lost while a renewal Redis applied is on its way back', () => {
  const TTL = 300;
  const STALL_MS = 250;

  /**
   * Holds `keys` with withLock (ttl 300) on an application that reaches Redis through a proxy in another
   * process adding 20 ms to every reply. Once the leases are held, the next renewal written to Redis is
   * followed at once by a 250 ms stall of the event loop (< ttl): Redis applies the renewal on time, its
   * answer waits in the socket until the stall is over.
   */
  async function holdThroughAStallAfterARenewal(keys: string[], watch: string) {
    const proxy = await DelayProxy.start(server().port, { replyDelay: 20, watch });
    const lost: LockLostError[] = [];
    const app = await bootLockModule({ redis: proxy.url, onLockLost: (error) => lost.push(error) });
    try {
      // Scripts cached: the renewal is one EVALSHA.
      const warm = await app.locks.lock(uniqueKey('warm'));
      await warm.expire();
      await warm.unlock();

      let stalls = 0;
      let armedAfter = Infinity;
      proxy.onForwarded((count) => {
        if (count <= armedAfter || stalls > 0) return;
        stalls++;
        busyWait(STALL_MS);
      });
      const allHeld = deferred();
      let held = 0;
      const seen = await Promise.all(
        keys.map((key) =>
          app.locks.withLock(
            key,
            async (lock) => {
              if (++held === keys.length) allHeld.resolve();
              await allHeld.promise;
              // Armed once the acquisitions' own commands have surely been reported.
              await delay(40);
              armedAfter = Math.min(armedAfter, proxy.forwarded);
              await delay(700);
              return {
                key,
                aborted: lock.signal.aborted,
                stillOursOnRedis: (await redis().get(lockKeyOf(key))) === lock.token,
              };
            },
            { ttl: TTL },
          ),
        ),
      );
      return { stalls, seen, lost: lost.map((error) => `${error.key}: ${error.reason}`) };
    } finally {
      await closeLockApp(app);
      await proxy.stop();
    }
  }

  it('one lease: a 250 ms stall right after its renewal was written', async () => {
    const key = uniqueKey('renewed');
    const { stalls, seen, lost } = await holdThroughAStallAfterARenewal([key], lockKeyOf(key));
    // The stall did happen, right after a renewal went out.
    expect(stalls).toBe(1);
    expect(seen).toEqual([{ key, aborted: false, stillOursOnRedis: true }]);
    expect(lost).toEqual([]);
  });

  it('fifty leases renewed in one round trip: a 250 ms stall right after the renewals were written', async () => {
    const prefix = uniqueKey('renewed-together');
    const keys = Array.from({ length: 50 }, (_, i) => `${prefix}:${i}`);
    const { stalls, seen, lost } = await holdThroughAStallAfterARenewal(keys, prefix);
    expect(stalls).toBe(1);
    const aborted = seen.filter((lease) => lease.aborted).length;
    const goneFromRedis = seen.filter((lease) => !lease.stillOursOnRedis).length;
    expect({ aborted, goneFromRedis }).toEqual({ aborted: 0, goneFromRedis: 0 });
    expect(lost).toEqual([]);
  });
});

describe('an abort while an attempt is in flight on a frozen Redis', () => {
  let app: LockApp;

  beforeAll(async () => {
    app = await bootLockModule({ redis: server().url, commandTimeout: 1_000 });
    // Scripts cached, so that an attempt is one command.
    await (await app.locks.lock(uniqueKey('warm'))).unlock();
    await (await app.semaphores.acquire(uniqueKey('warm'), 1)).release();
  });
  afterAll(async () => {
    server().resume();
    await closeLockApp(app);
  });

  /** Freezes Redis, starts the wait, aborts it 100 ms later, and resumes Redis once the call has settled. */
  async function abortWhileFrozen(start: (signal: AbortSignal) => Promise<unknown>) {
    const reason = new Error('shutting down');
    server().pause();
    try {
      const controller = new AbortController();
      const call = start(controller.signal).then(
        () => 'acquired',
        (error: unknown) => error,
      );
      await delay(100);
      const abortedAt = performance.now();
      controller.abort(reason);
      const settledWith = await call;
      return { settledWith, reason, msAfterAbort: performance.now() - abortedAt };
    } finally {
      server().resume();
    }
  }

  it('lock(): rejects with the reason well before the command timeout, and leaves nothing held', async () => {
    const key = uniqueKey('frozen');
    const { settledWith, reason, msAfterAbort } = await abortWhileFrozen((signal) =>
      app.locks.lock(key, { signal, ttl: 20_000, timeout: 10_000 }),
    );
    expect(settledWith).toBe(reason);
    expect(msAfterAbort).toBeLessThan(500);
    expect(await heldAfter(() => app.locks.isLocked(key), 3_000)).toBe(false);
  });

  it('acquire(): rejects with the reason well before the command timeout, and leaves nothing held', async () => {
    const name = uniqueKey('frozen-semaphore');
    const { settledWith, reason, msAfterAbort } = await abortWhileFrozen((signal) =>
      app.semaphores.acquire(name, 1, { signal, ttl: 20_000, timeout: 10_000 }),
    );
    expect(settledWith).toBe(reason);
    expect(msAfterAbort).toBeLessThan(500);
    expect(
      await eventually(
        () => app.semaphores.count(name),
        (count) => count === 0,
        3_000,
      ),
    ).toBe(0);
  });
});

describe('one attempt whose reply is lost with its connection (a reset, not a freeze)', () => {
  let proxy: DelayProxy;
  let app: LockApp;

  beforeAll(async () => {
    proxy = await DelayProxy.start(server().port, { watch: 'NX' });
    app = await bootLockModule({ redis: proxy.url, commandTimeout: 1_000, defaults: { ttl: 8_000 } });
  });
  afterAll(async () => {
    await closeLockApp(app);
    await proxy?.stop();
  });

  it('gives back what Redis took once the connection is back, not a whole ttl later', async () => {
    const key = uniqueKey('reset-after-take');
    await proxy.setReplyDelay(60_000); // the reply of the take never comes back
    const taken = new Promise<void>((resolve) => proxy.onForwarded(() => resolve()));
    const attempt = app.locks.tryLock(key).catch((error: unknown) => error);
    await taken;
    // Redis runs the SET NX: the key is held, by a lease nobody knows of.
    await until('the SET NX to be applied', async () => (await redis().exists(lockKeyOf(key))) === 1);
    expect(await redis().exists(lockKeyOf(key))).toBe(1);
    await proxy.setReplyDelay(0);
    await proxy.resetConnections();

    expect(await attempt).toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    // Its give-back could not go after it on the same connection: it is retried on the next one.
    expect(await heldAfter(async () => (await redis().exists(lockKeyOf(key))) === 1, 3_000)).toBe(false);
  });
});
