import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { lockKind, LockStore, RedisStore, semaphoreKind } from './support/kinds.js';
import { bootLockModule, closeLockApp, type LockApp } from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';

/** What this file needs of the store: `RedisStore#keysOf`, every Redis key one lock or semaphore touches. */
interface KeyLayout {
  keysOf(kind: Kind, id: string): string[];
}
type Kind = typeof lockKind | typeof semaphoreKind;
const KINDS: Kind[] = [lockKind, semaphoreKind];

/**
 * Keys whose braces could move or empty the hash tag (issue 7, defect 7), keys already holding a tag,
 * keys that spell another key's companion or a semaphore's key, and unicode and very long ones.
 * The empty key is left out: it is INVALID_ARGUMENT.
 */
const TRICKY_KEYS = [
  '}',
  '}abc',
  '{',
  '{}',
  '}{',
  '{{}}',
  'a{}b',
  'a}b{c',
  '{tag}rest',
  '{}{tag}',
  'x{y}z{w}',
  'user:{42}:profile',
  'a',
  '{a}',
  'a}',
  'a}:fence',
  '{a}:fence',
  ':fence',
  'n',
  'sem:{n}',
  'sem:n',
  '🔒',
  '{🔒}',
  'ключ{}',
  '\u00e9',
  'e\u0301',
  'nul\0byte',
  'line\nbreak',
  'glob*?[x]',
  ' ',
  'x'.repeat(10_000),
  `{${'y'.repeat(5_000)}}`,
];

/** The tag Redis hashes: between the first `{` and the first `}` after it, if not empty; else the whole key. */
function hashTagOf(redisKey: string): string | undefined {
  const open = redisKey.indexOf('{');
  const close = redisKey.indexOf('}', open + 1);
  return open >= 0 && close > open + 1 ? redisKey.slice(open + 1, close) : undefined;
}

async function keySlots(node: Redis, redisKeys: string[]): Promise<number[]> {
  const pipeline = node.pipeline();
  for (const redisKey of redisKeys) pipeline.call('CLUSTER', 'KEYSLOT', redisKey);
  const replies = (await pipeline.exec()) ?? [];
  return replies.map(([error, slot]) => {
    if (error) throw error;
    return Number(slot);
  });
}

async function scanAll(redis: Redis): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  for (let rounds = 0; rounds < 1_000; rounds++) {
    const [next, keys] = await redis.scan(cursor, 'COUNT', 1_000);
    found.push(...keys);
    cursor = next;
    if (cursor === '0') return found;
  }
  throw new Error('SCAN did not finish in 1,000 rounds');
}

/**
 * Every Redis key of one lock or semaphore is in one cluster slot, whatever braces the user key holds;
 * distinct user keys never share a Redis key; checked against a real server's CLUSTER KEYSLOT.
 */
