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
 *   against: the best anchor of the same run), `floor` (the cost of the round trips alone) or
 *   `baseline` (nest-lock built from `--baseline DIR`, rows measured only with that flag);
 * - `primary`: the subject row the acceptance points are checked on;
 * - `options`: per-call options (nest-lock) or constructor settings (the others);
 * - `drawFence`: the nest-lock pair also draws the lock's fence (`await lock.fence()`) while it holds it;
 * - `topologies`: where else than one Redis it runs in `--topology` (see lib/topologies.mjs).
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
    topologies: ['cluster', 'redlock'],
  },
  {
    id: 'nest-lock-unfair',
    label: 'nest-lock (fair: false)',
    kind: 'nest-lock',
    role: 'subject',
    options: { fair: false },
    workloads: ['W3', 'W4'],
    topologies: ['cluster'],
  },
  {
    id: 'nest-lock-strict',
    label: "nest-lock (fair: 'strict')",
    kind: 'nest-lock',
    role: 'subject',
    options: { fair: 'strict' },
    workloads: ['W3', 'W4'],
  },
  // What a fence costs: the W1 and W2 pair, drawing the lock's fence while it holds it.
  {
    id: 'nest-lock-fenced',
    label: 'nest-lock (with fence())',
    kind: 'nest-lock',
    role: 'subject',
    options: {},
    drawFence: true,
    workloads: ['W1', 'W2'],
  },
  // Measured only with `--baseline DIR`: the same two rows on another build of nest-lock (the one
  // before a change), in the same run, so that a change is judged against what it changed.
  {
    id: 'nest-lock-baseline',
    label: 'nest-lock (baseline build)',
    kind: 'nest-lock',
    role: 'baseline',
    baseline: true,
    options: {},
    workloads: ALL,
  },
  {
    id: 'nest-lock-unfair-baseline',
    label: 'nest-lock (fair: false, baseline build)',
    kind: 'nest-lock',
    role: 'baseline',
    baseline: true,
    options: { fair: false },
    workloads: ['W3', 'W4'],
  },
  {
    id: 'nest-lock-strict-baseline',
    label: "nest-lock (fair: 'strict', baseline build)",
    kind: 'nest-lock',
    role: 'baseline',
    baseline: true,
    options: { fair: 'strict' },
    workloads: ['W3', 'W4'],
  },
  {
    id: 'redis-semaphore',
    label: 'redis-semaphore',
    kind: 'redis-semaphore',
    role: 'anchor',
    options: {},
    workloads: ALL,
    topologies: ['cluster', 'redlock'],
  },
  {
    id: 'redlock',
    label: 'redlock (defaults)',
    kind: 'redlock',
    role: 'anchor',
    options: {},
    workloads: LOCKS,
    topologies: ['cluster', 'redlock'],
  },
  {
    id: 'redlock-short',
    label: 'redlock (5 ms retry)',
    kind: 'redlock',
    role: 'anchor',
    options: { retryDelay: 5, retryJitter: 2 },
    workloads: LOCKS,
    topologies: ['cluster', 'redlock'],
  },
  {
    id: 'setnx',
    label: 'SET NX (5 ms poll)',
    kind: 'setnx',
    role: 'anchor',
    options: { poll: 5 },
    workloads: LOCKS,
    topologies: ['cluster'],
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
 * Opens a variant in this process on `target`: a redis:// URL, or a target spec of
 * lib/topologies.mjs (`{ kind: 'single', url }`, `{ kind: 'cluster', nodes }`, `{ kind: 'redlock', nodes }`).
 * The adapter:
 * - `pair(key)`: one uncontended acquire + release of lock `key`;
 * - `withLock(key, fn)`: runs `fn` holding lock `key` (waiting as long as it takes, up to ACQUIRE_TIMEOUT);
 * - `withPermit(name, limit, fn)`: runs `fn` holding a permit of semaphore `name`;
 * - `close()`.
 */
export async function open(variant, target, { library, baseline } = {}) {
  const spec = typeof target === 'string' ? { kind: 'single', url: target } : target;
  if (spec.kind !== 'single' && !variant.topologies?.includes(spec.kind)) {
    throw new Error(`${variant.label} does not run on ${spec.kind}`);
  }
  switch (variant.kind) {
    case 'nest-lock':
      return openNestLock(variant, spec, variant.baseline ? baseline : library);
    case 'redis-semaphore':
      return openRedisSemaphore(variant, spec);
    case 'redlock':
      return openRedlock(variant, spec);
    case 'setnx':
      return openSetNx(variant, spec);
    case 'ping':
      return openPing(spec);
    default:
      throw new Error(`no adapter for kind "${variant.kind}"`);
  }
}

/** nest-lock's module options for `spec`: the same as a user's forRoot. */
function moduleOptions(spec) {
  if (spec.kind === 'cluster') return { redis: { cluster: { nodes: spec.nodes } } };
  if (spec.kind === 'redlock') return { redlock: { nodes: spec.nodes, quarantine: 0 } };
  return { redis: spec.url };
}

async function openNestLock(variant, spec, library) {
  const { NestFactory } = await import('@nestjs/core');
  // The built library, as a user's app imports it (`npm run bench` builds it first; run.mjs hands
  // the workers a copy of that build, frozen for the whole run).
  const entry = library ? pathToFileURL(join(library, 'index.js')).href : '../../libs/lock/dist/index.js';
  const { LockModule, LockService, SemaphoreService } = await import(entry);
  const app = await NestFactory.createApplicationContext(
    LockModule.forRoot({ ...moduleOptions(spec), defaults: { ttl: LEASE } }),
    { logger: false },
  );
  const locks = app.get(LockService);
  const semaphores = app.get(SemaphoreService);
  const options = { ...variant.options, timeout: ACQUIRE_TIMEOUT };
  return {
    async pair(key) {
      const lock = await locks.lock(key, options);
      if (variant.drawFence) await lock.fence();
      await lock.unlock();
    },
    withLock: (key, fn) => locks.withLock(key, () => fn(), options),
    withPermit: (name, limit, fn) => semaphores.withPermit(name, limit, () => fn(), options),
    close: () => app.close(),
  };
}

async function openRedisSemaphore(variant, spec) {
  const { Mutex, RedlockMutex, Semaphore } = await import('redis-semaphore');
  const options = { lockTimeout: LEASE, acquireTimeout: ACQUIRE_TIMEOUT, ...variant.options };
  const hold = async (lock, fn) => {
    await lock.acquire();
    try {
      return await fn();
    } finally {
      await lock.release();
    }
  };
  if (spec.kind === 'redlock') {
    const clients = await Promise.all(spec.nodes.map((url) => connect({ kind: 'single', url })));
    return {
      async pair(key) {
        await hold(new RedlockMutex(clients, key, options), async () => undefined);
      },
      withLock: (key, fn) => hold(new RedlockMutex(clients, key, options), fn),
      withPermit: unsupported('nest-lock has no semaphore on Redlock: not compared'),
      close: () => Promise.all(clients.map(quit)),
    };
  }
  const client = await connect(spec);
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

async function openRedlock(variant, spec) {
  const { Redlock } = await import('@sesamecare-oss/redlock');
  const clients =
    spec.kind === 'redlock'
      ? await Promise.all(spec.nodes.map((url) => connect({ kind: 'single', url })))
      : [await connect(spec)];
  const settings = { retryDelay: 200, ...variant.options };
  // Its retries are counted, not timed: enough of them to wait ACQUIRE_TIMEOUT like the others.
  const redlock = new Redlock(clients, { ...settings, retryCount: Math.ceil(ACQUIRE_TIMEOUT / settings.retryDelay) });
  redlock.on('error', () => undefined);
  const acquire = (key) => redlock.acquire([key], LEASE);
  return {
    async pair(key) {
      const lock = await acquire(key);
      await lock.release();
    },
    async withLock(key, fn) {
      const lock = await acquire(key);
      try {
        return await fn();
      } finally {
        await lock.release();
      }
    },
    withPermit: unsupported('redlock has no semaphore'),
    close: () => Promise.all(clients.map(quit)),
  };
}

/** The lock everyone writes first: SET NX PX, poll every `poll` ms, compare-and-delete in Lua to release. */
async function openSetNx(variant, spec) {
  const client = await connect(spec);
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
async function openPing(spec) {
  const client = await connect(spec);
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

/** A connected ioredis client of a single server or a cluster. */
async function connect(spec) {
  const { Cluster, Redis } = await import('ioredis');
  const client =
    spec.kind === 'cluster'
      ? new Cluster(spec.nodes, { lazyConnect: true })
      : new Redis(spec.url, { lazyConnect: true });
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
