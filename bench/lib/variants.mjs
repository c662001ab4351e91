// What the bench compares: one row per library (or configuration of one). The parent process
// reads this table to plan the runs; each worker process opens the row it was given with `open()`.
//
// Another configuration of nest-lock is one more row with its per-call `options` (passed to every
// `lock()`, `withLock()` and `withPermit()` call of that row; nest-lock refuses option names it
// does not know, so only pass the ones it has), like the `fair: false` row below.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';
import { now } from './clock.mjs';

const ALL = ['W1', 'W2', 'W3', 'W4'];
const LOCKS = ['W1', 'W2', 'W3'];

/** How long any acquisition may wait before the library gives up (ms); never reached in a healthy run. */
export const ACQUIRE_TIMEOUT = 60_000;
/** Lease of every lock and permit (ms): far longer than any section, so none expires during a run. */
export const LEASE = 10_000;

/**
 * - `role`: `subject` (nest-lock: what the acceptance points judge), `anchor` (what it is judged
 *   against: the best anchor of the same run) or `floor` (the cost of the round trips alone);
 * - `primary`: the subject row the acceptance points are checked on;
 * - `options`: per-call options (nest-lock) or constructor settings (the others).
 */
export const VARIANTS = [
  {
    id: 'nest-lock',
    label: 'nest-lock',
    kind: 'nest-lock',
    role: 'subject',
    primary: true,
    options: {},
    workloads: ALL,
  },
  {
    id: 'nest-lock-unfair',
    label: 'nest-lock (fair: false)',
    kind: 'nest-lock',
    role: 'subject',
    options: { fair: false },
    workloads: ['W3', 'W4'],
  },
  {
    id: 'redis-semaphore',
    label: 'redis-semaphore',
    kind: 'redis-semaphore',
    role: 'anchor',
    options: {},
    workloads: ALL,
  },
  {
    id: 'redlock',
    label: 'redlock (defaults)',
    kind: 'redlock',
    role: 'anchor',
    options: {},
    workloads: LOCKS,
  },
  {
    id: 'redlock-short',
    label: 'redlock (5 ms retry)',
    kind: 'redlock',
    role: 'anchor',
    options: { retryDelay: 5, retryJitter: 2 },
    workloads: LOCKS,
  },
  {
    id: 'setnx',
    label: 'SET NX (5 ms poll)',
    kind: 'setnx',
    role: 'anchor',
    options: { poll: 5 },
    workloads: LOCKS,
  },
  {
    id: 'ioredis-ping',
    label: 'ioredis 2×PING (floor)',
    kind: 'ping',
    role: 'floor',
    options: {},
    workloads: ['W1', 'W2'],
  },
];

/** The row `redis-benchmark` fills for W1: its PING rate halved (a pair needs at least two round trips). */
export const REDIS_BENCHMARK = {
  id: 'redis-benchmark',
  label: 'redis-benchmark PING ÷ 2 (floor)',
  kind: 'redis-benchmark',
  role: 'floor',
  options: {},
  workloads: ['W1'],
};

export function variantById(id) {
  const variant = [...VARIANTS, REDIS_BENCHMARK].find((candidate) => candidate.id === id);
  if (!variant) throw new Error(`unknown variant "${id}"`);
  return variant;
}

/**
 * Opens a variant in this process on `url`. The adapter:
 * - `pair(key)`: one uncontended acquire + release of lock `key`;
 * - `withLock(key, fn)`: runs `fn` holding lock `key` (waiting as long as it takes, up to ACQUIRE_TIMEOUT);
 * - `withPermit(name, limit, fn)`: runs `fn` holding a permit of semaphore `name`;
 * - `close()`.
 */
export async function open(variant, url, { library } = {}) {
  switch (variant.kind) {
    case 'nest-lock':
      return openNestLock(variant, url, library);
    case 'redis-semaphore':
      return openRedisSemaphore(variant, url);
    case 'redlock':
      return openRedlock(variant, url);
    case 'setnx':
      return openSetNx(variant, url);
    case 'ping':
      return openPing(url);
    default:
      throw new Error(`no adapter for kind "${variant.kind}"`);
  }
}