describe('the Redis key layout', () => {
  let configDir: string;
  /** `--cluster-enabled yes`, owning every slot: its KEYSLOT is the truth, and it refuses CROSSSLOT scripts. */
  let clusterNode: RedisServer;
  let cluster: Redis;
  let server: RedisServer;
  let redis: Redis;
  let app: LockApp;
  let prefixedApp: LockApp;

  beforeAll(async () => {
    configDir = await mkdtemp(join(tmpdir(), 'nest-lock-cluster-'));
    clusterNode = await RedisServer.start({
      args: ['--cluster-enabled', 'yes', '--cluster-config-file', join(configDir, 'nodes.conf')],
    });
    cluster = new Redis(clusterNode.url);
    await cluster.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    server = await RedisServer.start();
    redis = new Redis(server.url);
    app = await bootLockModule({ redis: server.url });
    prefixedApp = await bootLockModule({ redis: server.url, keyPrefix: 'jobs:' });
  });
  afterAll(async () => {
    await closeLockApp(prefixedApp);
    await closeLockApp(app);
    redis?.disconnect();
    await server?.stop();
    cluster?.disconnect();
    await clusterNode?.stop();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  function layoutOf(lockApp: LockApp): KeyLayout {
    const store = lockApp.module.get<KeyLayout>(LockStore);
    expect(store).toBeInstanceOf(RedisStore);
    return store;
  }

  describe('in a cluster', () => {
    it.each([
      ['the default prefix', 'lock:'],
      ['the prefix jobs:', 'jobs:'],
    ])('puts every key of a lock, and of a semaphore, in one slot (CLUSTER KEYSLOT), with %s', async (_, prefix) => {
      const layout = layoutOf(prefix === 'lock:' ? app : prefixedApp);
      const split: { kind: Kind; key: string; slots: Record<string, number> }[] = [];
      for (const kind of KINDS) {
        for (const key of TRICKY_KEYS) {
          const redisKeys = layout.keysOf(kind, key);
          // The lease (lock key or permit set) and its fence counter, at least.
          expect(redisKeys.length).toBeGreaterThanOrEqual(2);
          expect(redisKeys.filter((redisKey) => !redisKey.startsWith(prefix))).toEqual([]);
          const slots = await keySlots(cluster, redisKeys);
          if (new Set(slots).size !== 1) {
            split.push({ kind, key, slots: Object.fromEntries(redisKeys.map((redisKey, i) => [redisKey, slots[i]])) });
          }
        }
      }

      expect(split).toEqual([]);
    });

    it('control: the plain layout would split the lock "}abc" and its fence counter over two slots', async () => {
      const [lockKey, fenceCounter] = await keySlots(cluster, ['lock:{}abc}', 'lock:{}abc}:fence']);

      expect(lockKey).not.toBe(fenceCounter);
    });

    it("asks the server, because ioredis's client-side slot function disagrees with it for such keys", async () => {
      const require = createRequire(import.meta.url);
      const clientSideSlot = require('cluster-key-slot') as (key: string) => number;
      const [serverSlot] = await keySlots(cluster, ['lock:{}abc}']);

      expect(clientSideSlot('lock:{}abc}')).not.toBe(serverSlot);
    });

    it('locks and gives back every tricky key, and a semaphore of every tricky name, on a one-node cluster', async () => {
      const deadline = performance.now() + 10_000;
      while (!String(await cluster.call('CLUSTER', 'INFO')).includes('cluster_state:ok')) {
        if (performance.now() > deadline) throw new Error('the one-node cluster did not reach cluster_state:ok');
        await delay(100);
      }
      const onCluster = await bootLockModule({ redis: clusterNode.url });
      try {
        const failures: Record<string, string> = {};
        for (const key of TRICKY_KEYS) {
          try {
            const lock = await onCluster.locks.lock(key, { timeout: 0 });
            expect(await onCluster.locks.tryLock(key)).toBeNull();
            // The fence script touches the lease and its counter: one slot, no CROSSSLOT.
            expect(await lock.fence()).toBeGreaterThan(0);
            expect(await lock.unlock()).toBe(true);
            const permit = await onCluster.semaphores.acquire(key, 1, { timeout: 0 });
            expect(await onCluster.semaphores.count(key)).toBe(1);
            expect(await permit.fence()).toBeGreaterThan(0);
            expect(await permit.release()).toBe(true);
          } catch (error) {
            failures[JSON.stringify(key).slice(0, 40)] = String(error);
          }
        }

        expect(failures).toEqual({});
      } finally {
        await closeLockApp(onCluster);
      }
    });
  });

  describe('for distinct keys', () => {
    it('never maps two user keys, or a lock and a semaphore, to the same Redis key', () => {
      const layout = layoutOf(app);
      // Hash tags the layout itself makes (digests) are user keys too: none may land on another key's layout.
      const tags = TRICKY_KEYS.flatMap((key) => layout.keysOf(lockKind, key).map(hashTagOf));
      const keys = [...new Set([...TRICKY_KEYS, ...tags.filter((tag): tag is string => tag !== undefined)])];

      const owners = new Map<string, string[]>();
      for (const kind of KINDS) {
        for (const key of keys) {
          for (const redisKey of layout.keysOf(kind, key)) {
            owners.set(redisKey, [...(owners.get(redisKey) ?? []), `${kind.name} ${JSON.stringify(key).slice(0, 40)}`]);
          }
        }
      }

      expect([...owners.values()].filter((users) => users.length > 1)).toEqual([]);
    });

    it('gives the same keys for the same user key every time, and keeps a key that already holds a tag apart', () => {
      const layout = layoutOf(app);

      expect(layout.keysOf(lockKind, '{tag}rest')).toEqual(layout.keysOf(lockKind, '{tag}rest'));
      expect(layout.keysOf(lockKind, 'user:{42}:profile')).not.toEqual(layout.keysOf(lockKind, 'user:{43}:profile'));
      expect(layout.keysOf(lockKind, '{tag}rest')).not.toEqual(layout.keysOf(lockKind, 'tag'));
      // Keys without braces keep the documented layout, so existing locks need no migration.
      expect(layout.keysOf(lockKind, 'a')).toContain('lock:{a}');
      expect(layout.keysOf(semaphoreKind, 'reports')).toContain('lock:sem:{reports}');
    });
  });

  describe('with long keys', () => {
    /** The longest Redis key name nest-lock may write: prefix, digest tag, a readable head of the key, a suffix. */
    const LONGEST_NAME = 300;

    it('stores a key or name above 200 bytes under a digest: no Redis key name is long, whatever the key', async () => {
      const layout = layoutOf(app);
      for (const key of ['x'.repeat(10_000), `{${'y'.repeat(5_000)}}`, '🔒'.repeat(60), 'é'.repeat(101)]) {
        for (const kind of KINDS) {
          for (const redisKey of layout.keysOf(kind, key)) {
            expect(Buffer.byteLength(redisKey)).toBeLessThanOrEqual(LONGEST_NAME);
          }
        }
      }
      // At the bound, a key is still its own tag.
      expect(layout.keysOf(lockKind, 'k'.repeat(200))[0]).toBe(`lock:{${'k'.repeat(200)}}`);
    });

    it('keeps long keys that differ only in their last character apart', async () => {
      const common = 'order:'.repeat(2_000);
      const first = await app.locks.lock(`${common}1`, { timeout: 0 });
      const second = await app.locks.lock(`${common}2`, { timeout: 0 });
      expect(await app.locks.tryLock(`${common}1`)).toBeNull();
      const permit = await app.semaphores.acquire(`${common}1`, 1, { timeout: 0 });
      expect(await app.semaphores.tryAcquire(`${common}1`, 1)).toBeNull();
      expect(await app.semaphores.count(`${common}2`)).toBe(0);

      await Promise.all([first.unlock(), second.unlock(), permit.release()]);
      expect(await app.locks.isLocked(`${common}1`)).toBe(false);
    });

    it('leaves nothing in Redis without an expiry, nor with a long name, after 10,000 lock/unlock cycles over distinct 10 kB keys', async () => {
      const longKeys = await bootLockModule({ redis: server.url, keyPrefix: 'long:' });
      try {
        const head = 'k'.repeat(10_000);
        let next = 0;
        const fences: number[] = [];
        await Promise.all(
          Array.from({ length: 16 }, async () => {
            while (next < 10_000) {
              const i = next++;
              if (i % 10 === 0) {
                const permit = await longKeys.semaphores.acquire(`${head}:${i}`, 2, { timeout: 0 });
                fences.push(await permit.fence());
                await permit.release();
              } else {
                const lock = await longKeys.locks.lock(`${head}:${i}`, { timeout: 0 });
                fences.push(await lock.fence());
                await lock.unlock();
              }
            }
          }),
        );
        expect(fences.every((fence) => fence > 0)).toBe(true);

        const left = (await scanAll(redis)).filter((redisKey) => redisKey.startsWith('long:'));
        expect(left.length).toBeGreaterThan(0);
        const pttls = await Promise.all(left.map((redisKey) => redis.pttl(redisKey)));
        expect(left.filter((_, i) => pttls[i] < 0)).toEqual([]);
        expect(left.filter((redisKey) => Buffer.byteLength(redisKey) > LONGEST_NAME)).toEqual([]);
      } finally {
        await closeLockApp(longKeys);
      }
    }, 120_000);
  });

  describe('on a plain server', () => {
    it('locks every tricky key for one owner at a time, and semaphores of every tricky name', async () => {
      const other = await bootLockModule({ redis: server.url });
      try {
        for (const key of TRICKY_KEYS) {
          const lock = await app.locks.lock(key, { timeout: 0 });
          expect(await other.locks.tryLock(key)).toBeNull();
          expect(await app.locks.isLocked(key)).toBe(true);
          expect(await lock.unlock()).toBe(true);
          expect(await other.locks.isLocked(key)).toBe(false);

          const permit = await app.semaphores.acquire(key, 1, { timeout: 0 });
          expect(await other.semaphores.tryAcquire(key, 1)).toBeNull();
          expect(await permit.release()).toBe(true);
          expect(await other.semaphores.count(key)).toBe(0);
        }
      } finally {
        await closeLockApp(other);
      }
    });

    it('writes no Redis key that keysOf does not name, and the lease is among them', async () => {
      const layout = layoutOf(app);
      const strays: Record<string, string[]> = {};
      for (const key of TRICKY_KEYS) {
        const label = JSON.stringify(key).slice(0, 40);

        await redis.flushall();
        const lock = await app.locks.lock(key, { timeout: 0 });
        await lock.fence(); // the fence counter is written when a fence is drawn
        const lockKeys = await scanAll(redis);
        const tokens = await Promise.all(lockKeys.map((redisKey) => redis.get(redisKey).catch(() => null)));
        expect(tokens).toContain(lock.token);
        await lock.unlock();
        const lockStrays = lockKeys.filter((redisKey) => !layout.keysOf(lockKind, key).includes(redisKey));
        if (lockStrays.length > 0) strays[`lock ${label}`] = lockStrays;

        await redis.flushall();
        const permit = await app.semaphores.acquire(key, 2, { timeout: 0 });
        await permit.fence();
        const semaphoreKeys = await scanAll(redis);
        const holders = await Promise.all(
          semaphoreKeys.map((redisKey) => redis.zscore(redisKey, permit.token).catch(() => null)),
        );
        expect(holders.some((score) => score !== null)).toBe(true);
        await permit.release();
        const semaphoreStrays = semaphoreKeys.filter(
          (redisKey) => !layout.keysOf(semaphoreKind, key).includes(redisKey),
        );
        if (semaphoreStrays.length > 0) strays[`semaphore ${label}`] = semaphoreStrays;
      }

      expect(strays).toEqual({});
    });
  });
});
