import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable } from '@nestjs/common';
import { LockTimeoutError, Semaphore, SemaphoreTimeoutError, WithLock } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { deferred } from './support/deferred.js';
import { bootLockModule, closeLockApp, type LockApp, STORE_KINDS, uniqueKey, useLockApps } from './support/lock-app.js';
import { errorOf } from './support/outcomes.js';
import { lockKeyOf } from './support/redis-keys.js';
import { RedisServer, useRedisClient, useRedisServer } from './support/redis-server.js';
import { heldAfter } from './support/timing.js';

/** Fixed by the decorator at class definition; every test that uses it waits until its permit is given back. */
const EXPORTS_SEMAPHORE = 'reentrancy-holders.exports';

const unfinished = new Set<Straggler>();

/** A nested call that the test starts, does not await, and lets finish when it chooses. */
class Straggler {
  private readonly running = deferred();
  private readonly allowedToFinish = deferred();
  /** Resolves once the nested call runs. */
  readonly started = this.running.promise;

  constructor() {
    unfinished.add(this);
  }

  /** The nested call's body: it runs until `finish()`. */
  async run(): Promise<void> {
    this.running.resolve();
    await this.allowedToFinish.promise;
  }

  finish(): void {
    unfinished.delete(this);
    this.allowedToFinish.resolve();
  }
}

// A test that failed half-way must not leave a holder running (and renewing) into the next one.
afterEach(() => {
  for (const straggler of unfinished) straggler.finish();
});

@Injectable()
class ReportJobs {
  @WithLock('report:{0}')
  async write(id: string, straggler: Straggler): Promise<void> {
    await straggler.run();
  }

  /** Starts `write` on its own key like an event listener would, and returns without waiting for it. */
  @WithLock('report:{0}')
  async plan(id: string, straggler: Straggler, running: Promise<void>[]): Promise<void> {
    running.push(this.write(id, straggler));
  }

  @Semaphore(1, { name: EXPORTS_SEMAPHORE })
  async export(straggler: Straggler): Promise<void> {
    await straggler.run();
  }
}

/**
 * Re-entrancy counts holders: a nested withLock / withPermit / decorated call on the same key that is
 * started and not awaited still holds the lease after the outer block returned, and the lease is given
 * back when the last holder is done (issue 7, section 1, defect 1).
 */
