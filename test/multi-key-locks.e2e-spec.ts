import { describe, expect, it } from '@jest/globals';
import { Injectable } from '@nestjs/common';
import {
  InvalidArgumentError,
  type Lock,
  LockLostError,
  LockTimeoutError,
  LockUpgradeError,
  WithLock,
} from 'nest-lock';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { keyRuns, LockStore } from './support/kinds.js';
import { closeLockApp, createLockApp, STORE_KINDS, uniqueKey, useLockApps } from './support/lock-app.js';
import { lockKeyOf, untilWaiting } from './support/redis-keys.js';
import { useRedisClient, useRedisServer } from './support/redis-server.js';
import { until } from './support/timing.js';
import { runWorkers } from './support/workers.js';

/** Moves money between accounts: each transfer holds both accounts, whichever order they are named in. */
@Injectable()
class Ledger {
  readonly balances = new Map<string, number>();
  inside = 0;
  overlaps = 0;

  @WithLock(['account:{0}', 'account:{1}'], { timeout: 20_000 })
  async transfer(from: string, to: string, amount: number): Promise<void> {
    if (++this.inside > 1) this.overlaps++;
    const [a, b] = [this.balances.get(from) ?? 0, this.balances.get(to) ?? 0];
    await delay(1);
    this.balances.set(from, a - amount);
    this.balances.set(to, b + amount);
    this.inside--;
  }
}

