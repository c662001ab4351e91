import { describe, expect, it } from '@jest/globals';
import { type Lock } from 'nest-lock';
import type { ChildProcess } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, STORE_KINDS, uniqueKey, useLockApp } from './support/lock-app.js';
import { useRedisClient } from './support/redis-server.js';
import { spawnWorker, workerExited } from './support/workers.js';
import { listeningChannelOf, lockKind, LockStore, RedisStore, semaphoreKind } from './support/kinds.js';

/** Resolves with the lock and how long after `since` it was granted. */
async function grantedAfter<L = Lock>(lease: Promise<L>, since: () => number): Promise<{ lock: L; after: number }> {
  const granted = await lease;
  return { lock: granted, after: performance.now() - since() };
}

describe('wake-ups and fair order on Redis', () => {
  const app = useLockApp('redis', { commandTimeout: 200 });
  const server = () => app().server!;
  /** A plain client beside the library, to watch its keys and channels. */
  const redis = useRedisClient(server);

  const store = () => app().module.get<RedisStore>(LockStore);
  /** Scripts the server ran by SHA so far (every attempt and release is one). */
  async function evalshaCalls(): Promise<number> {
    const stats = await redis().info('commandstats');
    return Number(/cmdstat_evalsha:calls=(\d+)/.exec(stats)?.[1] ?? 0);
  }
  const lineLength = async (key: string) => redis().zcard(store().keysOf(lockKind, key)[2]);
  async function untilInLine(key: string, waiters: number): Promise<void> {
    const deadline = performance.now() + 10_000;
    while ((await lineLength(key)) < waiters) {
      if (performance.now() > deadline) throw new Error(`${waiters} waiters never stood in line for ${key}`);
      await delay(10);
    }
  }

  /** NUMSUB of `channel` once it reaches `subscribers`, or as it stands after 5 s. */
  async function untilSubscribers(channel: string, subscribers: number): Promise<unknown[]> {
    const deadline = performance.now() + 5_000;
    for (;;) {
      const numsub = await redis().pubsub('NUMSUB', channel);
      if (numsub[1] === subscribers || performance.now() > deadline) return numsub;
      await delay(10);
    }
  }

  /** Waits until `processes` processes listen for the waiters of `key` (each on its own channel). */
  async function untilListening(key: string, processes: number): Promise<void> {
    const deadline = performance.now() + 5_000;
    const pattern = `${store().channelOf(lockKind, key)}:*`;
    while ((await redis().pubsub('CHANNELS', pattern)).length < processes && performance.now() < deadline) {
      await delay(10);
    }
  }

  it.each([true, false])('wakes a waiter on release, long before its backoff step ends (fair: %s)', async (fair) => {
    const key = uniqueKey('wake');
    const holder = await app().locks.lock(key);
    let releasedAt = Infinity;
    const waiter = grantedAfter(app().locks.lock(key, { fair, step: 3_000, maxStep: 3_000 }), () => releasedAt);
    await delay(300); // the waiter is subscribed and asleep for 3 s

    releasedAt = performance.now();
    await holder.unlock();
    const { lock, after } = await waiter;

    expect(after).toBeLessThan(1_000);
    await lock.unlock();
  });

  it('hands the lock straight to the first fair waiter: it holds it before attempting again', async () => {
    const key = uniqueKey('handover');
    const holder = await app().locks.lock(key);
    const holderFence = await holder.fence();
    const waiter = app().locks.lock(key, { step: 3_000, maxStep: 3_000 });
    await untilInLine(key, 1);

    expect(await holder.unlock()).toBe(true);
    // The release set the key to the waiter's token and told it so.
    const lock = await waiter;
    expect(await redis().get(store().keysOf(lockKind, key)[0])).toBe(lock.token);
    expect(await lock.fence()).toBeGreaterThan(holderFence);
    expect(lock.validity).toBeGreaterThan(0);
    // The handover lease is short: the new holder extends it to its own ttl.
    await delay(app().module.get<RedisStore>(LockStore).handoverLease + 200);
    expect(await redis().pttl(store().keysOf(lockKind, key)[0])).toBeGreaterThan(20_000);
    await lock.unlock();
  });

  it('keeps a waiter asleep until it is told: no polling while its channel is subscribed', async () => {
    // (Before the test that kills the subscriber: while it reconnects, waiters poll with their step.)
    const key = uniqueKey('asleep');
    const holder = await app().locks.lock(key);
    const attemptsBefore = await evalshaCalls();
    // With a step of 1 ms that never grows, a polling waiter would attempt about 1,500 times in 1.5 s.
    const waiter = app().locks.lock(key, { step: 1, ratio: 1, maxStep: 500 });
    await delay(1_500);
    await holder.unlock();
    const lock = await waiter;

    // Its first attempt, one more once subscribed, then one every maxStep (±25 %) to keep its place.
    const attempts = (await evalshaCalls()) - attemptsBefore - 1; // less the holder's release
    expect(attempts).toBeGreaterThanOrEqual(2);
    expect(attempts).toBeLessThanOrEqual(8);
    await lock.unlock();
  });

  it('still grants the lock within one step when the wake-up message is lost (subscriber killed)', async () => {
    const key = uniqueKey('lost-message');
    const holder = await app().locks.lock(key);
    let releasedAt = Infinity;
    const waiter = grantedAfter(app().locks.lock(key, { step: 1, maxStep: 300 }), () => releasedAt);
    await untilInLine(key, 1);
    await delay(700); // its step has grown to maxStep

    await redis().call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    releasedAt = performance.now();
    await holder.unlock();
    const { lock, after } = await waiter;

    expect(after).toBeLessThan(300 * 1.25 + 300);
    await lock.unlock();
  });

  it("keeps a handover that comes while the waiter is not waiting (its attempt on the way) for the waiter's next wait", async () => {
    const key = uniqueKey('kept-handover');
    const turn = store().openTurn(lockKind, key, 'the-waiter');
    try {
      // The first wait subscribes; it ends as soon as the subscription stands.
      expect(await turn.wait({ limit: 5_000, step: 5_000 })).toBeNull();
      // A release hands the lock over while no wait is in progress.
      await redis().publish(listeningChannelOf(store(), lockKind, key), 'the-waiter 42 700');
      await delay(100);
      const started = performance.now();

      expect(await turn.wait({ limit: 5_000, step: 5_000 })).toEqual({ fence: 42, lease: 700 });
      expect(performance.now() - started).toBeLessThan(1_000);
      // Other waiters' handovers are not kept for it.
      await redis().publish(listeningChannelOf(store(), lockKind, key), 'someone-else 43 700');
      await delay(100);
      expect(await turn.wait({ limit: 200, step: 200 })).toBeNull();
    } finally {
      turn.close();
    }
  });

  it('keeps a wake that comes while the waiter is not waiting: its next wait ends at once', async () => {
    const key = uniqueKey('kept-wake');
    const turn = store().openTurn(lockKind, key, 'the-waiter');
    try {
      expect(await turn.wait({ limit: 5_000, step: 5_000 })).toBeNull(); // subscribed
      // A release wakes it ('<token> 0 0') while its attempt is on the way.
      await redis().publish(listeningChannelOf(store(), lockKind, key), 'the-waiter 0 0');
      await delay(100);
      const started = performance.now();

      expect(await turn.wait({ limit: 5_000, step: 5_000 })).toBeNull();
      expect(performance.now() - started).toBeLessThan(1_000);
      // Another waiter's wake is not kept for it: this wait lasts its limit.
      await redis().publish(listeningChannelOf(store(), lockKind, key), 'someone-else 0 0');
      await delay(100);
      const next = performance.now();
      expect(await turn.wait({ limit: 300, step: 300 })).toBeNull();
      expect(performance.now() - next).toBeGreaterThanOrEqual(250);
    } finally {
      turn.close();
    }
  });

  it('fair: false: a release wakes one waiter, whichever application it is in, not one per application', async () => {
    const others = await Promise.all([1, 2, 3].map(() => bootLockModule({ redis: server().url, commandTimeout: 200 })));
    // The holder's application has no waiter of its own: its release goes through Redis (one of its own
    // would be passed the lock without a command).
    const holding = await bootLockModule({ redis: server().url, commandTimeout: 200 });
    try {
      const key = uniqueKey('wake-one');
      const holder = await holding.locks.lock(key);
      // One unordered waiter in each of four applications, none polling within the test.
      const waiters = [app(), ...others].map((each) =>
        each.locks.lock(key, { fair: false, step: 10_000, maxStep: 10_000, timeout: 30_000 }),
      );
      const alive = store().keysOf(lockKind, key)[3];
      while ((await redis().zcard(alive)) < 4) await delay(10);
      await untilListening(key, 4);
      await delay(200); // each waiter looks once more when its subscription stands
      const scriptsBefore = await evalshaCalls();

      await holder.unlock();
      const first = await Promise.race(waiters);
      await delay(300);

      // The release, and the attempt of the one waiter it woke (which took the lock): nobody else tried.
      expect((await evalshaCalls()) - scriptsBefore).toBe(2);
      await first.unlock();
      await Promise.all(waiters.map(async (waiter) => (await waiter) !== first && (await waiter).unlock()));
    } finally {
      await Promise.all([...others, holding].map(closeLockApp));
    }
  });

  it.each([true, false])(
    "a release tells only the process of the waiter it hands the lock to or wakes, on that process's channel (fair: %s)",
    async (fair) => {
      const others = await Promise.all(
        [1, 2, 3].map(() => bootLockModule({ redis: server().url, commandTimeout: 200 })),
      );
      const listener = redis().duplicate();
      try {
        const key = uniqueKey(`tell-one-process-${fair}`);
        const heard: [string, string][] = [];
        await listener.psubscribe(`${store().channelOf(lockKind, key)}*`);
        listener.on('pmessage', (_pattern: string, channel: string, message: string) => heard.push([channel, message]));
        const holder = await app().locks.lock(key);
        // One waiter in each of the three other applications, none polling within the test.
        const waiters = others.map((each) =>
          each.locks.lock(key, { fair, step: 10_000, maxStep: 10_000, timeout: 30_000 }),
        );
        while ((await redis().zcard(store().keysOf(lockKind, key)[3])) < 3) await delay(10);
        await untilListening(key, 3);
        await delay(200); // each waiter looks once more when its subscription stands

        await holder.unlock();
        const { lock: first, index } = await Promise.race(
          waiters.map((waiter, i) => waiter.then((lock) => ({ lock, index: i }))),
        );
        await delay(100);

        // One message, on the channel of the application whose waiter got the lock, naming that waiter.
        const listening = others.map((each) =>
          listeningChannelOf(each.module.get<RedisStore>(LockStore), lockKind, key),
        );
        expect(new Set(listening).size).toBe(3);
        expect(heard).toHaveLength(1);
        expect(heard[0][0]).toBe(listening[index]);
        expect(heard[0][1].startsWith(`${first.token} `)).toBe(true);
        await first.unlock();
        await Promise.all(waiters.map(async (waiter) => (await waiter) !== first && (await waiter).unlock()));
      } finally {
        listener.disconnect();
        await Promise.all(others.map(closeLockApp));
      }
    },
  );

  // Found by the outside review: the release woke the waiter whose last attempt was the oldest, which
  // was giving up right then (its turn closed, the message unheard), and its give-back woke nobody:
  // the lease stayed free while the other waiters slept until their maxStep.
  it.each(['lock', 'semaphore'] as const)(
    'fair: false: a waiter that gives up just as a release woke it passes the wake on to another (%s)',
    async (which) => {
      const [kind, request] = which === 'lock' ? [lockKind, undefined] : [semaphoreKind, 1];
      const key = uniqueKey(`woken-gives-up-${which}`);
      const unordered = { fair: false, liveness: 30_000, inLine: false };
      const attempt = (token: string) => store().acquire(kind as never, key, request, token, 10_000, unordered);
      expect((await attempt('holder')).granted).toBe(true);
      expect((await attempt('first')).granted).toBe(false); // the oldest unordered waiter
      await delay(5);
      expect((await attempt('second')).granted).toBe(false);
      const second = store().openTurn(kind, key, 'second');
      try {
        expect(await second.wait({ limit: 5_000, step: 5_000 })).toBeNull(); // subscribed
        const woken = second.wait({ limit: 5_000, step: 5_000 });
        const started = performance.now();

        // The release wakes 'first', which has no turn open: it is giving up.
        expect(await store().release(kind, key, 'holder')).toBe(true);
        await delay(50);
        expect(await store().release(kind, key, 'first', { undo: true })).toBe(false);

        expect(await woken).toBeNull();
        expect(performance.now() - started).toBeLessThan(1_000);
      } finally {
        second.close();
      }
    },
  );

  // Found by the outside review: each waiter's attempt set the expiry of the line and alive sets
  // from its own liveness, so a waiter that could wait less shortened them for everyone; once it
  // left, the sets ran out under a waiter still waiting, and the release found nobody to wake.
  it('keeps a patient waiter in line after a hastier one joined and left: the release still wakes it', async () => {
    const key = uniqueKey('hasty-waiter');
    const holders = await bootLockModule({ redis: server().url });
    const hasty = await bootLockModule({ redis: server().url, commandTimeout: 100 });
    try {
      const holder = await holders.locks.lock(key);
      let releasedAt = Infinity;
      const patient = grantedAfter(app().locks.lock(key, { step: 5_000, maxStep: 5_000 }), () => releasedAt);
      await untilInLine(key, 1);
      // Alive for 2 × (50 + 100) ms after each attempt; it gives up after 150 ms.
      await expect(hasty.locks.lock(key, { timeout: 150, step: 50, maxStep: 50 })).rejects.toThrow();
      await delay(1_000);

      releasedAt = performance.now();
      expect(await holder.unlock()).toBe(true);
      const { lock, after } = await patient;
      expect(after).toBeLessThan(1_000); // its step is 5 s: it was woken
      await lock.unlock();
    } finally {
      await closeLockApp(holders);
      await closeLockApp(hasty);
    }
  });

  it("grants the lock soon after the holder's lease simply runs out, without a release", async () => {
    const key = uniqueKey('expired-holder');
    await app().locks.lock(key, { ttl: 300 });
    const started = performance.now();

    const lock = await app().locks.lock(key, { step: 5_000, maxStep: 5_000 });

    expect(performance.now() - started).toBeLessThan(1_500);
    await lock.unlock();
  });

  // Found by the outside review: the next waiter of the holder's own process waits for the holder to
  // pass it the lock, and that wait was bounded by maxStep alone, not by the holder's lease.
  it('grants the lock soon after a holder of the same process lets its lease run out, without a release', async () => {
    const key = uniqueKey('expired-local-holder');
    for (let round = 0; round < 2; round++) {
      const started = performance.now();
      const holder = app().locks.lock(key, { ttl: 300 });
      const waiter = app().locks.lock(key, { ttl: 300, step: 5_000, maxStep: 5_000 });
      await holder; // never unlocked
      const lock = await waiter;

      expect(performance.now() - started).toBeLessThan(1_500);
      await lock.unlock();
    }
  });

  // The holder's own store passes the lock straight to its waiter in the release's reply; another
  // store's waiter (another process) is told by a message. Either way a waiter that gives up as the
  // lock reaches it gives it back at once.
  it.each([
    ['of the same store, passed on in the release', 'same'],
    ['of another store, told by a message', 'other'],
  ] as const)(
    'gives a lock being handed to a waiter %s that aborts back at once, to the next in line',
    async (_, where) => {
      const key = uniqueKey('abort-handover');
      const holders = where === 'same' ? app() : await bootLockModule({ redis: server().url });
      const other = await bootLockModule({ redis: server().url });
      try {
        const holder = await holders.locks.lock(key);
        const quitter = new AbortController();
        const first = app().locks.lock(key, { signal: quitter.signal, step: 3_000, maxStep: 3_000 });
        first.catch(() => undefined);
        await untilInLine(key, 1);
        let releasedAt = Infinity;
        // Another process's waiter: one of the same process would queue behind `first` locally, not in Redis.
        const second = grantedAfter(other.locks.lock(key, { step: 3_000, maxStep: 3_000 }), () => releasedAt);
        await untilInLine(key, 2);

        releasedAt = performance.now();
        const released = holder.unlock(); // hands the lock to `first`…
        quitter.abort(new Error('gave up')); // …which gives up at that moment
        await expect(first).rejects.toThrow('gave up');
        expect(await released).toBe(true);
        const { lock, after } = await second;

        // Not a handover lease later (≥ 1 s), and far from a ttl.
        expect(after).toBeLessThan(900);
        await lock.unlock();
      } finally {
        await closeLockApp(other);
        if (holders !== app()) await closeLockApp(holders);
      }
    },
  );

  it('serves waiters of several processes in the order they arrived', async () => {
    const key = uniqueKey('order');
    const holder = await app().locks.lock(key);
    const labels = ['first', 'second', 'third', 'fourth'];
    const children: ChildProcess[] = [];
    for (const [i, label] of labels.entries()) {
      children.push(spawnWorker('line-up', [server().url, key, label, 'fair']));
      await untilInLine(key, i + 1);
    }

    await holder.unlock();
    await Promise.all(children.map(workerExited));

    expect(await redis().lrange(`${key}:granted`, 0, -1)).toEqual(labels);
  });

  it('passes the lock from one waiter of a process to the next in the release itself: no message, one script per section', async () => {
    const key = uniqueKey('local-pass');
    const messages: string[] = [];
    const listener = redis().duplicate();
    try {
      await listener.psubscribe(`${store().channelOf(lockKind, key)}*`);
      listener.on('pmessage', (_pattern: string, _channel: string, message: string) => messages.push(message));
      const holder = await app().locks.lock(key);
      const sections = 20;
      const order: number[] = [];
      const waiters = Array.from({ length: sections }, (_, i) =>
        app().locks.withLock(key, async () => {
          order.push(i);
          await delay(1);
        }),
      );
      await untilInLine(key, 1); // the first waiter of this process stands in Redis's line, the others here
      const scriptsBefore = await evalshaCalls();

      await holder.unlock();
      await Promise.all(waiters);

      expect(order).toEqual(Array.from({ length: sections }, (_, i) => i));
      expect(messages).toEqual([]);
      // One release per section (each passes the lock on); a waiter attempts only after 16 passes in a
      // row (the cohort's bound), when it must stand in Redis's line again: a few scripts more at most.
      expect((await evalshaCalls()) - scriptsBefore).toBeLessThanOrEqual(sections + 4);
    } finally {
      listener.disconnect();
    }
  });

  it('gives waiters of one process free permits at once while the semaphore has room', async () => {
    const name = uniqueKey('room');
    await app().semaphores.withPermit(name, 4, () => undefined); // the wake-up channel is subscribed from here on
    const started = performance.now();
    let inside = 0;
    let allInside!: () => void;
    const together = new Promise<void>((resolve) => (allInside = resolve));
    // Each holds its permit until all three are inside: a waiter held back (e.g. waiting for a pass
    // from a holder of its process) would wait maxStep.
    const holders = Array.from({ length: 3 }, () =>
      app().semaphores.withPermit(
        name,
        4,
        () => {
          if (++inside === 3) allInside();
          return together;
        },
        { maxStep: 10_000, timeout: 20_000 },
      ),
    );
    await Promise.all(holders);
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it('grants a permit another process frees to a waiter queued behind others in a process that holds permits', async () => {
    const other = await bootLockModule({ redis: server().url, commandTimeout: 200 });
    try {
      const name = uniqueKey('freed-elsewhere');
      const elsewhere = [await other.semaphores.acquire(name, 3), await other.semaphores.acquire(name, 3)];
      const mine = await app().semaphores.acquire(name, 3);
      // The semaphore is full: the second waiter here is refused and stands in Redis's line, the
      // third queues here behind it, in a process that holds permits.
      const second = app().semaphores.acquire(name, 3, { timeout: 20_000 });
      let freedAt = Infinity;
      const third = grantedAfter(
        app().semaphores.acquire(name, 3, { timeout: 20_000, maxStep: 10_000 }),
        () => freedAt,
      );
      while ((await redis().zcard(store().keysOf(semaphoreKind, name)[2])) < 1) await delay(10);
      await elsewhere[0].release(); // handed to `second`, first in Redis's line
      const secondPermit = await second;
      await delay(100);

      freedAt = performance.now();
      await elsewhere[1].release(); // the third, by then waiting as its process's next, must get it soon
      const { lock: thirdPermit, after } = await third;

      expect(after).toBeLessThan(2_000);
      for (const permit of [mine, secondPermit, thirdPermit]) await permit.release();
    } finally {
      await closeLockApp(other);
    }
  });

  it("serves a waiter of another process that arrived before a waiter of the holder's process first", async () => {
    const key = uniqueKey('cohort-order');
    const holder = await app().locks.lock(key);
    const remote = spawnWorker('line-up', [server().url, key, 'remote', 'fair']);
    await untilInLine(key, 1);
    // Arrives after the holder took the lock and after the remote waiter: no pass ahead of the line.
    const local = app().locks.withLock(key, () => redis().rpush(`${key}:granted`, 'local'));
    await untilInLine(key, 2);

    await holder.unlock();
    await Promise.all([workerExited(remote), local]);

    expect(await redis().lrange(`${key}:granted`, 0, -1)).toEqual(['remote', 'local']);
  });

  it('hands a lock to a waiter whose token waits for another lock too (a token option on two calls)', async () => {
    const [k1, k2] = [uniqueKey('shared-token-1'), uniqueKey('shared-token-2')];
    const other = await bootLockModule({ redis: server().url });
    try {
      const holders = [await other.locks.lock(k1), await other.locks.lock(k2)];
      const token = `shared-${Date.now()}`;
      let releasedAt = Infinity;
      const first = grantedAfter(app().locks.lock(k1, { token, step: 8_000, maxStep: 8_000 }), () => releasedAt);
      const second = app().locks.lock(k2, { token, step: 8_000, maxStep: 8_000 });
      await untilInLine(k1, 1);
      await untilInLine(k2, 1);

      releasedAt = performance.now();
      await holders[0].unlock();
      const { lock, after } = await first;

      expect(after).toBeLessThan(1_000);
      await lock.unlock();
      await holders[1].unlock();
      await (await second).unlock();
    } finally {
      await closeLockApp(other);
    }
  });

  it('hands a lock by message to a waiter whose own token has spaces in it', async () => {
    const key = uniqueKey('spaced-token');
    const other = await bootLockModule({ redis: server().url });
    try {
      const holder = await other.locks.lock(key);
      let releasedAt = Infinity;
      const token = `a waiter's token ${Date.now()}`;
      const waiter = grantedAfter(app().locks.lock(key, { token, step: 8_000, maxStep: 8_000 }), () => releasedAt);
      await untilInLine(key, 1);

      releasedAt = performance.now();
      await holder.unlock();
      const { lock, after } = await waiter;

      // The message "<token> <fence>" names it: it holds the lock at once, not after its 8 s step.
      expect(lock.token).toBe(token);
      expect(after).toBeLessThan(1_000);
      await lock.unlock();
    } finally {
      await closeLockApp(other);
    }
  });

  it("never takes a handover to the token 'x ' for one to the token 'x' (two holders at once)", async () => {
    const key = uniqueKey('trailing-space');
    const [holders, third] = [
      await bootLockModule({ redis: server().url }),
      await bootLockModule({ redis: server().url }),
    ];
    try {
      const holder = await holders.locks.lock(key);
      const spaced = app().locks.lock(key, { token: 'x ', step: 8_000, maxStep: 8_000 });
      await untilInLine(key, 1);
      let plainGranted = false;
      const plain = third.locks.lock(key, { token: 'x', step: 8_000, maxStep: 8_000 }).then((lock) => {
        plainGranted = true;
        return lock;
      });
      await untilInLine(key, 2);

      await holder.unlock(); // hands it to 'x ' with the message "x  <fence>"
      const first = await spaced;
      await delay(200); // a misread message would have granted 'x' by now
      expect(plainGranted).toBe(false);
      expect(await redis().get(store().keysOf(lockKind, key)[0])).toBe('x ');

      const firstFence = await first.fence();
      expect(await first.unlock()).toBe(true);
      const second = await plain;
      expect(await second.fence()).toBeGreaterThan(firstFence);
      expect(await second.unlock()).toBe(true);
    } finally {
      await Promise.all([closeLockApp(holders), closeLockApp(third)]);
    }
  });

  it('returns a lock handed to a waiter that died to the line within a short bound, not a ttl', async () => {
    const key = uniqueKey('dead-waiter');
    const holder = await app().locks.lock(key);
    const doomed = spawnWorker('line-up', [server().url, key, 'doomed', 'fair']);
    await untilInLine(key, 1);
    const next = app().locks.lock(key, { timeout: 20_000 });
    await untilInLine(key, 2);
    doomed.kill('SIGKILL');
    await workerExited(doomed);

    const releasedAt = performance.now();
    await holder.unlock(); // hands it to the dead waiter, first in line
    const lock = await next;

    // Handover lease (1 s) plus the dead waiter's liveness; the default ttl is 30 s.
    expect(performance.now() - releasedAt).toBeLessThan(5_000);
    await lock.unlock();
  });

  it('drops the subscription of a channel once nobody waits on it', async () => {
    const key = uniqueKey('unsubscribe');
    const holder = await app().locks.lock(key);
    const waiter = app().locks.lock(key);
    await untilInLine(key, 1);
    const channel = listeningChannelOf(store(), lockKind, key);
    // The waiter joins the line with its attempt and subscribes right after that attempt's reply.
    expect(await untilSubscribers(channel, 1)).toEqual([channel, 1]);

    await holder.unlock();
    await (await waiter).unlock();
    await delay(2_500); // a channel lingers 2 s after its last waiter

    expect(await redis().pubsub('NUMSUB', channel)).toEqual([channel, 0]);
  });
});

describe.each(STORE_KINDS)('fair order inside one process on the %s store', (kind) => {
  const app = useLockApp(kind);

  it('serves the waiters of one process first come, first served', async () => {
    const key = uniqueKey('local-order');
    const holder = await app().locks.lock(key);
    const served: number[] = [];
    const waiters = Array.from({ length: 6 }, (_, i) =>
      app()
        .locks.lock(key, { timeout: 10_000 })
        .then(async (lock) => {
          served.push(i);
          await delay(5);
          await lock.unlock();
        }),
    );
    await delay(50);

    await holder.unlock();
    await Promise.all(waiters);

    expect(served).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('serves permits first come, first served too', async () => {
    const name = uniqueKey('permit-order');
    const holders = await Promise.all([app().semaphores.acquire(name, 2), app().semaphores.acquire(name, 2)]);
    const served: number[] = [];
    const waiters = Array.from({ length: 5 }, (_, i) =>
      app()
        .semaphores.acquire(name, 2, { timeout: 10_000 })
        .then(async (permit) => {
          served.push(i);
          await delay(5);
          await permit.release();
        }),
    );
    await delay(50);

    for (const permit of holders) await permit.release();
    await Promise.all(waiters);

    expect(served).toEqual([0, 1, 2, 3, 4]);
  });
});
