import { describe, expect, it } from '@jest/globals';
import { InvalidArgumentError, type Permit, SemaphoreTimeoutError } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { deferred } from './support/deferred.js';
import { STORE_KINDS, uniqueKey, useLockApp } from './support/lock-app.js';
import { semaphoreKeyOf, untilWaitingAt } from './support/redis-keys.js';

/** The SemaphoreService contract, on every store. */
describe.each(STORE_KINDS)('SemaphoreService on the %s store', (kind) => {
  const app = useLockApp(kind);

  describe('permits', () => {
    it('grants up to limit permits, then none until one is released', async () => {
      const name = uniqueKey('sem');
      const permits = [await app().semaphores.acquire(name, 2), await app().semaphores.acquire(name, 2)];

      expect(permits.map((permit) => permit.elapsed)).toEqual([0, 0]);
      expect(new Set(permits.map((permit) => permit.token)).size).toBe(2);
      expect(await app().semaphores.count(name)).toBe(2);
      expect(await app().semaphores.tryAcquire(name, 2)).toBeNull();

      expect(await permits[0].release()).toBe(true);
      expect(await app().semaphores.count(name)).toBe(1);
      const third = await app().semaphores.tryAcquire(name, 2);
      expect(third).not.toBeNull();
      await Promise.all([permits[1].release(), third!.release()]);
      expect(await app().semaphores.count(name)).toBe(0);
    });

    it('answers a second release() with false', async () => {
      const permit = await app().semaphores.acquire(uniqueKey('sem'), 1);

      expect(await permit.release()).toBe(true);
      expect(await permit.release()).toBe(false);
    });

    it('never lets more than limit callers in at once', async () => {
      const name = uniqueKey('sem');
      let inside = 0;
      let maxInside = 0;
      await Promise.all(
        Array.from({ length: 20 }, () =>
          app().semaphores.withPermit(
            name,
            3,
            async () => {
              maxInside = Math.max(maxInside, ++inside);
              await delay(5);
              inside--;
            },
            { timeout: 10_000 },
          ),
        ),
      );

      expect(maxInside).toBe(3);
      expect(await app().semaphores.count(name)).toBe(0);
    });
  });

  describe('leases', () => {
    it('takes back the permit of a holder that neither releases nor renews, after its ttl', async () => {
      const name = uniqueKey('sem');
      const lapsed = await app().semaphores.acquire(name, 1, { ttl: 100 });
      await delay(150);

      expect(await app().semaphores.count(name)).toBe(0);
      const next = await app().semaphores.acquire(name, 1, { timeout: 0 });
      expect(await lapsed.release()).toBe(false);
      expect(await lapsed.expire()).toBe(false);
      expect(await app().semaphores.count(name)).toBe(1);
      expect(await next.release()).toBe(true);
    });

    it('lets the holder extend its lease past the first ttl', async () => {
      const name = uniqueKey('sem');
      const permit = await app().semaphores.acquire(name, 1, { ttl: 200 });
      await delay(100);

      expect(await permit.expire(1_000)).toBe(true);
      await delay(200);
      expect(await app().semaphores.count(name)).toBe(1);
      expect(await app().semaphores.tryAcquire(name, 1)).toBeNull();
      await permit.release();
    });
  });

  describe('waiting', () => {
    it('rejects at once with SEMAPHORE_TIMEOUT when timeout is 0 and every permit is held', async () => {
      const name = uniqueKey('sem');
      const holder = await app().semaphores.acquire(name, 1);

      const error = await app()
        .semaphores.acquire(name, 1, { timeout: 0 })
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(SemaphoreTimeoutError);
      expect(error).toMatchObject({ code: 'SEMAPHORE_TIMEOUT', semaphore: name, limit: 1 });
      await holder.release();
    });

    it('gives up after the timeout, not before and not much later', async () => {
      const name = uniqueKey('sem');
      const holder = await app().semaphores.acquire(name, 1);
      const started = performance.now();

      await expect(app().semaphores.acquire(name, 1, { timeout: 300 })).rejects.toBeInstanceOf(SemaphoreTimeoutError);
      const waited = performance.now() - started;
      expect(waited).toBeGreaterThanOrEqual(300);
      expect(waited).toBeLessThan(2_000);
      await holder.release();
    });

    it('reports how long a contended permit waited in elapsed', async () => {
      const name = uniqueKey('sem');
      const holder = await app().semaphores.acquire(name, 1);
      setTimeout(() => void holder.release(), 200);

      const permit = await app().semaphores.acquire(name, 1, { timeout: 2_000 });
      expect(permit.elapsed).toBeGreaterThanOrEqual(150);
      expect(permit.elapsed).toBeLessThan(1_000);
      await permit.release();
    });

    it('rejects a wait promptly with the reason of an aborted signal and holds nothing', async () => {
      const name = uniqueKey('sem');
      const holder = await app().semaphores.acquire(name, 1);
      const reason = new Error('request closed');
      const controller = new AbortController();
      const waiting = app().semaphores.acquire(name, 1, { timeout: 10_000, signal: controller.signal });
      await untilWaitingAt(app().server?.url, semaphoreKeyOf(name), { orAfterMs: 100 });
      controller.abort(reason);

      await expect(waiting).rejects.toBe(reason);
      await holder.release();
      expect(await app().semaphores.count(name)).toBe(0);
    });
  });

  describe('withPermit and await using', () => {
    it("releases after the function, passing the function's own error through unchanged", async () => {
      const name = uniqueKey('sem');
      const thrown = new RangeError('report too large');

      await expect(
        app().semaphores.withPermit(name, 1, () => {
          throw thrown;
        }),
      ).rejects.toBe(thrown);
      expect(await app().semaphores.count(name)).toBe(0);
      expect(await app().semaphores.withPermit(name, 1, (permit: Permit) => permit.name)).toBe(name);
    });

    it('runs a nested withPermit of the same name at once, while another chain waits', async () => {
      const name = uniqueKey('sem');
      const order: string[] = [];
      const outerHolds = deferred();
      const finishOuter = deferred();

      const outer = app().semaphores.withPermit(name, 1, async (outerPermit) => {
        await app().semaphores.withPermit(name, 1, async (inner) => {
          order.push('nested');
          // The same lease, seen through the nested holder's own share: one fence, drawn by either.
          expect({ token: inner.token, fence: await inner.fence() }).toEqual({
            token: outerPermit.token,
            fence: await outerPermit.fence(),
          });
        });
        outerHolds.resolve();
        await finishOuter.promise;
        order.push('outer done');
      });
      await outerHolds.promise;
      const other = app().semaphores.withPermit(name, 1, () => order.push('other chain'), { timeout: 5_000 });
      await untilWaitingAt(app().server?.url, semaphoreKeyOf(name), { orAfterMs: 50 });
      finishOuter.resolve();
      await Promise.all([outer, other]);

      expect(order).toEqual(['nested', 'outer done', 'other chain']);
    });

    it('releases at the end of an `await using` block', async () => {
      const name = uniqueKey('sem');
      {
        await using permit = await app().semaphores.acquire(name, 1);
        expect(permit.elapsed).toBe(0);
        expect(await app().semaphores.count(name)).toBe(1);
      }
      expect(await app().semaphores.count(name)).toBe(0);
    });
  });

  describe('local semaphores', () => {
    it('keep one LocalSemaphore per name, and refuse a second limit for the same name', () => {
      const name = uniqueKey('local');
      const semaphore = app().semaphores.local(name, 2);

      expect(app().semaphores.local(name, 2)).toBe(semaphore);
      expect(() => app().semaphores.local(name, 3)).toThrow(InvalidArgumentError);
    });

    it('reject acquireLocal with SEMAPHORE_TIMEOUT when none is free, and take one back once on release', async () => {
      const name = uniqueKey('local');
      const permit = await app().semaphores.acquireLocal(name, 1, { timeout: 0 });

      await expect(app().semaphores.acquireLocal(name, 1, { timeout: 0 })).rejects.toBeInstanceOf(
        SemaphoreTimeoutError,
      );
      expect(await permit.release()).toBe(true);
      expect(await permit.release()).toBe(false);
      expect(app().semaphores.local(name, 1).count()).toBe(1);
    });
  });

  describe('bad input', () => {
    const calls: [string, () => Promise<unknown>][] = [
      ["name ''", () => app().semaphores.acquire('', 1)],
      ['a non-string name', () => app().semaphores.acquire(7 as unknown as string, 1)],
      ['limit 0', () => app().semaphores.acquire('s', 0)],
      ['limit 1.5', () => app().semaphores.tryAcquire('s', 1.5)],
      ['limit NaN', () => app().semaphores.withPermit('s', Number.NaN, () => 1)],
      ['ttl 0', () => app().semaphores.acquire('s', 1, { ttl: 0 })],
      ['timeout -1', () => app().semaphores.acquire('s', 1, { timeout: -1 })],
      ["count('')", () => app().semaphores.count('')],
    ];

    it.each(calls)('rejects %s with INVALID_ARGUMENT', async (_, call) => {
      let pending: Promise<unknown> | undefined;
      expect(() => (pending = call())).not.toThrow();
      await expect(pending).rejects.toBeInstanceOf(InvalidArgumentError);
    });
  });
});