describe.each(STORE_KINDS)('locks on several keys on the %s store', (kind) => {
  // Two applications: on Redis two owners as far as Redis can tell (two processes); on memory one.
  const apps = useLockApps(kind, 2);
  const [a, b] = [() => apps()[0].locks, () => apps()[1].locks];
  /** The order every caller takes these keys in, on this store. */
  const inTakingOrder = (keys: string[]) => keyRuns(apps()[0].module.get<LockStore>(LockStore), keys).flat();

  it('takes every key at once, without repeats, in the one global order, and frees them all', async () => {
    const [k1, k2, k3] = [uniqueKey('multi-1'), uniqueKey('multi-2'), uniqueKey('multi-3')];
    const lock = await a().lock([k3, k1, k3, k2]);

    expect(lock.keys).toEqual(inTakingOrder([k1, k2, k3]));
    expect(lock.key).toBe(lock.keys[0]);
    for (const key of [k1, k2, k3]) expect(await a().isLocked(key)).toBe(true);
    expect(await b().tryLock([k2, uniqueKey('free')])).toBeNull();
    expect(await a().expire(k2, lock.token, 5_000)).toBe(true); // one token for every key
    expect(lock.validity).toBeGreaterThan(0);

    expect(await lock.unlock()).toBe(true);
    for (const key of [k1, k2, k3]) expect(await a().isLocked(key)).toBe(false);
    expect(await lock.unlock()).toBe(false);
    const single = await a().lock([k1]);
    expect(single.keys).toEqual([k1]);
    await single.unlock();
  });

  it('refuses an empty list, or a bad key in it, before the store is touched', async () => {
    await expect(a().lock([])).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(a().withLock([], () => 1)).rejects.toThrow(/at least one key/);
    const bad = await a()
      .lock([uniqueKey('good'), ''])
      .catch((error: unknown) => error);
    expect(bad).toBeInstanceOf(InvalidArgumentError);
    expect(bad).toMatchObject({ argument: 'key[1]' });
    await expect(a().tryLock(['x', 42 as never])).rejects.toBeInstanceOf(InvalidArgumentError);
    // A hole in a sparse array too (found by the outside review: a TypeError).
    const sparse = [uniqueKey('sparse-1'), , uniqueKey('sparse-2')]; // eslint-disable-line no-sparse-arrays
    await expect(a().lock(sparse as string[])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'key[1]' });
  });

  it('gives back every key it had taken when the wait for the next ends: timeout, abort', async () => {
    const [k1, k2] = inTakingOrder([uniqueKey('back-1'), uniqueKey('back-2')]);
    const holder = await b().lock(k2);

    const timedOut = await a()
      .lock([k1, k2], { timeout: 200 })
      .catch((error: unknown) => error);
    expect(timedOut).toBeInstanceOf(LockTimeoutError);
    // The caller's timeout and its whole wait, not what was left of it for the key it timed out on.
    expect(timedOut).toMatchObject({ key: k2, timeout: 200, message: expect.stringContaining('within 200 ms') });
    expect((timedOut as LockTimeoutError).waited).toBeGreaterThanOrEqual(200);
    const inRoutine = await a()
      .withLock([k1, k2], () => 'ran', { timeout: 200 })
      .catch((error: unknown) => error);
    expect(inRoutine).toMatchObject({ code: 'LOCK_TIMEOUT', key: k2, timeout: 200 });
    expect((inRoutine as LockTimeoutError).waited).toBeGreaterThanOrEqual(200);
    expect(await a().isLocked(k1)).toBe(false);

    const aborting = new AbortController();
    const aborted = a().lock([k1, k2], { signal: aborting.signal, timeout: 5_000 });
    await until('k1 taken', () => a().isLocked(k1));
    expect(await a().isLocked(k1)).toBe(true); // taken, waiting for k2
    aborting.abort(new Error('user gave up'));
    await expect(aborted).rejects.toThrow('user gave up');
    expect(await a().isLocked(k1)).toBe(false);

    expect(await a().tryLock([k1, k2])).toBeNull();
    expect(await a().isLocked(k1)).toBe(false);
    await holder.unlock();
  });

  // Found by the outside review: a bare lock() on several keys let the first key's lease run out while
  // it waited for the next, and resolved with a key another owner could take.
  it('keeps the keys it took alive while it waits for the next, longer than their ttl', async () => {
    const [k1, k2] = inTakingOrder([uniqueKey('keep-alive-1'), uniqueKey('keep-alive-2')]);
    const holder = await b().lock(k2);
    setTimeout(() => void holder.unlock(), 900);

    const lock = await a().lock([k1, k2], { ttl: 400, timeout: 5_000 });

    expect(lock.signal.aborted).toBe(false);
    expect(lock.validity).toBeGreaterThan(0);
    expect(await b().tryLock(k1)).toBeNull();
    expect(await lock.unlock()).toBe(true);
  });

  it('gives every key back and rejects when a key it took was lost while it waited for the next', async () => {
    const [k1, k2] = inTakingOrder([uniqueKey('lost-while-waiting-1'), uniqueKey('lost-while-waiting-2')]);
    const holder = await b().lock(k2);
    const waiting = a()
      .lock([k1, k2], { ttl: 300, timeout: 5_000 })
      .catch((error: unknown) => error);
    await until('k1 taken', () => a().isLocked(k1));
    expect(await b().forceUnlock(k1)).toBe(true); // an operator frees k1 while k2 is waited for
    const thief = await b().lock(k1, { timeout: 1_000 });
    await delay(300); // the waiter's renewal of k1 finds it gone
    await holder.unlock();

    const outcome = await waiting;
    expect(outcome).toBeInstanceOf(LockLostError);
    expect(outcome).toMatchObject({ key: k1 });
    expect(await a().isLocked(k2)).toBe(false); // k2, taken last, was given back
    expect(await thief.unlock()).toBe(true); // and k1 stayed the other owner's
  });

  // Found by the outside review: the upgrade was seen only when its key's turn came, after waiting for
  // the keys before it (a timeout instead of LOCK_UPGRADE).
  it('rejects an upgrade of one of several keys at once, before waiting for any of them', async () => {
    const [k1, k2] = inTakingOrder([uniqueKey('upgrade-first-1'), uniqueKey('upgrade-first-2')]);
    const other = await b().lock(k1);
    let refusedAfter = Infinity;
    const error = await a().withLock(
      k2,
      async () => {
        const started = performance.now();
        const refusal = await a()
          .withLock([k1, k2], () => 'never', { timeout: 2_000 })
          .catch((thrown: unknown) => thrown);
        refusedAfter = performance.now() - started;
        return refusal;
      },
      { mode: 'read' },
    );

    expect(error).toBeInstanceOf(LockUpgradeError);
    expect(refusedAfter).toBeLessThan(50);
    await other.unlock();
  });

  it('never deadlocks when callers name the same keys in opposite orders', async () => {
    const [k1, k2] = [uniqueKey('opposite-1'), uniqueKey('opposite-2')];
    let inside = 0;
    let overlaps = 0;
    let sections = 0;
    const section = async () => {
      if (++inside > 1) overlaps++;
      await delay(1);
      inside--;
      sections++;
    };
    const loop = async (locks: typeof a, keys: string[]) => {
      for (let i = 0; i < 40; i++) await locks().withLock(keys, section, { timeout: 5_000 });
    };

    await Promise.all([loop(a, [k1, k2]), loop(b, [k2, k1]), loop(a, [k2, k1]), loop(b, [k1, k2])]);

    expect(sections).toBe(160);
    expect(overlaps).toBe(0);
  });

  it('deadlocks when the keys are taken one by one in the order given (the control for the test above)', async () => {
    const [k1, k2] = [uniqueKey('naive-1'), uniqueKey('naive-2')];
    const naive = (locks: typeof a, first: string, second: string) =>
      locks().withLock(first, () => delay(50).then(() => locks().withLock(second, () => 'done', { timeout: 500 })));

    const outcomes = await Promise.allSettled([naive(a, k1, k2), naive(b, k2, k1)]);

    expect(outcomes.some((outcome) => outcome.status === 'rejected')).toBe(true);
  });

  it('in a call chain that holds one of the keys, takes only the others; the held one stays held after', async () => {
    const [k1, k2] = [uniqueKey('chain-1'), uniqueKey('chain-2')];
    await a().withLock(k1, async (outer) => {
      const inner = await a().withLock([k2, k1], async (lock: Lock) => {
        expect(await b().tryLock(k2)).toBeNull();
        return { keys: lock.keys };
      });
      expect(inner.keys).toEqual(inTakingOrder([k1, k2]));
      expect(await a().isLocked(k2)).toBe(false); // given back
      expect(await a().isLocked(k1)).toBe(true); // still the outer holder's
      expect(outer.validity).toBeGreaterThan(0);
    });
    expect(await a().isLocked(k1)).toBe(false);

    // A write of several keys inside a read of one of them: an upgrade, refused at once.
    const upgrade = a().withLock(k1, () => a().withLock([k1, k2], () => 'never'), { mode: 'read' });
    await expect(upgrade).rejects.toBeInstanceOf(LockUpgradeError);
    expect(await a().isLocked(k2)).toBe(false);
  });

  it("aborts the lock's signal when any of its keys is lost, and draws each key's own fence", async () => {
    const [k1, k2] = [uniqueKey('lost-1'), uniqueKey('lost-2')];
    const lock = await a().lock([k1, k2]);
    const fences = [await lock.fence(k1), await lock.fence(k2), await lock.fence()];
    expect(fences[2]).toBe(await lock.fence(lock.keys[0]));
    await expect(lock.fence(uniqueKey('other'))).rejects.toBeInstanceOf(InvalidArgumentError);

    expect(lock.signal.aborted).toBe(false);
    expect(await a().forceUnlock(k2)).toBe(true);
    expect(lock.signal.aborted).toBe(true);
    expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST', key: k2 });
    expect(await lock.unlock()).toBe(false); // k2 was not ours any more
    expect(await a().isLocked(k1)).toBe(false);
  });

  it('read-locks several keys at once beside other readers', async () => {
    const [k1, k2] = [uniqueKey('read-many-1'), uniqueKey('read-many-2')];
    const first = await a().lock([k1, k2], { mode: 'read' });
    const second = await b().lock([k2, k1], { mode: 'read' });

    expect([first.mode, second.mode]).toEqual(['read', 'read']);
    expect(await a().inspect(k1)).toMatchObject({ mode: 'read', readers: 2 });
    expect(await b().tryLock([k1])).toBeNull();
    await Promise.all([first.unlock(), second.unlock()]);
  });
});