async function openNestLock(variant, url, library) {
  const { NestFactory } = await import('@nestjs/core');
  // The built library, as a user's app imports it (`npm run bench` builds it first; run.mjs hands
  // the workers a copy of that build, frozen for the whole run).
  const entry = library ? pathToFileURL(join(library, 'index.js')).href : '../../libs/lock/dist/index.js';
  const { LockModule, LockService, SemaphoreService } = await import(entry);
  const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: url }), { logger: false });
  const locks = app.get(LockService);
  const semaphores = app.get(SemaphoreService);
  const options = { ...variant.options, timeout: ACQUIRE_TIMEOUT };
  return {
    async pair(key) {
      const lock = await locks.lock(key, options);
      await lock.unlock();
    },
    withLock: (key, fn) => locks.withLock(key, () => fn(), options),
    withPermit: (name, limit, fn) => semaphores.withPermit(name, limit, () => fn(), options),
    close: () => app.close(),
  };
}

async function openRedisSemaphore(variant, url) {
  const { Mutex, Semaphore } = await import('redis-semaphore');
  const client = await connect(url);
  const options = { lockTimeout: LEASE, acquireTimeout: ACQUIRE_TIMEOUT, ...variant.options };
  const hold = async (lock, fn) => {
    await lock.acquire();
    try {
      return await fn();
    } finally {
      await lock.release();
    }
  };
  return {
    async pair(key) {
      const mutex = new Mutex(client, key, options);
      await mutex.acquire();
      await mutex.release();
    },
    withLock: (key, fn) => hold(new Mutex(client, key, options), fn),
    withPermit: (name, limit, fn) => hold(new Semaphore(client, name, limit, options), fn),
    close: () => quit(client),
  };
}

async function openRedlock(variant, url) {
  const { Redlock } = await import('@sesamecare-oss/redlock');
  const client = await connect(url);
  const settings = { retryDelay: 200, ...variant.options };
  // Its retries are counted, not timed: enough of them to wait ACQUIRE_TIMEOUT like the others.
  const redlock = new Redlock([client], { ...settings, retryCount: Math.ceil(ACQUIRE_TIMEOUT / settings.retryDelay) });
  redlock.on('error', () => undefined);
  return {
    async pair(key) {
      const lock = await redlock.acquire([key], LEASE);
      await lock.release();
    },
    async withLock(key, fn) {
      const lock = await redlock.acquire([key], LEASE);
      try {
        return await fn();
      } finally {
        await lock.release();
      }
    },
    withPermit: unsupported('redlock has no semaphore'),
    close: () => quit(client),
  };
}

/** The lock everyone writes first: SET NX PX, poll every `poll` ms, compare-and-delete in Lua to release. */
async function openSetNx(variant, url) {
  const client = await connect(url);
  client.defineCommand('benchCompareAndDelete', {
    numberOfKeys: 1,
    lua: `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`,
  });
  const { poll } = variant.options;
  const acquire = async (key) => {
    const token = randomBytes(16).toString('base64url');
    const deadline = now() + ACQUIRE_TIMEOUT;
    while ((await client.set(key, token, 'PX', LEASE, 'NX')) !== 'OK') {
      if (now() > deadline) throw new Error(`SET NX: timed out on ${key}`);
      await delay(poll);
    }
    return token;
  };
  const release = (key, token) => client.benchCompareAndDelete(key, token);
  return {
    async pair(key) {
      await release(key, await acquire(key));
    },
    async withLock(key, fn) {
      const token = await acquire(key);
      try {
        return await fn();
      } finally {
        await release(key, token);
      }
    },
    withPermit: unsupported('the hand-written lock has no semaphore'),
    close: () => quit(client),
  };
}

/** Two PINGs per pair: what any lock that needs one round trip to acquire and one to release costs at least. */
async function openPing(url) {
  const client = await connect(url);
  return {
    async pair() {
      await client.ping();
      await client.ping();
    },
    withLock: unsupported('PING is no lock'),
    withPermit: unsupported('PING is no semaphore'),
    close: () => quit(client),
  };
}

async function connect(url) {
  const { Redis } = await import('ioredis');
  const client = new Redis(url, { lazyConnect: true });
  await client.connect();
  return client;
}

async function quit(client) {
  await client.quit().catch(() => undefined);
  client.disconnect();
}

function unsupported(message) {
  return async () => {
    throw new Error(message);
  };
}
