import { describe, expect, it } from '@jest/globals';
import { type Fairness, InvalidArgumentError } from 'nest-lock';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { lockKind, LockStore, type RedisStore, semaphoreKind } from './support/kinds.js';
import { bootLockModule, closeLockApp, uniqueKey, useLockApps } from './support/lock-app.js';
import { useRedisClient } from './support/redis-server.js';
import { killWorker, spawnWorker, workerExited } from './support/workers.js';

/** The cohort's bound (docs/API.md, "Fairness"): leases passed in a row inside one process. */
const MOST_PASSES_IN_A_ROW = 16;

/**
 * The three orders of `fair` (issue 21): `'strict'` serves waiters of every process in the order
 * they arrived; `true` lets a process serve the waiters it already had first, a bounded cohort;
 * each is checked against the other, so that the check is seen to tell them apart.
 */
describe('the order waiters are served in', () => {
  const apps = useLockApps('redis', 2);
  const server = () => apps()[0].server!;
  const redis = useRedisClient(server);
  const store = () => apps()[0].module.get<RedisStore>(LockStore);

  const lineLength = (kind: typeof lockKind | typeof semaphoreKind, id: string) =>
    redis().zcard(store().keysOf(kind, id)[2]);
  async function untilInLine(kind: typeof lockKind | typeof semaphoreKind, id: string, waiters: number) {
    const deadline = performance.now() + 10_000;
    while ((await lineLength(kind, id)) < waiters) {
      if (performance.now() > deadline) throw new Error(`${waiters} waiters never stood in line for ${id}`);
      await delay(5);
    }
  }

  /**
   * Waiter i of `count` comes from application i % 2, after the one before it is queued (in Redis's
   * line for `'strict'`, where every waiter stands; 40 ms later for the cohort, whose waiters queue in
   * their process); all wait behind one holder. Returns the order in which they were served.
   */
  async function servedOrder(fair: Fairness, count: number): Promise<number[]> {
    const key = uniqueKey(`order-${String(fair)}`);
    const holder = await apps()[0].locks.lock(key);
    const order: number[] = [];
    const waiters: Promise<void>[] = [];
    for (let i = 0; i < count; i++) {
      const { locks } = apps()[i % 2];
      waiters.push(
        locks.withLock(
          key,
          async () => {
            order.push(i);
            await delay(2);
          },
          { fair, timeout: 30_000 },
        ),
      );
      if (fair === 'strict') await untilInLine(lockKind, key, i + 1);
      else await delay(40);
    }
    await holder.unlock();
    await Promise.all(waiters);
    return order;
  }

  /** For each waiter, how many that arrived after it were served before it. */
  const overtakenBy = (order: number[]) =>
    order.map((waiter, servedAt) => order.slice(0, servedAt).filter((earlier) => earlier > waiter).length);

  it("fair: 'strict' serves eight waiters alternating between two applications in the order they arrived", async () => {
    expect(await servedOrder('strict', 8)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('fair: true (the control) serves the waiters each application already had first: the cohort', async () => {
    // The first waiter of application 0 takes the lock from Redis's line, then passes it to the
    // waiters of its application that were waiting by then; application 1's follow.
    expect(await servedOrder(true, 8)).toEqual([0, 2, 4, 6, 1, 3, 5, 7]);
  });

  it(`fair: true never lets more than ${MOST_PASSES_IN_A_ROW} later waiters pass one of another application`, async () => {
    const order = await servedOrder(true, 48);
    const overtaken = overtakenBy(order);

    expect(order).toHaveLength(48);
    expect(Math.max(...overtaken)).toBeGreaterThan(0); // the cohort did pass some ahead
    expect(Math.max(...overtaken)).toBeLessThanOrEqual(MOST_PASSES_IN_A_ROW);
  });

  it("fair: 'strict' serves the permits of a semaphore in arrival order across applications too", async () => {
    const name = uniqueKey('strict-permits');
    const holder = await apps()[0].semaphores.acquire(name, 1);
    const order: number[] = [];
    const waiters: Promise<void>[] = [];
    for (let i = 0; i < 8; i++) {
      waiters.push(
        apps()[i % 2].semaphores.withPermit(
          name,
          1,
          async () => {
            order.push(i);
            await delay(2);
          },
          { fair: 'strict', timeout: 30_000 },
        ),
      );
      await untilInLine(semaphoreKind, name, i + 1);
    }
    await holder.release();
    await Promise.all(waiters);

    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it("fair: 'strict' within one application: a release passes the lock to the next waiter of its process in its own reply, with no message", async () => {
    const key = uniqueKey('strict-local');
    const messages: string[] = [];
    const listener = redis().duplicate();
    try {
      await listener.psubscribe(`${store().channelOf(lockKind, key)}*`);
      listener.on('pmessage', (_pattern: string, _channel: string, message: string) => messages.push(message));
      const holder = await apps()[0].locks.lock(key);
      const order: number[] = [];
      const waiters: Promise<void>[] = [];
      for (let i = 0; i < 6; i++) {
        waiters.push(apps()[0].locks.withLock(key, () => void order.push(i), { fair: 'strict', timeout: 30_000 }));
        await untilInLine(lockKind, key, i + 1);
      }

      await holder.unlock();
      await Promise.all(waiters);

      expect(order).toEqual([0, 1, 2, 3, 4, 5]);
      expect(messages).toEqual([]);
    } finally {
      listener.disconnect();
    }
  });

  it("takes fair: 'strict' as the module's default, and refuses any other word", async () => {
    const strict = await bootLockModule({ redis: server().url, defaults: { fair: 'strict' } });
    try {
      const key = uniqueKey('strict-default');
      const holder = await strict.locks.lock(key);
      const order: number[] = [];
      const waiters = [0, 1, 2].map(async (i) => {
        await delay(i * 40);
        await strict.locks.withLock(key, () => void order.push(i));
      });
      // Strict waiters of one process each stand in Redis's line (no local line ahead of it).
      await untilInLine(lockKind, key, 3);
      await holder.unlock();
      await Promise.all(waiters);
      expect(order).toEqual([0, 1, 2]);
    } finally {
      await closeLockApp(strict);
    }
    await expect(apps()[0].locks.lock(uniqueKey(), { fair: 'sometimes' as never })).rejects.toThrow(
      InvalidArgumentError,
    );
    await expect(bootLockModule({ redis: server().url, defaults: { fair: 'yes' as never } })).rejects.toThrow(
      /defaults\.fair.*true, false or 'strict'/,
    );
  });

  describe('across four processes', () => {
    /** Starts a queue-waiters worker and waits until its application is up. */
    async function startQueue(key: string, fair: string): Promise<ChildProcess> {
      const child = spawnWorker('queue-waiters', [server().url, key, fair], { stdin: 'pipe', stdout: 'pipe' });
      const lines = createInterface({ input: child.stdout! });
      await once(lines, 'line');
      lines.close();
      return child;
    }

    it.each([
      ['strict', 'in the order they arrived', (order: number[]) => expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7])],
      ['true', 'the cohort first (the control)', (order: number[]) => expect(order).toEqual([0, 4, 1, 5, 2, 6, 3, 7])],
    ])('fair: %s serves eight waiters alternating between them %s', async (fair, _, check) => {
      const key = uniqueKey(`four-${fair}`);
      const children = await Promise.all([0, 1, 2, 3].map(() => startQueue(key, fair)));
      try {
        const holder = await apps()[0].locks.lock(key);
        for (let i = 0; i < 8; i++) {
          children[i % 4].stdin!.write(`${i}\n`);
          if (fair === 'strict') await untilInLine(lockKind, key, i + 1);
          else await delay(60);
        }
        await holder.unlock();
        for (const child of children) child.stdin!.end();
        await Promise.all(children.map(workerExited));

        check((await redis().lrange(`${key}:granted`, 0, -1)).map(Number));
      } finally {
        await Promise.all(children.map(killWorker));
      }
    });
  });
});