describe.each(STORE_KINDS)('@WithLock on several keys on the %s store', (kind) => {
  it('moves money in both directions at once without a deadlock or a lost update', async () => {
    const app = await createLockApp(kind, {}, [Ledger]);
    try {
      const ledger = app.module.get(Ledger);
      const [x, y] = [uniqueKey('acct-x'), uniqueKey('acct-y')];
      const transfers = Array.from({ length: 30 }, (_, i) =>
        i % 2 === 0 ? ledger.transfer(x, y, 1) : ledger.transfer(y, x, 2),
      );
      await Promise.all(transfers);

      expect(ledger.overlaps).toBe(0);
      expect(ledger.balances.get(x)).toBe(-15 + 30);
      expect(ledger.balances.get(y)).toBe(15 - 30);
      await expect(ledger.transfer(x, undefined as never, 1)).rejects.toBeInstanceOf(InvalidArgumentError);
    } finally {
      await closeLockApp(app);
    }
  });

  it('refuses an empty list of key templates when the class is defined', () => {
    expect(() => WithLock([])).toThrow(InvalidArgumentError);
  });
});

describe('locks on several free keys on one Redis', () => {
  const apps = useLockApps('redis', 2);
  const [a, b] = [() => apps()[0].locks, () => apps()[1].locks];
  /** The order every caller takes these keys in, on this store. */
  const inTakingOrder = (keys: string[]) => keyRuns(apps()[0].module.get<LockStore>(LockStore), keys).flat();

  /** Every command the server runs meanwhile on `keys` (Lua's own marked `lua:`), by MONITOR. */
  async function commandsOn(keys: string[], during: () => Promise<unknown>): Promise<string[]> {
    const client = new Redis(apps()[0].server!.url);
    const monitor = await client.monitor(); // a connection of its own
    const seen: string[] = [];
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (keys.some((key) => args.some((arg) => arg === `lock:{${key}}`))) {
        seen.push(`${source === 'lua' ? 'lua:' : ''}${args[0].toLowerCase()}`);
      }
    });
    try {
      await during();
      await delay(50); // MONITOR's last lines
      return seen;
    } finally {
      monitor.disconnect();
      client.disconnect();
    }
  }

  /** What the first command's script wrote (the one step): the `lua:` commands before the next command. */
  function writtenByFirstStep(commands: string[]): string[] {
    expect(commands[0]).toBe('evalsha');
    const next = commands.findIndex((name, i) => i > 0 && !name.startsWith('lua:'));
    return commands.slice(1, next === -1 ? undefined : next).filter((name) => name === 'lua:set');
  }

  it('takes them all in one command when all are free', async () => {
    await (await a().lock([uniqueKey('warm-1'), uniqueKey('warm-2')])).unlock(); // the script is cached
    const keys = [uniqueKey('one-step-1'), uniqueKey('one-step-2'), uniqueKey('one-step-3')];
    let lock: Lock | undefined;
    const commands = await commandsOn(keys, async () => (lock = await a().lock(keys)));

    expect(commands.filter((name) => !name.startsWith('lua:'))).toEqual(['evalsha']);
    expect(writtenByFirstStep(commands)).toHaveLength(3);
    for (const key of keys) expect(await b().isLocked(key)).toBe(true);
    expect(await lock!.unlock()).toBe(true);
  });

  it('takes none of them in that command when one is held, or has waiters in line', async () => {
    const [k1, k2, k3] = inTakingOrder([uniqueKey('none-1'), uniqueKey('none-2'), uniqueKey('none-3')]);
    const holder = await b().lock(k2);
    const held = await commandsOn([k1, k2, k3], async () => expect(await a().tryLock([k1, k2, k3])).toBeNull());
    expect(writtenByFirstStep(held)).toEqual([]);
    // Then k1 was taken alone, k2 refused, and k1 given back.
    expect(await a().isLocked(k1)).toBe(false);
    expect(await a().isLocked(k3)).toBe(false);

    // A key free while a waiter stands in its line (its holder's lease vanished): not taken by the step.
    const waiter = b().lock(k2, { fair: 'strict', timeout: 5_000 });
    const plain = new Redis(apps()[0].server!.url);
    await untilWaiting(plain, lockKeyOf(k2));
    await plain.del(lockKeyOf(k2));
    plain.disconnect();
    const lined = await commandsOn([k1, k2, k3], async () => (await a().tryLock([k1, k2, k3]))?.unlock());
    expect(writtenByFirstStep(lined)).toEqual([]);
    await (await waiter).unlock();
    await holder.unlock();
  });
});

