import { describe, expect, it } from '@jest/globals';
import { InvalidArgumentError, type Lock, LockTimeoutError } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { deferred } from './support/deferred.js';
import { STORE_KINDS, uniqueKey, useLockApp } from './support/lock-app.js';
import { lockKeyOf, untilWaitingAt } from './support/redis-keys.js';

/** The LockService contract, on every store: the same tests, the same expectations. */
describe.each(STORE_KINDS)('LockService on the %s store', (kind) => {
  const app = useLockApp(kind);

  describe('lock and unlock', () => {
    it('grants a free key at once, with elapsed exactly 0', async () => {
      const key = uniqueKey();
      const lock = await app().locks.lock(key);

      expect(lock.key).toBe(key);
      expect(lock.elapsed).toBe(0);
      expect(await app().locks.isLocked(key)).toBe(true);
      expect(await lock.unlock()).toBe(true);
      expect(await app().locks.isLocked(key)).toBe(false);
    });

    it('draws a fresh 128-bit token for every acquisition', async () => {
      const key = uniqueKey();
      const tokens = new Set<string>();
      for (let i = 0; i < 20; i++) {
        const lock = await app().locks.lock(key);
        tokens.add(lock.token);
        expect(Buffer.from(lock.token, 'base64url').length).toBeGreaterThanOrEqual(16);
        await lock.unlock();
      }
      expect(tokens.size).toBe(20);
    });

    it('uses a token the caller supplies', async () => {
      const key = uniqueKey();
      const lock = await app().locks.lock(key, { token: 'job-7' });

      expect(lock.token).toBe('job-7');
      expect(await app().locks.unlock(key, 'job-7')).toBe(true);
    });

    it('answers a second unlock() of the same Lock with false and leaves the next owner alone', async () => {
      const key = uniqueKey();
      const first = await app().locks.lock(key);
      expect(await first.unlock()).toBe(true);
      const second = await app().locks.lock(key);

      expect(await first.unlock()).toBe(false);
      expect(await app().locks.isLocked(key)).toBe(true);
      expect(await second.unlock()).toBe(true);
    });

    it('lets an owner token release the lock through LockService.unlock (e.g. from another process)', async () => {
      const key = uniqueKey();
      const lock = await app().locks.lock(key);

      expect(await app().locks.unlock(key, 'somebody-else')).toBe(false);
      expect(await app().locks.unlock(key, lock.token)).toBe(true);
      expect(await app().locks.isLocked(key)).toBe(false);
    });
  });

  describe('owner safety', () => {
    it('never lets a holder whose lease lapsed unlock or extend the next owner', async () => {
      const key = uniqueKey();
      const a = await app().locks.lock(key, { ttl: 100 });
      await delay(150);
      const b = await app().locks.lock(key, { timeout: 0 });

      expect(await a.unlock()).toBe(false);
      expect(await a.expire()).toBe(false);
      expect(await app().locks.isLocked(key)).toBe(true);
      expect(await b.unlock()).toBe(true);
      expect(await b.unlock()).toBe(false);
    });

    it('frees a lease that is not renewed after its ttl, so a vanished holder never deadlocks', async () => {
      const key = uniqueKey();
      await app().locks.lock(key, { ttl: 100 });

      const next = await app().locks.lock(key, { timeout: 2_000 });
      expect(next.elapsed).toBeGreaterThan(50);
      await next.unlock();
    });
  });

  describe('expire', () => {
    it('lets the holder extend the lease past its first ttl', async () => {
      const key = uniqueKey();
      const lock = await app().locks.lock(key, { ttl: 200 });
      await delay(100);

      expect(await lock.expire(1_000)).toBe(true);
      await delay(250);
      expect(await app().locks.isLocked(key)).toBe(true);
      expect(await app().locks.tryLock(key)).toBeNull();
      expect(await lock.unlock()).toBe(true);
    });

    it('renews with the ttl the lock was taken with when none is given', async () => {
      const key = uniqueKey();
      const lock = await app().locks.lock(key, { ttl: 200 });
      await delay(120);

      expect(await lock.expire()).toBe(true);
      await delay(120);
      expect(await app().locks.isLocked(key)).toBe(true);
      await lock.unlock();
    });

    it('refuses a wrong token: it can neither extend nor unlock', async () => {
      const key = uniqueKey();
      const lock = await app().locks.lock(key, { ttl: 200 });

      expect(await app().locks.expire(key, 'not-the-owner', 10_000)).toBe(false);
      expect(await app().locks.unlock(key, 'not-the-owner')).toBe(false);
      await delay(250);
      expect(await app().locks.isLocked(key)).toBe(false);
      expect(await lock.unlock()).toBe(false);
    });

    it('extends through LockService.expire with the owner token', async () => {
      const key = uniqueKey();
      const lock = await app().locks.lock(key, { ttl: 150 });

      expect(await app().locks.expire(key, lock.token, 1_000)).toBe(true);
      await delay(200);
      expect(await app().locks.isLocked(key)).toBe(true);
      await lock.unlock();
    });

    it('returns false once the lock was unlocked', async () => {
      const lock = await app().locks.lock(uniqueKey());
      await lock.unlock();

      expect(await lock.expire()).toBe(false);
    });
  });

  describe('waiting', () => {
    it('rejects at once with LOCK_TIMEOUT when timeout is 0 and the key is held', async () => {
      const key = uniqueKey();
      const holder = await app().locks.lock(key);
      const started = performance.now();

      const error = await app()
        .locks.lock(key, { timeout: 0 })
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(LockTimeoutError);
      expect(error).toMatchObject({ code: 'LOCK_TIMEOUT', key });
      expect(performance.now() - started).toBeLessThan(250);
      await holder.unlock();
    });

    it('gives up after the timeout, not before and not much later', async () => {
      const key = uniqueKey();
      const holder = await app().locks.lock(key);
      const started = performance.now();

      const error = await app()
        .locks.lock(key, { timeout: 300 })
        .catch((e: unknown) => e);
      const waited = performance.now() - started;

      expect(error).toBeInstanceOf(LockTimeoutError);
      expect(waited).toBeGreaterThanOrEqual(300);
      expect(waited).toBeLessThan(2_000);
      expect((error as LockTimeoutError).waited).toBeGreaterThanOrEqual(300);
      await holder.unlock();
    });

    it('reports how long a contended lock waited in elapsed', async () => {
      const key = uniqueKey();
      const holder = await app().locks.lock(key);
      setTimeout(() => void holder.unlock(), 200);

      const lock = await app().locks.lock(key, { timeout: 2_000 });

      expect(lock.elapsed).toBeGreaterThanOrEqual(150);
      expect(lock.elapsed).toBeLessThan(1_000);
      await lock.unlock();
    });

    it('tryLock makes one attempt: the lock when free, null when held', async () => {
      const key = uniqueKey();
      const lock = await app().locks.tryLock(key);
      expect(lock).not.toBeNull();

      expect(await app().locks.tryLock(key, { timeout: 5_000 })).toBeNull();
      await lock!.unlock();
    });

    it('hands a released key to one waiter at a time', async () => {
      const key = uniqueKey();
      let inside = 0;
      let maxInside = 0;
      await Promise.all(
        Array.from({ length: 10 }, () =>
          app().locks.withLock(
            key,
            async () => {
              maxInside = Math.max(maxInside, ++inside);
              await delay(5);
              inside--;
            },
            { timeout: 10_000 },
          ),
        ),
      );
      expect(maxInside).toBe(1);
    });
  });

  describe('AbortSignal', () => {
    it('rejects a wait promptly with the signal reason and holds nothing afterwards', async () => {
      const key = uniqueKey();
      const holder = await app().locks.lock(key);
      const controller = new AbortController();
      const reason = new Error('client went away');
      const started = performance.now();
      const waiting = app().locks.lock(key, { timeout: 10_000, signal: controller.signal });
      await untilWaitingAt(app().server?.url, lockKeyOf(key), { orAfterMs: 100 });
      controller.abort(reason);

      await expect(waiting).rejects.toBe(reason);
      expect(performance.now() - started).toBeLessThan(1_000);

      await holder.unlock();
      expect(await app().locks.isLocked(key)).toBe(false);
    });

    it('rejects at once, taking nothing, when the signal is already aborted', async () => {
      const key = uniqueKey();
      const signal = AbortSignal.abort(new Error('too late'));

      await expect(app().locks.lock(key, { signal })).rejects.toThrow('too late');
      expect(await app().locks.isLocked(key)).toBe(false);
    });
  });

  describe('withLock and await using', () => {
    it('runs the function under the lock and unlocks afterwards', async () => {
      const key = uniqueKey();
      const result = await app().locks.withLock(key, async (lock: Lock) => {
        expect(await app().locks.isLocked(key)).toBe(true);
        return `done by ${lock.key}`;
      });

      expect(result).toBe(`done by ${key}`);
      expect(await app().locks.isLocked(key)).toBe(false);
    });

    it("passes the function's own error through unchanged and still unlocks", async () => {
      class OrderError extends Error {}
      const key = uniqueKey();
      const thrown = new OrderError('order 42 is closed');

      await expect(
        app().locks.withLock(key, () => {
          throw thrown;
        }),
      ).rejects.toBe(thrown);
      expect(await app().locks.isLocked(key)).toBe(false);
    });

    it('runs a nested withLock on the same key at once with the same lock, while another chain waits', async () => {
      const key = uniqueKey();
      const order: string[] = [];
      const outerHolds = deferred();
      const finishOuter = deferred();

      const outer = app().locks.withLock(key, async (outerLock) => {
        await app().locks.withLock(key, async (inner) => {
          order.push('nested');
          // The same lease, seen through the nested holder's own share: one fence, drawn by either.
          expect({ token: inner.token, fence: await inner.fence() }).toEqual({
            token: outerLock.token,
            fence: await outerLock.fence(),
          });
        });
        outerHolds.resolve();
        await finishOuter.promise;
        order.push('outer done');
        return outerLock.token;
      });
      await outerHolds.promise;
      const other = app().locks.withLock(key, (lock) => (order.push('other chain'), lock.token), { timeout: 5_000 });
      await untilWaitingAt(app().server?.url, lockKeyOf(key), { orAfterMs: 50 });
      finishOuter.resolve();
      const [outerToken, otherToken] = await Promise.all([outer, other]);

      expect(order).toEqual(['nested', 'outer done', 'other chain']);
      expect(otherToken).not.toBe(outerToken);
    });

    it('does not let a continuation that outlives withLock reuse the released lock', async () => {
      const key = uniqueKey();
      const later = deferred<unknown>();

      await app().locks.withLock(key, () => {
        setTimeout(() => {
          const attempt = app().locks.withLock(key, () => 'ran as if it held the lock', { timeout: 0 });
          later.resolve(attempt.catch((error: unknown) => error));
        }, 20);
      });
      const holder = await app().locks.lock(key);

      expect(await later.promise).toBeInstanceOf(LockTimeoutError);
      await holder.unlock();
    });

    it('unlocks at the end of an `await using` block', async () => {
      const key = uniqueKey();
      {
        await using lock = await app().locks.lock(key);
        expect(lock.elapsed).toBe(0);
        expect(await app().locks.isLocked(key)).toBe(true);
      }
      expect(await app().locks.isLocked(key)).toBe(false);
    });
  });

  describe('bad input', () => {
    const invalidCalls: [string, (key: string) => Promise<unknown>][] = [
      ["key ''", () => app().locks.lock('')],
      ['a non-string key', () => app().locks.lock(42 as unknown as string)],
      ['ttl 0', (key) => app().locks.lock(key, { ttl: 0 })],
      ['ttl -1', (key) => app().locks.lock(key, { ttl: -1 })],
      ['ttl NaN', (key) => app().locks.lock(key, { ttl: Number.NaN })],
      ['ttl Infinity', (key) => app().locks.lock(key, { ttl: Number.POSITIVE_INFINITY })],
      ['timeout -1', (key) => app().locks.lock(key, { timeout: -1 })],
      ['ratio 0.5', (key) => app().locks.lock(key, { ratio: 0.5 })],
      ['step 0', (key) => app().locks.tryLock(key, { step: 0 })],
      ['an empty token', (key) => app().locks.lock(key, { token: '' })],
      ['a signal that is no AbortSignal', (key) => app().locks.lock(key, { signal: {} as AbortSignal })],
      ['unlock with an empty token', (key) => app().locks.unlock(key, '')],
      ['expire with ttl 0', (key) => app().locks.expire(key, 'token', 0)],
      ["isLocked('')", () => app().locks.isLocked('')],
    ];

    it.each(invalidCalls)('rejects %s with INVALID_ARGUMENT, never a synchronous throw', async (_, call) => {
      let pending: Promise<unknown> | undefined;
      expect(() => (pending = call(uniqueKey()))).not.toThrow();

      const error = await pending!.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    });

    it('rejects a bad ttl given to Lock.expire() and keeps the lock', async () => {
      const lock = await app().locks.lock(uniqueKey());

      await expect(lock.expire(Number.NaN)).rejects.toBeInstanceOf(InvalidArgumentError);
      expect(await lock.unlock()).toBe(true);
    });
  });
});
