import { describe, expect, it } from '@jest/globals';
import type { Permit } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { type LockApp, STORE_KINDS, uniqueKey, useLockApps } from './support/lock-app.js';
import { semaphoreKeyOf, untilWaitingAt } from './support/redis-keys.js';

/**
 * Callers of one semaphore name with different limits (a rolling deploy that lowers a limit): each
 * caller's own limit holds for it — nobody is granted a permit while, with it, more permits would be
 * held than that caller's limit — whoever grants it (its own attempt, another caller's attempt, a
 * release, a release of its own process).
 */
describe.each(STORE_KINDS)('mixed semaphore limits on the %s store', (kind) => {
  /** Three applications on one server (other processes, as far as Redis can tell); the same app in memory. */
  const apps = useLockApps(kind, 3);
  const app = () => apps()[0];
  const second = () => apps()[1];
  const third = () => apps()[2];
  /** Until `waiters` callers, each of an application of its own, wait for `name`. */
  const untilWaitingFor = (name: string, waiters = 1) =>
    untilWaitingAt(app().server?.url, semaphoreKeyOf(name), { waiters, processes: waiters, orAfterMs: 100 });

  /** A fair wait for a permit (limit `limit`) that records how many permits were held right after its grant. */
  function waitFor(from: LockApp, name: string, limit: number) {
    const state: { permit?: Permit; heldAtGrant?: number; error?: unknown } = {};
    const done = from.semaphores.acquire(name, limit, { timeout: 4_000, maxStep: 100 }).then(
      async (permit) => {
        state.permit = permit;
        state.heldAtGrant = await app().semaphores.count(name);
      },
      (error: unknown) => {
        state.error = error;
      },
    );
    return { state, done };
  }

  it('never hands a waiting caller a permit beyond its own limit when a caller with a higher limit arrives', async () => {
    const name = uniqueKey('lowered-on-arrival');
    const holder = await app().semaphores.acquire(name, 1);
    const waiter = waitFor(second(), name, 1);
    await untilWaitingFor(name);

    const higher = await third().semaphores.tryAcquire(name, 3);
    await delay(200);

    // The waiter may only hold a permit alone (its limit is 1).
    if (waiter.state.permit) expect(waiter.state.heldAtGrant).toBeLessThanOrEqual(1);
    expect(waiter.state.permit).toBeUndefined();
    await higher?.release();
    await holder.release();
    await waiter.done;
    expect(waiter.state.permit).toBeDefined();
    expect(waiter.state.heldAtGrant).toBe(1);
    await waiter.state.permit?.release();
  });

  it.each([
    ['another process', second],
    ['the holder’s own process', app],
  ])('never hands a permit freed by a release to a waiter (in %s) beyond its own limit', async (_, waiterApp) => {
    const name = uniqueKey('lowered-on-release');
    const holder = await app().semaphores.acquire(name, 1);
    const higher = await third().semaphores.acquire(name, 3);
    expect(await app().semaphores.count(name)).toBe(2);
    const waiter = waitFor(waiterApp(), name, 1);
    await untilWaitingFor(name);

    await holder.release();
    await delay(300);
    // One permit is still held (limit 3): a waiter of limit 1 must not be in beside it.
    expect(waiter.state.permit).toBeUndefined();

    await higher.release();
    await waiter.done;
    expect(waiter.state.permit).toBeDefined();
    expect(waiter.state.heldAtGrant).toBe(1);
    await waiter.state.permit?.release();
  });

  it('lets a waiter with a higher limit in beside holders of a lower one, as its limit allows', async () => {
    const name = uniqueKey('raised');
    const holder = await app().semaphores.acquire(name, 1);
    const waiter = waitFor(second(), name, 1);
    await untilWaitingFor(name);
    const higher = waitFor(third(), name, 3);
    await untilWaitingFor(name, 2);

    // The first waiter (limit 1) goes first once the holder leaves; the one behind it (limit 3) fits beside it.
    await holder.release();
    await Promise.all([waiter.done, higher.done]);
    expect(waiter.state.permit).toBeDefined();
    expect(higher.state.permit).toBeDefined();
    expect(await app().semaphores.count(name)).toBe(2);
    await waiter.state.permit?.release();
    await higher.state.permit?.release();
  });
});