describe.each(STORE_KINDS)('holders of one lease on the %s store', (kind) => {
  let server: RedisServer | undefined;
  let app: LockApp;
  /** On Redis, a second application on the same server: another process, as far as the lock can tell. */
  let otherApp: LockApp | undefined;
  let jobs: ReportJobs;

  beforeAll(async () => {
    server = kind === 'redis' ? await RedisServer.start() : undefined;
    app = await bootLockModule(server ? { redis: server.url } : {}, [ReportJobs]);
    otherApp = server ? await bootLockModule({ redis: server.url }, [ReportJobs]) : undefined;
    jobs = app.module.get(ReportJobs);
  });
  afterAll(async () => {
    await otherApp?.module.close();
    await app?.module.close();
    await server?.stop();
  });

  /** Called from the test body: a call chain other than the one that holds the lease. */
  async function expectLockKeptFromOthers(key: string): Promise<void> {
    const entered = app.locks.withLock(key, () => 'another chain entered', { timeout: 0 });
    await expect(entered).rejects.toBeInstanceOf(LockTimeoutError);
    if (otherApp) expect(await otherApp.locks.tryLock(key)).toBeNull();
    expect(await app.locks.isLocked(key)).toBe(true);
  }

  async function expectPermitKeptFromOthers(name: string): Promise<void> {
    const entered = app.semaphores.withPermit(name, 1, () => 'another chain entered', { timeout: 0 });
    await expect(entered).rejects.toBeInstanceOf(SemaphoreTimeoutError);
    if (otherApp) expect(await otherApp.semaphores.tryAcquire(name, 1)).toBeNull();
    expect(await app.semaphores.count(name)).toBe(1);
  }

  describe('locks', () => {
    it('keeps the lock for a nested withLock that outlives the outer block, and frees it after that one', async () => {
      const key = uniqueKey('report');
      const nested = new Straggler();
      let nestedRun!: Promise<string>;

      const outerToken = await app.locks.withLock(key, (outer) => {
        nestedRun = app.locks.withLock(key, async (inner) => {
          await nested.run();
          return inner.token;
        });
        return outer.token;
      });
      await nested.started;

      await expectLockKeptFromOthers(key);
      nested.finish();
      expect(await nestedRun).toBe(outerToken);
      expect(await app.locks.isLocked(key)).toBe(false);
    });

    it('renews the lease while only the nested holder is left, past the ttl the outer block took', async () => {
      const key = uniqueKey('report');
      const nested = new Straggler();
      let nestedRun!: Promise<void>;

      await app.locks.withLock(
        key,
        () => {
          nestedRun = app.locks.withLock(key, () => nested.run());
        },
        { ttl: 300 },
      );
      await delay(900);

      await expectLockKeptFromOthers(key);
      nested.finish();
      await nestedRun;
      expect(await app.locks.isLocked(key)).toBe(false);
    });

    it('gives the lease back when the last holder fails', async () => {
      const key = uniqueKey('report');
      const nested = new Straggler();
      let nestedRun!: Promise<never>;

      await app.locks.withLock(key, () => {
        nestedRun = app.locks.withLock(key, async () => {
          await nested.run();
          throw new Error('the report could not be written');
        });
      });
      // Handled from here on, so that a failure before the end leaves no unhandled rejection behind.
      nestedRun.catch(() => undefined);
      await nested.started;

      await expectLockKeptFromOthers(key);
      nested.finish();
      await expect(nestedRun).rejects.toThrow('the report could not be written');
      expect(await app.locks.isLocked(key)).toBe(false);
    });

    it('keeps the lock for a @WithLock method on the same key started inside withLock and not awaited', async () => {
      const id = uniqueKey();
      const nested = new Straggler();
      let nestedRun!: Promise<void>;

      await app.locks.withLock(`report:${id}`, () => {
        nestedRun = jobs.write(id, nested);
      });
      await nested.started;

      await expectLockKeptFromOthers(`report:${id}`);
      nested.finish();
      await nestedRun;
      expect(await app.locks.isLocked(`report:${id}`)).toBe(false);
    });

    it('keeps the lock for a @WithLock method that a @WithLock method on the same key fired and forgot', async () => {
      const id = uniqueKey();
      const nested = new Straggler();
      const running: Promise<void>[] = [];

      await jobs.plan(id, nested, running);
      await nested.started;

      await expectLockKeptFromOthers(`report:${id}`);
      nested.finish();
      await Promise.all(running);
      expect(await app.locks.isLocked(`report:${id}`)).toBe(false);
    });

    it('does not let a continuation that runs after the last holder reuse the given-back lease', async () => {
      const key = uniqueKey('report');
      const nested = new Straggler();
      const otherOwnerHolds = deferred();
      const keyIsFree = deferred();
      const whileHeldByOther = deferred<unknown>();
      const whileFree = deferred<unknown>();
      let nestedRun!: Promise<void>;

      const outerToken = await app.locks.withLock(key, (outer) => {
        nestedRun = app.locks.withLock(key, async () => {
          await nested.run();
          // Reactions registered here run later in this same call chain, after the lease was given back.
          void otherOwnerHolds.promise.then(() =>
            whileHeldByOther.resolve(
              app.locks.withLock(key, () => 'entered beside the owner', { timeout: 0 }).catch((e: unknown) => e),
            ),
          );
          void keyIsFree.promise.then(() =>
            whileFree.resolve(app.locks.withLock(key, (lock) => lock.token, { timeout: 0 })),
          );
        });
        return outer.token;
      });
      nested.finish();
      await nestedRun;
      expect(await app.locks.isLocked(key)).toBe(false);

      const otherOwner = await app.locks.lock(key, { timeout: 0 });
      otherOwnerHolds.resolve();
      expect(await whileHeldByOther.promise).toBeInstanceOf(LockTimeoutError);
      expect(await otherOwner.unlock()).toBe(true);

      keyIsFree.resolve();
      const freshToken = await whileFree.promise;
      expect(freshToken).not.toBe(outerToken);
      expect(await app.locks.isLocked(key)).toBe(false);
    });
  });

  describe('semaphores', () => {
    it('keeps the permit for a nested withPermit that outlives the outer block, and frees it after that one', async () => {
      const name = uniqueKey('exports');
      const nested = new Straggler();
      let nestedRun!: Promise<string>;

      const outerToken = await app.semaphores.withPermit(name, 1, (outer) => {
        nestedRun = app.semaphores.withPermit(name, 1, async (inner) => {
          await nested.run();
          return inner.token;
        });
        return outer.token;
      });
      await nested.started;

      await expectPermitKeptFromOthers(name);
      nested.finish();
      expect(await nestedRun).toBe(outerToken);
      expect(await app.semaphores.count(name)).toBe(0);
    });

    it('keeps the permit for a @Semaphore method of the same name started inside withPermit and not awaited', async () => {
      const nested = new Straggler();
      let nestedRun!: Promise<void>;

      await app.semaphores.withPermit(EXPORTS_SEMAPHORE, 1, () => {
        nestedRun = jobs.export(nested);
      });
      await nested.started;

      await expectPermitKeptFromOthers(EXPORTS_SEMAPHORE);
      nested.finish();
      await nestedRun;
      expect(await app.semaphores.count(EXPORTS_SEMAPHORE)).toBe(0);
    });
  });
});

/*
 * Found by an outside review: re-entrancy belongs to one application and one lease. Each case failed
 * before its fix.
 */