// Found by the outside review of the one-step script: each left every key held for its ttl.
describe('locks on several keys when the one-step script is not answered in time', () => {
  const apps = useLockApps('redis', 2, { commandTimeout: 200 });
  const server = () => apps()[0].server!;
  const keysFree = async (keys: string[]) =>
    (await Promise.all(keys.map((key) => apps()[1].locks.isLocked(key)))).every((held) => !held);

  it('leaves no key held after an abort while the server, frozen, then answers NOSCRIPT', async () => {
    const keys = [uniqueKey('noscript-1'), uniqueKey('noscript-2'), uniqueKey('noscript-3')];
    const plain = new Redis(server().url);
    await plain.script('FLUSH'); // the server lost its scripts (a restart, a failover)
    plain.disconnect();
    server().pause();
    try {
      const aborting = new AbortController();
      const call = apps()[0]
        .locks.lock(keys, { signal: aborting.signal, ttl: 30_000, timeout: 5_000 })
        .catch((error: unknown) => error);
      await delay(100);
      aborting.abort(new Error('caller gave up'));
      expect(await call).toMatchObject({ message: 'caller gave up' });
    } finally {
      server().resume();
    }
    await delay(300);
    expect(await keysFree(keys)).toBe(true);
  });

  it('leaves no key held when the script outlives its command timeout and the call gives up', async () => {
    const keys = [uniqueKey('frozen-1'), uniqueKey('frozen-2'), uniqueKey('frozen-3')];
    await (await apps()[0].locks.lock(keys)).unlock(); // the script is cached
    server().pause();
    try {
      const outcome = await apps()[0]
        .locks.lock(keys, { ttl: 30_000, timeout: 600 })
        .catch((error: unknown) => error);
      expect(outcome).toBeInstanceOf(Error);
    } finally {
      server().resume();
    }
    await delay(300);
    expect(await keysFree(keys)).toBe(true);
  });
});

