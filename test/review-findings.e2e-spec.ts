import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { Redis } from 'ioredis';
import {
  currentLock,
  type Lock,
  LockLostError,
  LockModule,
  type LockModuleOptions,
  LockService,
  LockTimeoutError,
  Semaphore,
  WithLock,
} from 'nest-lock';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Observable } from 'rxjs';
import { deferred } from './support/deferred.js';
import { DelayProxy } from './support/delay-proxy.js';
import {
  bootLockModule,
  closeLockApp,
  type LockApp,
  STORE_KINDS,
  type StoreKind,
  uniqueKey,
} from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';

/*
 * Regression tests for the findings of the adversarial review, one `describe` per finding (A1 … F).
 * Each fails on the code before the fix (428d18e) for the reason its finding names. Redis is real
 * throughout: frozen with SIGSTOP, restarted from a snapshot, or reached through a proxy that delays
 * replies; nothing is mocked.
 */

/** The server most findings share; those that freeze or restart Redis start their own. */
let server: RedisServer;
/** A plain client beside the library, to look at (and tamper with) what it wrote. */
let redis: Redis;

beforeAll(async () => {
  server = await RedisServer.start();
  redis = new Redis(server.url);
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

/** The Redis key of lock `key` under the default prefix (docs/API.md, "Storage on Redis"). */
function lockKeyOf(key: string, prefix = 'lock:'): string {
  return `${prefix}{${key}}`;
}

/** Reads until `done` holds or `withinMs` passed; the last value read. */
async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, withinMs: number): Promise<T> {
  const deadline = performance.now() + withinMs;
  for (;;) {
    const value = await read();
    if (done(value) || performance.now() >= deadline) return value;
    await delay(25);
  }
}

/** What a call rejected with, or `'resolved'` (a lease it returned is given back). */
async function errorOf(call: Promise<unknown>): Promise<unknown> {
  try {
    const value = await call;
    const lease = value as { unlock?: () => Promise<unknown>; release?: () => Promise<unknown> } | null;
    await (lease?.unlock ?? lease?.release)?.call(lease);
    return 'resolved';
  } catch (error) {
    return error;
  }
}

/** What bootstrapping the module with `options` threw, or `undefined` when it booted. */
async function bootstrapError(options: LockModuleOptions): Promise<unknown> {
  try {
    const module = await Test.createTestingModule({ imports: [LockModule.forRoot(options)] }).compile();
    await module.close();
    return undefined;
  } catch (error) {
    return error;
  }
}

/** `promise`'s value, or `fallback` once `ms` passed first; no timer is left behind. */
async function within<T, F>(promise: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<F>((resolve) => (timer = setTimeout(() => resolve(fallback), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function thrownBy(define: () => unknown): unknown {
  try {
    define();
    return undefined;
  } catch (error) {
    return error;
  }
}

/** Blocks the event loop, as CPU work elsewhere in the application would (a big JSON.parse, a report). */
function busyWait(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // spinning on purpose
  }
}

/**
 * An application on the store, and another owner of its keys: another application on the same Redis,
 * or on the memory store the same application (lock() and tryLock() are never re-entrant).
 */
async function appAndOtherOwner(kind: StoreKind): Promise<{ app: LockApp; other: LockApp; close(): Promise<void> }> {
  if (kind === 'memory') {
    const app = await bootLockModule({});
    return { app, other: app, close: () => closeLockApp(app) };
  }
  const app = await bootLockModule({ redis: server.url });
  const other = await bootLockModule({ redis: server.url });
  return {
    app,
    other,
    close: async () => {
      await closeLockApp(other);
      await closeLockApp(app);
    },
  };
}

describe('A1: two LockModule applications in one process each have their own re-entrancy', () => {
  it("tenant B's withLock inside tenant A's withLock takes tenant B's own lock (another keyPrefix on one Redis)", async () => {
    const tenantA = await bootLockModule({ redis: server.url, keyPrefix: 'tenantA:' });
    const tenantB = await bootLockModule({ redis: server.url, keyPrefix: 'tenantB:' });
    // Another pod of tenant B.
    const tenantBPod = await bootLockModule({ redis: server.url, keyPrefix: 'tenantB:' });
    try {
      const key = uniqueKey('report');
      const seen = await tenantA.locks.withLock(key, () =>
        tenantB.locks.withLock(key, async (lock) => {
          const intruder = await tenantBPod.locks.tryLock(key);
          await intruder?.unlock();
          return {
            anotherTenantBPodGotIt: intruder !== null,
            tenantBKeyHeldByThisLock: (await redis.get(lockKeyOf(key, 'tenantB:'))) === lock.token,
          };
        }),
      );
      expect(seen).toEqual({ anotherTenantBPodGotIt: false, tenantBKeyHeldByThisLock: true });
    } finally {
      for (const app of [tenantBPod, tenantB, tenantA]) await closeLockApp(app);
    }
  });

  it("with the same Redis and prefix, the other application's withLock inside a withLock is another owner", async () => {
    const first = await bootLockModule({ redis: server.url });
    const second = await bootLockModule({ redis: server.url });
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

describe('A2: a grant whose reply arrives after its lease ran out is not handed to the caller', () => {
  let proxy: DelayProxy;
  /** Reaches Redis through the proxy: its replies can be held back. */
  let slow: LockApp;
  let fast: LockApp;

  beforeAll(async () => {
    proxy = await DelayProxy.start(server.port);
    slow = await bootLockModule({ redis: proxy.url, commandTimeout: 3_000 });
    fast = await bootLockModule({ redis: server.url });
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
          const heldOnRedis = (await redis.get(lockKeyOf(key))) === lock.token;
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
        () => redis.exists(lockKeyOf(key)),
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

describe('A3: the watchdog does not declare a lease lost while a renewal Redis applied is on its way back', () => {
  const TTL = 300;
  const STALL_MS = 250;

  /**
   * Holds `keys` with withLock (ttl 300) on an application that reaches Redis through a proxy in another
   * process adding 20 ms to every reply. Once the leases are held, the next renewal written to Redis is
   * followed at once by a 250 ms stall of the event loop (< ttl): Redis applies the renewal on time, its
   * answer waits in the socket until the stall is over.
   */
  async function holdThroughAStallAfterARenewal(keys: string[], watch: string) {
    const proxy = await DelayProxy.start(server.port, { replyDelay: 20, watch });
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
                stillOursOnRedis: (await redis.get(lockKeyOf(key))) === lock.token,
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

describe('A5: a custom token reused for a new lock() right after an unlock() that failed during a freeze', () => {
  let frozen: RedisServer;
  let admin: Redis;
  let owner: LockApp;
  let other: LockApp;

  beforeAll(async () => {
    frozen = await RedisServer.start();
    admin = new Redis(frozen.url);
    owner = await bootLockModule({ redis: frozen.url, commandTimeout: 150 });
    other = await bootLockModule({ redis: frozen.url, commandTimeout: 150 });
  });
  afterAll(async () => {
    frozen?.resume();
    await closeLockApp(other);
    await closeLockApp(owner);
    admin?.disconnect();
    await frozen?.stop();
  });

  /**
   * Locks with a token of the caller's, freezes Redis, unlocks (which fails), and `lockAfterMs` later locks
   * again with the same token; Redis resumes 250 ms after that. Then another application tries the key
   * every 100 ms for 2.5 s: the old release is retried for up to its lease (10 s), backing off up to 1 s.
   * Each intrusion is the validity (ms) the new lock still claimed while the other application held its key.
   */
  async function reuseTokenAfterAFailedUnlock(lockAfterMs: number) {
    const key = uniqueKey('job');
    const token = uniqueKey('worker');
    const first = await owner.locks.lock(key, { token, ttl: 10_000 });
    let again: Lock;
    frozen.pause();
    try {
      const unlocked = await first.unlock().then(String, (error: { code?: string }) => error.code);
      expect(unlocked).toBe('BACKEND_UNAVAILABLE');
      await delay(lockAfterMs);
      const resumed = delay(250).then(() => frozen.resume());
      again = await owner.locks.lock(key, { token, ttl: 10_000, timeout: 5_000 });
      await resumed;
    } finally {
      frozen.resume();
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

  it('scripts cached, lock() at once: the background retry of the old release does not delete the new lock', async () => {
    await (await owner.locks.lock(uniqueKey('warm'))).unlock();
    expect(await reuseTokenAfterAFailedUnlock(0)).toEqual(NO_INTRUSION);
  });

  it('scripts cached, lock() 100 ms later, while a retry of the old release is in flight: it does not delete the new lock', async () => {
    await (await owner.locks.lock(uniqueKey('warm'))).unlock();
    expect(await reuseTokenAfterAFailedUnlock(100)).toEqual(NO_INTRUSION);
  });

  it("release script not cached yet (as in the review's repro): the old release does not delete the new lock", async () => {
    // An empty script cache (a fresh server, a restart, SCRIPT FLUSH): the release goes out as EVALSHA, is
    // answered NOSCRIPT only once Redis resumes, and would be sent again as EVAL after the new lock was taken.
    await admin.script('FLUSH');
    expect(await reuseTokenAfterAFailedUnlock(0)).toEqual(NO_INTRUSION);
  });
});

interface Overlap {
  running: number;
  most: number;
}

/** The decorator applied by hand, as in plain JavaScript: no `design:returntype` says Observable. */
function defineFeedsWithUndeclaredObservable() {
  class Feeds {
    feed(key: string, ms: number, overlap: Overlap): Observable<string> {
      return new Observable<string>((subscriber) => {
        overlap.most = Math.max(overlap.most, ++overlap.running);
        const timer = setTimeout(() => {
          subscriber.next(key);
          subscriber.complete();
        }, ms);
        return () => {
          clearTimeout(timer);
          overlap.running--;
        };
      });
    }
  }
  const descriptor = Object.getOwnPropertyDescriptor(Feeds.prototype, 'feed')!;
  WithLock('{0}', { timeout: 0 })(Feeds.prototype, 'feed', descriptor as TypedPropertyDescriptor<Feeds['feed']>);
  Object.defineProperty(Feeds.prototype, 'feed', descriptor);
  Injectable()(Feeds);
  return Feeds;
}

/** How a subscription ended: `'complete'`, the error it got, or `'unfinished'` after 3 s. */
async function settleSubscription(source: Observable<string>): Promise<unknown> {
  const ended = deferred<unknown>();
  const subscription = source.subscribe({ complete: () => ended.resolve('complete'), error: ended.resolve });
  const end = await within(ended.promise, 3_000, 'unfinished');
  subscription.unsubscribe();
  return end;
}

describe.each(STORE_KINDS)('A6: an Observable a @WithLock method returns without declaring it (%s store)', (kind) => {
  const Feeds = defineFeedsWithUndeclaredObservable();
  let module: TestingModule;
  let feeds: InstanceType<typeof Feeds>;
  let locks: LockService;

  beforeAll(async () => {
    module = await Test.createTestingModule({
      imports: [LockModule.forRoot(kind === 'redis' ? { redis: server.url } : {})],
      providers: [Feeds],
    }).compile();
    await module.init();
    feeds = module.get(Feeds);
    locks = module.get(LockService);
  });
  afterAll(async () => {
    await module?.close();
  });

  /** The call's result, whether the wrapper returns the Observable itself or a promise of it. */
  async function call(key: string, ms: number, overlap: Overlap): Promise<Observable<string>> {
    return (await Promise.resolve<unknown>(feeds.feed(key, ms, overlap))) as Observable<string>;
  }

  it('every subscription holds the lock for its own life: a second one never runs beside the first', async () => {
    const key = uniqueKey('feed');
    const overlap = { running: 0, most: 0 };
    const feed$ = await call(key, 300, overlap);
    const first = settleSubscription(feed$);
    await delay(100);
    const second = settleSubscription(feed$);
    const [firstEnd, secondEnd] = await Promise.all([first, second]);

    expect(overlap.most).toBe(1);
    expect(firstEnd).toBe('complete');
    // With timeout 0 the second one cannot wait: it errors (or, had it waited, it ran after the first).
    expect(secondEnd === 'complete' || secondEnd instanceof LockTimeoutError).toBe(true);
    expect(
      await eventually(
        () => locks.isLocked(key),
        (locked) => !locked,
        1_000,
      ),
    ).toBe(false);
  });

  it('an Observable nobody subscribes to does not keep the lock', async () => {
    const key = uniqueKey('feed');
    await call(key, 10, { running: 0, most: 0 });
    expect(
      await eventually(
        () => locks.isLocked(key),
        (locked) => !locked,
        1_000,
      ),
    ).toBe(false);
  });
});

describe('B1: a fence counter that holds no integer never leaves a lease held by nobody', () => {
  let app: LockApp;

  beforeAll(async () => {
    app = await bootLockModule({ redis: server.url });
  });
  afterAll(async () => {
    await closeLockApp(app);
  });

  const corruptions: [string, (counter: string) => Promise<unknown>][] = [
    ['a string that is not a number', (counter) => redis.set(counter, 'not-a-number')],
    ['a hash', (counter) => redis.hset(counter, 'a', '1')],
  ];

  it.each(corruptions)('lock(), with %s at the fence counter', async (_, corrupt) => {
    const key = uniqueKey('fenced');
    await corrupt(`${lockKeyOf(key)}:fence`);
    const outcome = await errorOf(app.locks.lock(key, { ttl: 10_000, timeout: 1_000 }));
    expect(outcome === 'resolved' ? outcome : String((outcome as { code?: string }).code)).toMatch(
      /^(resolved|BACKEND_ERROR)$/,
    );
    expect(
      await eventually(
        () => redis.pttl(lockKeyOf(key)),
        (pttl) => pttl === -2,
        1_000,
      ),
    ).toBe(-2);
  });

  it.each(corruptions)('acquire(), with %s at the fence counter', async (_, corrupt) => {
    const name = uniqueKey('fenced-semaphore');
    await corrupt(`lock:sem:{${name}}:fence`);
    const outcome = await errorOf(app.semaphores.acquire(name, 1, { ttl: 10_000, timeout: 1_000 }));
    expect(outcome === 'resolved' ? outcome : String((outcome as { code?: string }).code)).toMatch(
      /^(resolved|BACKEND_ERROR)$/,
    );
    expect(
      await eventually(
        () => app.semaphores.count(name),
        (count) => count === 0,
        1_000,
      ),
    ).toBe(0);
  });
});

describe('B2: app.close() while a withLock routine is in flight', () => {
  it('the routine finishes, and its lock is given back rather than left for the whole ttl', async () => {
    const app = await bootLockModule({ redis: server.url });
    const key = uniqueKey('nightly');
    let routineEndedAt = 0;
    // Default ttl: 30 s.
    const routine = app.locks.withLock(key, async () => {
      await delay(300);
      routineEndedAt = performance.now();
      return 'done';
    });
    await delay(50);
    await app.module.close();

    expect(await routine).toBe('done');
    expect(
      await eventually(
        () => redis.pttl(lockKeyOf(key)),
        (pttl) => pttl === -2,
        1_000,
      ),
    ).toBe(-2);
    // Well under the ttl after the routine ended.
    expect(performance.now() - routineEndedAt).toBeLessThan(3_000);
  });
});

interface CloseWhileWaitingRun {
  exitedByItself: boolean;
  outcome?: string;
  code?: string;
  settledAfterCloseMs?: number;
}

/** Runs `workers/close-while-waiting.mjs`; gives it 4 s after app.close() to settle the wait and exit by itself. */
async function closeWhileWaiting(kind: StoreKind): Promise<CloseWhileWaitingRun> {
  const script = fileURLToPath(new URL('./support/workers/close-while-waiting.mjs', import.meta.url));
  const child = spawn(process.execPath, [script, kind, server.url], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = once(child, 'exit');
  const lines: Record<string, unknown>[] = [];
  const closing = deferred();
  createInterface({ input: child.stdout }).on('line', (line) => {
    lines.push(JSON.parse(line) as Record<string, unknown>);
    if (lines.length === 1) closing.resolve();
  });
  try {
    if ((await within(Promise.race([closing.promise, exited]), 20_000, 'no report')) === 'no report') {
      throw new Error('the worker did not get to app.close() within 20 s');
    }
    const exitedByItself = await within(
      exited.then(() => true),
      4_000,
      false,
    );
    const report = lines.find((line) => 'outcome' in line) ?? {};
    return { exitedByItself, ...report };
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  }
}

describe.each(STORE_KINDS)('B3: after app.close(), a lock() that was waiting on the %s store', (kind) => {
  it('rejects at once, and nothing keeps the process alive', async () => {
    const run = await closeWhileWaiting(kind);
    expect(run).toMatchObject({ exitedByItself: true, outcome: 'rejected' });
    expect(run.settledAfterCloseMs).toBeLessThan(1_000);
  });
});

describe('C1: fences after Redis restarts from an older RDB snapshot', () => {
  let snapshotDir: string;
  let restarted: RedisServer;
  let admin: Redis;
  let app: LockApp;

  beforeAll(async () => {
    snapshotDir = mkdtempSync(join(tmpdir(), 'nest-lock-snapshot-'));
    restarted = await RedisServer.start({ args: ['--dir', snapshotDir] });
    admin = new Redis(restarted.url);
    app = await bootLockModule({ redis: restarted.url, commandTimeout: 200 });
  });
  afterAll(async () => {
    await closeLockApp(app);
    admin?.disconnect();
    await restarted?.stop();
    rmSync(snapshotDir, { recursive: true, force: true });
  });

  it('the next fence is greater than every fence handed out before the restart', async () => {
    const key = uniqueKey('account');
    const fences: number[] = [];
    const take = async () => {
      const lock = await app.locks.lock(key);
      fences.push(lock.fence);
      await lock.unlock();
    };
    for (let i = 0; i < 3; i++) await take();
    await admin.set('snapshot-marker', 'taken');
    await admin.save();
    for (let i = 0; i < 3; i++) await take();

    await restarted.restart();
    expect(await admin.get('snapshot-marker')).toBe('taken'); // it came back from the snapshot
    let after: number | undefined;
    const deadline = performance.now() + 8_000;
    while (after === undefined && performance.now() < deadline) {
      try {
        const lock = await app.locks.lock(key, { timeout: 0 });
        after = lock.fence;
        await lock.unlock();
      } catch {
        await delay(100); // the module's client is still reconnecting
      }
    }
    expect(after).toBeGreaterThan(Math.max(...fences));
  });
});

describe('C2: memory-store fences are not reset by a new store', () => {
  it('a fence a new application takes is greater than one an earlier application took', async () => {
    const clockFloor = Date.now() * 1_000 - 1e9;
    const fenceOfANewApp = async () => {
      const app = await bootLockModule({});
      try {
        const lock = await app.locks.lock('c2:account');
        await lock.unlock();
        return lock.fence;
      } finally {
        await closeLockApp(app);
      }
    };
    const earlier = await fenceOfANewApp();
    const later = await fenceOfANewApp();
    expect(later).toBeGreaterThan(earlier);
    // They come from the clock (µs), as on Redis.
    expect(earlier).toBeGreaterThan(clockFloor);
  });
});

describe.each(STORE_KINDS)(
  'D1: a nested withLock that outlives an outer withLock without autoExtend (%s store)',
  (kind) => {
    let apps: Awaited<ReturnType<typeof appAndOtherOwner>>;

    beforeAll(async () => {
      apps = await appAndOtherOwner(kind);
    });
    afterAll(async () => {
      await apps?.close();
    });

    it('no other owner gets the key while the nested routine runs, several ttls past the outer one', async () => {
      const { app, other } = apps;
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
      expect(
        await eventually(
          () => app.locks.isLocked(key),
          (locked) => !locked,
          1_000,
        ),
      ).toBe(false);
    });
  },
);

describe.each(STORE_KINDS)("D2: a nested withLock's unlock() inside withLock (%s store)", (kind) => {
  let apps: Awaited<ReturnType<typeof appAndOtherOwner>>;

  beforeAll(async () => {
    apps = await appAndOtherOwner(kind);
  });
  afterAll(async () => {
    await apps?.close();
  });

  it("does not free the outer holder's lease", async () => {
    const { app, other } = apps;
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

@Injectable()
class WatchedJobs {
  /** Runs until its lease is gone (or ~2 s, several ttls), then tells what `currentLock()` says. */
  @WithLock('watched:{0}', { ttl: 300 })
  async runUntilLost(id: string, started: () => void): Promise<object> {
    const key = `watched:${id}`;
    started();
    for (let i = 0; i < 40; i++) {
      const lock = currentLock(key);
      if (lock === undefined || lock.signal.aborted) break;
      await delay(50);
    }
    const lock = currentLock(key);
    return {
      currentLockOfKey: lock === undefined ? 'undefined' : 'the lock',
      innermostIsIt: lock !== undefined && currentLock() === lock,
      aborted: lock?.signal.aborted,
      reason: (lock?.signal.reason as LockLostError | undefined)?.reason,
    };
  }
}

describe('D3: currentLock() in a @WithLock method whose lease was taken away', () => {
  let module: TestingModule;

  beforeAll(async () => {
    module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server.url })],
      providers: [WatchedJobs],
    }).compile();
    await module.init();
  });
  afterAll(async () => {
    await module?.close();
  });

  it('still returns the lock, whose signal is aborted with reason "taken"', async () => {
    const id = uniqueKey();
    const started = deferred();
    const run = module.get(WatchedJobs).runUntilLost(id, started.resolve);
    await started.promise;
    await redis.del(lockKeyOf(`watched:${id}`));
    expect(await run).toEqual({ currentLockOfKey: 'the lock', innermostIsIt: true, aborted: true, reason: 'taken' });
  });
});

describe('E1: an abort while an attempt is in flight on a frozen Redis', () => {
  let frozen: RedisServer;
  let app: LockApp;

  beforeAll(async () => {
    frozen = await RedisServer.start();
    app = await bootLockModule({ redis: frozen.url, commandTimeout: 1_000 });
    // Scripts cached, so that an attempt is one command.
    await (await app.locks.lock(uniqueKey('warm'))).unlock();
    await (await app.semaphores.acquire(uniqueKey('warm'), 1)).release();
  });
  afterAll(async () => {
    frozen?.resume();
    await closeLockApp(app);
    await frozen?.stop();
  });

  /** Freezes Redis, starts the wait, aborts it 100 ms later, and resumes Redis once the call has settled. */
  async function abortWhileFrozen(start: (signal: AbortSignal) => Promise<unknown>) {
    const reason = new Error('shutting down');
    frozen.pause();
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
      frozen.resume();
    }
  }

  it('lock(): rejects with the reason well before the command timeout, and leaves nothing held', async () => {
    const key = uniqueKey('frozen');
    const { settledWith, reason, msAfterAbort } = await abortWhileFrozen((signal) =>
      app.locks.lock(key, { signal, ttl: 20_000, timeout: 10_000 }),
    );
    expect(settledWith).toBe(reason);
    expect(msAfterAbort).toBeLessThan(500);
    expect(
      await eventually(
        () => app.locks.isLocked(key),
        (locked) => !locked,
        3_000,
      ),
    ).toBe(false);
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

describe('F: arguments that cannot be honoured are INVALID_ARGUMENT', () => {
  let app: LockApp;
  /** On a Redis that is gone: a check that touched the store would fail with BACKEND_UNAVAILABLE instead. */
  let stopped: LockApp;
  let stoppedServer: RedisServer;

  beforeAll(async () => {
    app = await bootLockModule({});
    stoppedServer = await RedisServer.start();
    stopped = await bootLockModule({ redis: stoppedServer.url, commandTimeout: 200 });
    await stoppedServer.stop();
  });
  afterAll(async () => {
    // Back before the module closes: ioredis keeps a client whose server is gone alive for 2 s after disconnect().
    await stoppedServer?.restart();
    const reachable = () =>
      stopped.locks.isLocked(uniqueKey()).then(
        () => true,
        () => false,
      );
    await eventually(reachable, (ok) => ok, 3_000);
    await closeLockApp(stopped);
    await stoppedServer?.stop();
    await closeLockApp(app);
  });

  const DURATIONS = ['ttl', 'timeout', 'step', 'ratio', 'maxStep'] as const;

  it.each(DURATIONS)('%s: null in a call', async (name) => {
    const outcome = await errorOf(app.locks.lock(uniqueKey(), { [name]: null }));
    expect(outcome).toMatchObject({ code: 'INVALID_ARGUMENT', argument: name });
  });

  it.each(DURATIONS)('%s: null in the module defaults', async (name) => {
    const error = await bootstrapError({ defaults: { [name]: null } });
    expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', argument: `defaults.${name}` });
  });

  it('withLock with a routine that is not a function, before the store is touched', async () => {
    const outcome = await errorOf(
      stopped.locks.withLock(uniqueKey(), 'not a function' as unknown as () => void, { timeout: 0 }),
    );
    expect(outcome).toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('withPermit with a routine that is not a function, before the store is touched', async () => {
    const outcome = await errorOf(
      stopped.semaphores.withPermit(uniqueKey(), 1, 42 as unknown as () => void, { timeout: 0 }),
    );
    expect(outcome).toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('a keyPrefix with a lone surrogate, at bootstrap', async () => {
    const error = await bootstrapError({ redis: server.url, keyPrefix: 'tenant\uD800:' });
    expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'keyPrefix' });
  });

  it('acquireLocal with an unknown option', async () => {
    const outcome = await errorOf(app.semaphores.acquireLocal(uniqueKey('local'), 1, { timout: 0 } as never));
    expect(outcome).toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('@Semaphore(1, { scope: "local", ttl }) at class definition: a local semaphore has no lease', () => {
    const error = thrownBy(() => {
      class Reports {
        async build(): Promise<void> {}
      }
      const descriptor = Object.getOwnPropertyDescriptor(Reports.prototype, 'build')!;
      Semaphore(1, { scope: 'local', ttl: 1_000 })(
        Reports.prototype,
        'build',
        descriptor as TypedPropertyDescriptor<Reports['build']>,
      );
      return Reports;
    });
    expect(error).toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});
