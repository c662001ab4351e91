import { describe, expect, it } from '@jest/globals';
import { InvalidArgumentError, type Lock, LockUpgradeError } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { STORE_KINDS, uniqueKey, useLockApps } from './support/lock-app.js';
import { readerStartsAfterWrite, writerWaitAmidReads } from './support/read-write-timings.js';
import { lockKeyOf, untilWaiting, untilWaitingAt } from './support/redis-keys.js';
import { useRedisClient, useRedisServer } from './support/redis-server.js';
import { killWorker, runWorkers, startWorker } from './support/workers.js';

describe.each(STORE_KINDS)('read-write locks on the %s store', (kind) => {
  // Two applications: on Redis two owners as far as Redis can tell (two processes); on memory one.
  const apps = useLockApps(kind, 2);
  const [a, b] = [() => apps()[0].locks, () => apps()[1].locks];

  it('lets readers hold a key together, and a writer only once they are all gone', async () => {
    const key = uniqueKey('readers-together');
    const first = await a().lock(key, { mode: 'read' });
    const second = await b().lock(key, { mode: 'read' });

    expect([first.mode, second.mode]).toEqual(['read', 'read']);
    expect(await a().inspect(key)).toMatchObject({ held: true, mode: 'read', readers: 2 });
    expect(await a().isLocked(key)).toBe(true);
    expect(await b().tryLock(key)).toBeNull();

    expect(await first.unlock()).toBe(true);
    expect(await b().tryLock(key)).toBeNull(); // one reader is still in
    expect(await second.unlock()).toBe(true);
    const writer = await b().lock(key, { timeout: 1_000 });

    expect(writer.mode).toBe('write');
    expect(await a().inspect(key)).toMatchObject({ held: true, mode: 'write', readers: 0 });
    expect(await a().tryLock(key, { mode: 'read' })).toBeNull();
    await writer.unlock();
    expect(await a().inspect(key)).toMatchObject({ held: false, readers: 0, ttl: 0 });
  });

  // Found by the outside review for 'strict' and false: on the memory store only the waiters of the
  // local line were held back, and a strict or unordered reader, or a tryLock, went past the writer.
  // And by the fourth for an unordered writer (fair: false), which readers went past on Redis.
  it.each([
    { writerFair: true, fair: true },
    { writerFair: true, fair: 'strict' },
    { writerFair: true, fair: false },
    { writerFair: false, fair: true },
    { writerFair: false, fair: false },
    { writerFair: 'strict', fair: false },
  ] as const)(
    'holds back a reader that arrives after a waiting writer until that writer has had the key (writer fair: $writerFair, reader fair: $fair)',
    async ({ writerFair, fair }) => {
      const key = uniqueKey('writer-first');
      const reader = await a().lock(key, { mode: 'read' });
      const order: string[] = [];
      const writer = b().withLock(key, () => void order.push('writer'), { timeout: 5_000, fair: writerFair });
      await untilWaitingAt(apps()[0].server?.url, lockKeyOf(key), { orAfterMs: 100 }); // the writer waits in line
      const lateReader = a().withLock(key, () => void order.push('late reader'), {
        mode: 'read',
        fair,
        timeout: 5_000,
      });
      await delay(100);

      expect(order).toEqual([]); // the late reader does not join the first reader ahead of the writer
      expect(await b().tryLock(key, { mode: 'read' })).toBeNull();
      await reader.unlock();
      await Promise.all([writer, lateReader]);

      expect(order).toEqual(['writer', 'late reader']);
    },
  );

  // Found by the outside review: the lock withLock hands its routine had no mode.
  it('tells the mode on every view of a lock: lock(), and the lock withLock hands its routine', async () => {
    const key = uniqueKey('mode-views');
    expect(await a().withLock(key, (lock) => [lock.mode, lock.keys], { mode: 'read' })).toEqual(['read', [key]]);
    expect(await a().withLock(key, (lock) => lock.mode)).toBe('write');
  });

  // Found by the outside review: a write asked with a reader's own token counted as "held already" on
  // the memory store (a writer beside a stranger's reader), and on Redis undid the read as it gave up.
  it('refuses at once a caller token that holds the key in this process in the other mode', async () => {
    const key = uniqueKey('token-two-modes');
    const reader = await a().lock(key, { mode: 'read', token: 'the-owner' });
    const asWriter = await a()
      .lock(key, { token: 'the-owner', timeout: 200 })
      .catch((error: unknown) => error);
    expect(asWriter).toBeInstanceOf(InvalidArgumentError);
    expect(asWriter).toMatchObject({ argument: 'token' });
    expect(await a().inspect(key)).toMatchObject({ mode: 'read', readers: 1 });
    expect(reader.validity).toBeGreaterThan(0);
    await reader.unlock();

    const writer = await a().lock(key, { token: 'the-owner' });
    await expect(a().tryLock(key, { mode: 'read', token: 'the-owner' })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await b().tryLock(key, { mode: 'read' })).toBeNull();
    await writer.unlock();
  });

  it('rejects an upgrade at once: a write inside a read of the same key, in one call chain', async () => {
    const key = uniqueKey('upgrade');
    let refusedAfter = Infinity;
    const caught = await a().withLock(
      key,
      async () => {
        const started = performance.now();
        const error = await a()
          .withLock(key, () => 'never', { timeout: 5_000 })
          .catch((thrown: unknown) => thrown);
        refusedAfter = performance.now() - started;
        return error;
      },
      { mode: 'read' },
    );

    expect(caught).toBeInstanceOf(LockUpgradeError);
    expect((caught as LockUpgradeError).code).toBe('LOCK_UPGRADE');
    expect((caught as LockUpgradeError).key).toBe(key);
    expect(refusedAfter).toBeLessThan(50);
    expect(await a().isLocked(key)).toBe(false); // and the read was given back
  });

  it('makes a read inside a write of the same key part of that write, and a read inside a read part of it', async () => {
    const key = uniqueKey('read-in-write');
    const [outer, inner] = await a().withLock(key, async (writer) => {
      const joined = await a().withLock(key, (lock) => lock, { mode: 'read', timeout: 0 });
      return [writer, joined];
    });
    expect(inner.token).toBe(outer.token);
    expect(inner.mode).toBe('write'); // the lease it is part of (docs/API.md, Lock.mode)

    const readTokens = await a().withLock(
      key,
      async (outer) => [outer.token, await a().withLock(key, (lock) => lock.token, { mode: 'read', timeout: 0 })],
      { mode: 'read' },
    );
    expect(readTokens[1]).toBe(readTokens[0]);
  });

  it('refuses a mode other than write or read before the store is touched', async () => {
    const key = uniqueKey('bad-mode');
    for (const mode of ['shared', 'READ', null, 1]) {
      await expect(a().lock(key, { mode } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(a().withLock(key, () => 1, { mode } as never)).rejects.toThrow(/mode/);
    }
    expect(await a().isLocked(key)).toBe(false);
  });

  it('frees readers and writer alike on forceUnlock; the readers of this process lose their lease at once', async () => {
    const key = uniqueKey('force-readers');
    const first = await a().lock(key, { mode: 'read' });
    const second = await b().lock(key, { mode: 'read' });

    expect(await a().forceUnlock(key)).toBe(true);
    expect(first.signal.aborted).toBe(true);
    const writer = await b().lock(key, { timeout: 1_000 });
    expect(await second.unlock()).toBe(false);
    expect(await a().forceUnlock(key)).toBe(true);
    expect(await writer.unlock()).toBe(false);
    expect(await a().forceUnlock(key)).toBe(false);
  });

  it("renews a reader's own lease while its routine runs, and expire() resets one reader's lease alone", async () => {
    const key = uniqueKey('reader-renewal');
    const other = await b().lock(key, { mode: 'read', ttl: 5_000 });
    await a().withLock(
      key,
      async (lock: Lock) => {
        await delay(900); // three of its 300 ms leases
        expect(lock.validity).toBeGreaterThan(0);
        expect(await a().inspect(key)).toMatchObject({ held: true, mode: 'read', readers: 2 });
      },
      { mode: 'read', ttl: 300 },
    );
    expect(await a().inspect(key)).toMatchObject({ mode: 'read', readers: 1 });

    expect(await a().expire(key, other.token, 200)).toBe(true);
    await delay(400);
    expect(await a().inspect(key)).toMatchObject({ held: false, readers: 0 });
    expect(await a().expire(key, other.token, 5_000)).toBe(false); // a lost reader is never revived
    expect(await other.unlock()).toBe(false);
  });

  it('draws fences for a writer and for a reader while it holds the key, increasing in the order they held it', async () => {
    const key = uniqueKey('read-write-fences');
    const writer = await a().lock(key);
    const writeFence = await writer.fence();
    await writer.unlock();
    const reader = await b().lock(key, { mode: 'read' });
    const readFence = await reader.fence();
    await expect(reader.fence()).resolves.toBe(readFence); // drawn once
    await reader.unlock();

    expect(readFence).toBeGreaterThan(writeFence);
    await expect(reader.fence()).rejects.toMatchObject({ code: 'LOCK_LOST', reason: 'released' });
  });
});

describe('read-write locks across processes on Redis', () => {
  const server = useRedisServer();
  const redis = useRedisClient(server);
  const PROCESSES = 4;
  const WORKERS = 8;
  const SECTIONS = 160;

  async function runSections(key: string, mode: 'lock' | 'none') {
    const reports = await runWorkers<{ violations: number; writes: number; reads: number }>(
      'read-write-sections',
      PROCESSES,
      [server().url, key, PROCESSES, WORKERS, SECTIONS, mode],
    );
    const sum = (field: 'violations' | 'writes' | 'reads') => reports.reduce((total, each) => total + each[field], 0);
    return {
      violations: sum('violations'),
      writes: sum('writes'),
      reads: sum('reads'),
      counter: Number(await redis().get(`${key}:counter`)),
      readingProcesses: Number(await redis().get(`${key}:reading-processes`)),
    };
  }

  it('never lets a writer beside a reader or another writer, while readers of several processes read together', async () => {
    const run = await runSections(uniqueKey('rw-checked'), 'lock');

    expect(run.writes + run.reads).toBe(PROCESSES * WORKERS * SECTIONS); // 5,120 sections
    expect(run.violations).toBe(0);
    expect(run.counter).toBe(run.writes); // no write lost
    expect(run.readingProcesses).toBeGreaterThanOrEqual(2);
  }, 120_000);

  it('sees violations without the lock (the control that shows the check can fail)', async () => {
    const run = await runSections(uniqueKey('rw-unprotected'), 'none');

    expect(run.violations).toBeGreaterThan(0);
    expect(run.counter).toBeLessThan(run.writes);
  }, 120_000);
});

describe('read-write locks: how soon each side gets in, on Redis', () => {
  const apps = useLockApps('redis', 3);
  const redis = useRedisClient(() => apps()[0].server!);

  // The figures themselves (one read hold + 20 ms; 10 ms) are checked in band, away from the parallel
  // suites' load: test/topologies/read-write-timings.topology-spec.ts. Here, their order of magnitude.
  // Found by the fourth outside review for fair: false — an unordered writer waited 8.5 s, or timed out.
  it.each([true, 'strict', false] as const)(
    'lets a writer in soon while four workers keep the key read without a gap (no writer starves; writer fair: %s)',
    async (fair) => {
      const waited = await writerWaitAmidReads(apps()[0].locks, apps()[1].locks, fair);

      expect(waited).toBeLessThan(300); // an unfair lock makes it wait until the readers stop (5 s timeout)
    },
  );

  it('starts eight readers queued behind a writer together when it is released', async () => {
    const after = await readerStartsAfterWrite(apps()[0].locks, [apps()[1].locks, apps()[2].locks]);

    expect(Math.max(...after)).toBeLessThan(100); // one reader per release would take eight round trips and more
  });

  // Found by the outside review: a release that passed the key to a reader of its own process let in
  // none of the readers of other processes right behind it, who waited for their next attempt.
  it("lets in the other processes' readers with the reader a release passes the key to in its own process", async () => {
    const key = uniqueKey('pass-to-readers');
    const writer = await apps()[0].locks.lock(key);
    const slow = { mode: 'read', timeout: 10_000, maxStep: 5_000 } as const;
    // The own reader reads for a second: the other one must not wait for it, nor for its own next attempt.
    const ownReader = apps()[0].locks.withLock(key, () => delay(1_000).then(() => 'read'), slow);
    await untilWaiting(redis(), lockKeyOf(key));
    const otherReader = apps()[1].locks.withLock(key, () => performance.now(), slow);
    await untilWaiting(redis(), lockKeyOf(key), { waiters: 2, processes: 2 });

    const releasedAt = performance.now();
    await writer.unlock();
    const otherStarted = await otherReader;

    expect(otherStarted - releasedAt).toBeLessThan(500);
    await ownReader;
  });

  it('lets a waiting writer in within 1.1 s after a reader with ttl 1000 is SIGKILLed', async () => {
    const key = uniqueKey('killed-reader');
    const { server } = apps()[0];
    const { child } = await startWorker('hold-until-killed', [server!.url, 'read-lock', key, 1_000]);
    expect(await apps()[0].locks.inspect(key)).toMatchObject({ mode: 'read', readers: 1 });

    const waiting = apps()[1].locks.lock(key, { timeout: 5_000 });
    await untilWaiting(redis(), lockKeyOf(key));
    const killedAt = performance.now();
    await killWorker(child);
    const writer = await waiting;

    expect(performance.now() - killedAt).toBeLessThan(1_100);
    await writer.unlock();
  });
});