describe('locks on several keys across processes on Redis', () => {
  const server = useRedisServer();
  const redis = useRedisClient(server);
  const PROCESSES = 4;
  const WORKERS = 6;
  const TRANSFERS = 40;
  const ACCOUNTS = 5;

  /** Every process moves money between random pairs of accounts, naming each pair in a random order. */
  async function runTransfers(mode: 'lock' | 'none') {
    const prefix = uniqueKey(`transfers-${mode}`);
    const reports = await runWorkers<{ done: number; net: number[] }>('transfers', PROCESSES, [
      server().url,
      prefix,
      PROCESSES,
      WORKERS,
      TRANSFERS,
      ACCOUNTS,
      mode,
    ]);
    const balances = await Promise.all(
      Array.from({ length: ACCOUNTS }, async (_, i) => Number(await redis().get(`${prefix}:account:${i}`))),
    );
    // Accounts whose balance is not the net of the transfers made to and from them: lost updates.
    const wrong = balances.filter((balance, i) => balance !== reports.reduce((sum, report) => sum + report.net[i], 0));
    return { done: reports.reduce((sum, report) => sum + report.done, 0), wrong: wrong.length };
  }

  it('loses no update: every transfer holds both accounts, in whichever order it named them', async () => {
    const { done, wrong } = await runTransfers('lock');

    expect(done).toBe(PROCESSES * WORKERS * TRANSFERS); // none timed out: no deadlock
    expect(wrong).toBe(0);
  }, 120_000);

  it('loses updates without the lock (the control that shows the check can fail)', async () => {
    const { done, wrong } = await runTransfers('none');

    expect(done).toBe(PROCESSES * WORKERS * TRANSFERS);
    expect(wrong).toBeGreaterThan(0);
  }, 120_000);
});
