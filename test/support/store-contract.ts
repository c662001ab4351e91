import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { InvalidArgumentError, LockTimeoutError, type LockStore } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { lockKind } from './kinds.js';
import { bootLockModule, closeLockApp, type LockApp, uniqueKey } from './lock-app.js';

/** A store under test: `count` stores on one backend (as many processes would each have their own). */
export interface StoreUnderTest {
  /** Stores that share one backend; on a one-process backend (the memory store) the same store each time. */
  stores(count: number): Promise<LockStore[]>;
  /** Stops what `stores` started (its stores are the test's to close: the module never closes a store passed in). */
  close(): Promise<void>;
  /** What the store refuses by design: read locks and semaphores on Redlock. */
  refuses?: { readLocks?: boolean; semaphores?: boolean };
}

/**
 * The contract every store keeps, through `LockModule.forRoot({ store })` and the public services, as an
 * application uses it: exclusion, leases that run out, release and extension by token only, fences in
 * holding order, semaphore limits, read-write rules, several keys all or none, and a waiter told of a
 * release. A new store is one file and one line that runs this suite on it
 * (`describeStoreContract('my store', …)`); what a store refuses by design it must refuse with
 * `InvalidArgumentError`, before anything is sent.
 */
export function describeStoreContract(name: string, start: () => Promise<StoreUnderTest>): void {
  describe(`the store contract: ${name}`, () => {
    let underTest: StoreUnderTest;
    let stores: LockStore[];
    let apps: LockApp[];
    /** Two applications on the store's backend: two owners, as two processes would be. */
    const a = () => apps[0];
    const b = () => apps[1];

    beforeAll(async () => {
      underTest = await start();
      stores = await underTest.stores(2);
      apps = [];
      for (const store of stores) apps.push(await bootLockModule({ store, defaults: { maxStep: 2_000 } }));
    });
    afterAll(async () => {
      for (const app of apps ?? []) await closeLockApp(app);
      for (const store of new Set(stores ?? [])) await store.close();
      await underTest?.close();
    });

    it('lets one owner hold a key at a time, and the next once it is released', async () => {
      const key = uniqueKey('exclusive');
      const first = await a().locks.lock(key);

      expect(await b().locks.tryLock(key)).toBeNull();
      expect(await b().locks.isLocked(key)).toBe(true);
      expect(await first.unlock()).toBe(true);
      const second = await b().locks.tryLock(key);
      expect(second).not.toBeNull();
      expect(await first.unlock()).toBe(false);
      await second!.unlock();
      expect(await a().locks.isLocked(key)).toBe(false);
    });

    it('lets a lease that nobody renews run out, and then another owner in', async () => {
      const key = uniqueKey('runs-out');
      const first = await a().locks.lock(key, { ttl: 300 });
      expect(first.validity).toBeGreaterThan(0);

      const second = await b().locks.lock(key, { timeout: 3_000 });

      expect(first.validity).toBe(0);
      expect(await first.unlock()).toBe(false);
      expect((await a().locks.inspect(key)).held).toBe(true);
      await second.unlock();
    });

    it('releases and extends a lease by its token only', async () => {
      const key = uniqueKey('by-token');
      const held = await a().locks.lock(key, { ttl: 400 });

      expect(await b().locks.unlock(key, 'not-the-token')).toBe(false);
      expect(await b().locks.expire(key, 'not-the-token', 10_000)).toBe(false);
      expect(await b().locks.expire(key, held.token, 3_000)).toBe(true);
      await delay(600); // past the first ttl: the extension holds it
      expect(await b().locks.tryLock(key)).toBeNull();
      expect(await b().locks.unlock(key, held.token)).toBe(true);
      expect(await b().locks.isLocked(key)).toBe(false);
    });

    it('draws fences that increase in the order the key was held, by either owner', async () => {
      const key = uniqueKey('fences');
      const fences: number[] = [];
      for (const app of [a(), b(), a(), b(), a()]) {
        const lock = await app.locks.lock(key, { timeout: 3_000 });
        fences.push(await lock.fence());
        expect(await lock.fence()).toBe(fences.at(-1)); // the same number while held
        await lock.unlock();
      }

      expect(fences.every((fence, i) => i === 0 || fence > fences[i - 1])).toBe(true);
    });

    it('keeps a semaphore within its limit, across owners (or refuses semaphores)', async () => {
      const name = uniqueKey('permits');
      if (underTest.refuses?.semaphores) {
        await expect(a().semaphores.acquire(name, 2)).rejects.toBeInstanceOf(InvalidArgumentError);
        return;
      }
      const first = await a().semaphores.acquire(name, 2);
      // One attempt by an owner that holds nothing: a free permit beside a holder is granted at once.
      const second = await b().semaphores.tryAcquire(name, 2);
      expect(second).not.toBeNull();

      expect(await a().semaphores.tryAcquire(name, 2)).toBeNull();
      expect(await b().semaphores.tryAcquire(name, 2)).toBeNull();
      expect(await a().semaphores.count(name)).toBe(2);
      expect(await second!.release()).toBe(true);
      const third = await a().semaphores.tryAcquire(name, 2);
      expect(third).not.toBeNull();
      await Promise.all([first.release(), third!.release()]);
      expect(await b().semaphores.count(name)).toBe(0);
    });

    it('lets readers in together and a writer alone (or refuses read locks)', async () => {
      const key = uniqueKey('read-write');
      if (underTest.refuses?.readLocks) {
        await expect(a().locks.lock(key, { mode: 'read' })).rejects.toBeInstanceOf(InvalidArgumentError);
        return;
      }
      const first = await a().locks.lock(key, { mode: 'read' });
      // One attempt by an owner that holds nothing: a reader beside a reader is let in at once.
      const second = await b().locks.tryLock(key, { mode: 'read' });
      expect(second).not.toBeNull();
      const readers = [first, second!];

      expect(await a().locks.inspect(key)).toMatchObject({ held: true, mode: 'read', readers: 2 });
      expect(await b().locks.tryLock(key)).toBeNull();
      const writer = b().locks.lock(key, { timeout: 3_000 });
      await delay(100);
      // A writer waiting holds back a reader that arrives after it.
      expect(await a().locks.tryLock(key, { mode: 'read' })).toBeNull();
      await Promise.all(readers.map((reader) => reader.unlock()));
      const written = await writer;
      expect(written.mode).toBe('write');
      expect(await a().locks.tryLock(key, { mode: 'read' })).toBeNull();
      await written.unlock();
    });

    it('takes several keys all or none', async () => {
      const [k1, k2, k3] = [uniqueKey('all-1'), uniqueKey('all-2'), uniqueKey('all-3')];
      const holder = await b().locks.lock(k2);

      const refused = await a()
        .locks.lock([k1, k2, k3], { timeout: 200 })
        .catch((error: unknown) => error);

      expect(refused).toBeInstanceOf(LockTimeoutError);
      for (const key of [k1, k3]) expect(await b().locks.isLocked(key)).toBe(false);
      await holder.unlock();
      const all = await a().locks.lock([k1, k2, k3]);
      expect([...all.keys].sort()).toEqual([k1, k2, k3].sort());
      for (const key of [k1, k2, k3]) expect(await b().locks.tryLock(key)).toBeNull();
      expect(await all.unlock()).toBe(true);
    });

    it('keeps a release that comes between a refused attempt and the wait for it (or has no turns)', async () => {
      const key = uniqueKey('turn-kept');
      const waiterStore = stores[1];
      if (waiterStore.openTurn === undefined) {
        expect(waiterStore.keepsLine).toBeFalsy(); // no turns, no line: waiters look again after their step
        return;
      }
      const holder = await a().locks.lock(key);
      const token = 'contract-waiter';
      const attempt = (inLine: boolean) =>
        waiterStore.acquire(lockKind, key, 'write', token, 10_000, { fair: true, liveness: 10_000, inLine });
      const turn = waiterStore.openTurn(lockKind, key, token);
      try {
        expect((await attempt(false)).granted).toBe(false);
        await turn.wait({ limit: 200, step: 200 }); // a store may start listening at its first wait
        expect((await attempt(true)).granted).toBe(false);
        await holder.unlock();
        const released = performance.now();

        // A store that lost this release would sleep the whole limit.
        await turn.wait({ limit: 10_000, step: 10_000 });
        expect(performance.now() - released).toBeLessThan(2_000);
      } finally {
        turn.close();
        await waiterStore.release(lockKind, key, token, { undo: true });
      }
    });

    it('passes the key between waiters of one process soon after a release, whether or not the store hands over', async () => {
      const key = uniqueKey('passed-here');
      const waits = { timeout: 10_000, step: 1_500, maxStep: 1_500 };
      const holder = await a().locks.lock(key);
      // Both arrive while the key is held here: the second is passed the key by the first's release.
      const first = a().locks.lock(key, waits);
      const second = a().locks.lock(key, waits);
      await delay(100);
      await holder.unlock();
      const firstHolds = await first; // without turns, at its next step
      await delay(300); // the second now waits for the first's release to pass it the key
      const released = performance.now();
      await firstHolds.unlock();
      const secondHolds = await second;

      // Told by the release itself: by the store, or by the core once a store that hands nothing over returned.
      expect(performance.now() - released).toBeLessThan(500);
      await secondHolds.unlock();
    });

    it('gives a waiter the key soon after its release, not at its next step', async () => {
      const key = uniqueKey('woken');
      const holder = await a().locks.lock(key);
      // A step as long as the timeout: only a store that tells its waiters lets one in sooner.
      const waiting = b().locks.lock(key, { timeout: 10_000, step: 1_500, maxStep: 1_500 });
      await delay(300);
      const released = performance.now();
      await holder.unlock();
      const next = await waiting;

      expect(performance.now() - released).toBeLessThan(stores[0].openTurn ? 500 : 2_500);
      await next.unlock();
    });

    it('shares short-lived values between owners, each for its ttl (or keeps none)', async () => {
      const [mine, theirs] = [stores[0].values, stores[1].values];
      if (mine === undefined || theirs === undefined) {
        expect(stores.every((store) => store.values === undefined)).toBe(true);
        return;
      }
      const name = uniqueKey('value');
      expect(await theirs.get(name)).toBeUndefined();
      await mine.set(name, 'first', 10_000);
      expect(await theirs.get(name)).toBe('first');
      await theirs.set(name, 'é{}\n'.repeat(1_000), 10_000);
      expect(await mine.get(name)).toBe('é{}\n'.repeat(1_000));
      await mine.delete(name);
      expect(await theirs.get(name)).toBeUndefined();
      await mine.set(name, 'brief', 100);
      await delay(200);
      expect(await theirs.get(name)).toBeUndefined();
    });
  });
}
