import { describe, expect, it } from '@jest/globals';
import { LocalSemaphore } from './local-semaphore.js';
import { InvalidArgumentError } from './lock.errors.js';

describe('LocalSemaphore', () => {
  it('hands resources to waiters in the order they came, one post() at a time', async () => {
    const semaphore = new LocalSemaphore();
    const served: number[] = [];
    const waiters = [0, 1, 2, 3, 4].map((i) => semaphore.wait(5_000).then((ok) => ok && served.push(i)));
    expect(semaphore.count()).toBe(-5);

    for (let posted = 1; posted <= 5; posted++) {
      semaphore.post();
      await new Promise((resolve) => setImmediate(resolve));
      expect(served).toEqual([0, 1, 2, 3, 4].slice(0, posted));
      expect(semaphore.count()).toBe(posted - 5);
    }
    await Promise.all(waiters);
  });

  it('counts resources left, or minus the number of waiters, never -0', async () => {
    const semaphore = new LocalSemaphore(2);
    expect(semaphore.count()).toBe(2);
    expect(await semaphore.wait()).toBe(true);
    expect(await semaphore.wait()).toBe(true);
    expect(Object.is(semaphore.count(), 0)).toBe(true);

    const waiting = [semaphore.wait(5_000), semaphore.wait(5_000), semaphore.wait(5_000)];
    expect(semaphore.count()).toBe(-3);
    semaphore.post(3);
    expect(await Promise.all(waiting)).toEqual([true, true, true]);
    expect(Object.is(semaphore.count(), 0)).toBe(true);
  });

  it('answers wait(0) with false at once when nothing is free', async () => {
    const semaphore = new LocalSemaphore(0);

    expect(await semaphore.wait(0)).toBe(false);
    expect(await semaphore.wait()).toBe(false);
    expect(semaphore.count()).toBe(0);
  });

  it('lets a timed-out waiter leave the queue, as if it had never come', async () => {
    const semaphore = new LocalSemaphore();
    const first = semaphore.wait(5_000);
    expect(semaphore.count()).toBe(-1);

    const started = performance.now();
    expect(await semaphore.wait(50)).toBe(false);
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
    expect(semaphore.count()).toBe(-1);

    semaphore.post();
    expect(await first).toBe(true);
    expect(semaphore.count()).toBe(0);
  });

  it('keeps a resource posted while nobody waits for the next wait()', async () => {
    const semaphore = new LocalSemaphore();
    semaphore.post(2);

    expect(semaphore.count()).toBe(2);
    expect(await semaphore.wait()).toBe(true);
    expect(semaphore.count()).toBe(1);
  });

  it.each([-1, 1.5, Number.NaN])('refuses %p initial resources with a RangeError', (resources) => {
    expect(() => new LocalSemaphore(resources)).toThrow(RangeError);
  });

  it.each([0, -1, 2.5])('refuses post(%p) with a RangeError', (n) => {
    expect(() => new LocalSemaphore().post(n)).toThrow(RangeError);
  });

  it('rejects a negative or non-finite wait timeout', async () => {
    const semaphore = new LocalSemaphore(1);

    await expect(semaphore.wait(-1)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(semaphore.wait(Number.POSITIVE_INFINITY)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(semaphore.count()).toBe(1);
  });
});