describe('two LockModule applications in one process each have their own re-entrancy', () => {
  const server = useRedisServer();
  /** A plain client beside the library, to look at what it wrote. */
  const redis = useRedisClient(server);

  it("tenant B's withLock inside tenant A's withLock takes tenant B's own lock (another keyPrefix on one Redis)", async () => {
    const tenantA = await bootLockModule({ redis: server().url, keyPrefix: 'tenantA:' });
    const tenantB = await bootLockModule({ redis: server().url, keyPrefix: 'tenantB:' });
    // Another pod of tenant B.
    const tenantBPod = await bootLockModule({ redis: server().url, keyPrefix: 'tenantB:' });
    try {
      const key = uniqueKey('report');
      const seen = await tenantA.locks.withLock(key, () =>
        tenantB.locks.withLock(key, async (lock) => {
          const intruder = await tenantBPod.locks.tryLock(key);
          await intruder?.unlock();
          return {
            anotherTenantBPodGotIt: intruder !== null,
            tenantBKeyHeldByThisLock: (await redis().get(lockKeyOf(key, 'tenantB:'))) === lock.token,
          };
        }),
      );
      expect(seen).toEqual({ anotherTenantBPodGotIt: false, tenantBKeyHeldByThisLock: true });
    } finally {
      for (const app of [tenantBPod, tenantB, tenantA]) await closeLockApp(app);
    }
  });

  it("with the same Redis and prefix, the other application's withLock inside a withLock is another owner", async () => {
    const first = await bootLockModule({ redis: server().url });
    const second = await bootLockModule({ redis: server().url });
    try {
      const key = uniqueKey('report');
      let ranBesideTheHolder = false;
      const nested = await first.locks.withLock(key, () =>
        errorOf(
          second.locks.withLock(
            key,
            () => {
              ranBesideTheHolder = true;
            },
            { timeout: 0 },
          ),
        ),
      );
      expect(nested).toBeInstanceOf(LockTimeoutError);
      expect(ranBesideTheHolder).toBe(false);
    } finally {
      await closeLockApp(second);
      await closeLockApp(first);
    }
  });

  it("on the memory store, another application's withLock inside a withLock takes that application's own lock", async () => {
    const tenantA = await bootLockModule({});
    const tenantB = await bootLockModule({});
    try {
      const key = uniqueKey('report');
      const seen = await tenantA.locks.withLock(key, () =>
        tenantB.locks.withLock(key, async () => {
          const intruder = await tenantB.locks.tryLock(key);
          await intruder?.unlock();
          return { lockedInTenantB: await tenantB.locks.isLocked(key), anotherOwnerOfTenantBGotIt: intruder !== null };
        }),
      );
      expect(seen).toEqual({ lockedInTenantB: true, anotherOwnerOfTenantBGotIt: false });
    } finally {
      await closeLockApp(tenantB);
      await closeLockApp(tenantA);
    }
  });
});

describe.each(STORE_KINDS)(
  'a nested withLock that outlives an outer withLock without autoExtend (%s store)',
  (kind) => {
    /** On the memory store `other` is `app` itself: lock() and tryLock() are never re-entrant. */
    const apps = useLockApps(kind, 2);

    it('no other owner gets the key while the nested routine runs, several ttls past the outer one', async () => {
      const [app, other] = apps();
      const key = uniqueKey('outlived');
      let nestedDone = false;
      let nested!: Promise<void>;
      await app.locks.withLock(
        key,
        () => {
          nested = app.locks
            .withLock(key, () => delay(800))
            .then(() => {
              nestedDone = true;
            });
        },
        { ttl: 150, autoExtend: false },
      );

      const intrusions: number[] = [];
      for (let i = 0; i < 14 && !nestedDone; i++) {
        await delay(50);
        const intruder = await other.locks.tryLock(key);
        if (intruder === null) continue;
        if (!nestedDone) intrusions.push(i * 50);
        await intruder.unlock();
      }
      await nested;
      expect(intrusions).toEqual([]);
      expect(await heldAfter(() => app.locks.isLocked(key), 1_000)).toBe(false);
    });
  },
);

describe.each(STORE_KINDS)("a nested withLock's unlock() inside withLock (%s store)", (kind) => {
  /** On the memory store `other` is `app` itself: lock() and tryLock() are never re-entrant. */
  const apps = useLockApps(kind, 2);

  it("does not free the outer holder's lease", async () => {
    const [app, other] = apps();
    const key = uniqueKey('account');
    const seen = await app.locks.withLock(key, async (outer) => {
      await app.locks.withLock(key, (inner) => inner.unlock());
      const intruder = await other.locks.tryLock(key);
      await intruder?.unlock();
      return {
        anotherOwnerGotIt: intruder !== null,
        outerStillValid: outer.validity > 0,
        locked: await app.locks.isLocked(key),
      };
    });
    expect(seen).toEqual({ anotherOwnerGotIt: false, outerStillValid: true, locked: true });
    expect(await app.locks.isLocked(key)).toBe(false);
  });
});
