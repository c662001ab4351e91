import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { CACHE_MANAGER, CacheModule } from '@nestjs/cache-manager';
import { NotFoundException } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import type { Cache } from 'cache-manager';
import { Redis } from 'ioredis';
import {
  InvalidArgumentError,
  LoaderError,
  LoadTimeoutError,
  LockBackendError,
  LockModule,
  LockNotConfiguredError,
  type LockModuleOptions,
  SingleFlightService,
} from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { once } from 'node:events';
import { bootLockModule, closeLockApp, createLockApp, type LockApp, STORE_KINDS } from './support/lock-app.js';
import { onWorkerReports, spawnWorker } from './support/workers.js';
import { RedisServer, useRedisServer } from './support/redis-server.js';

/** Every application a test boots, closed after it. */
const apps: LockApp[] = [];
const modules: TestingModule[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => closeLockApp(app)));
  await Promise.all(modules.splice(0).map((module) => module.close()));
});

async function flightsOn(options: LockModuleOptions): Promise<SingleFlightService> {
  const app = await bootLockModule({ logger: false, ...options });
  apps.push(app);
  return app.module.get(SingleFlightService);
}

/**
 * An application with a cache manager beside LockModule on `url`: @nestjs/cache-manager's own (in this
 * process's memory), or `cacheManager` as CACHE_MANAGER; closed after the test.
 */
async function bootWithCache(
  url: string,
  cacheManager?: { get(key: string): Promise<unknown>; set(key: string, value: unknown): Promise<void> },
): Promise<{ flights: SingleFlightService; cache: Cache }> {
  const module = await Test.createTestingModule({
    imports: [...(cacheManager ? [] : [CacheModule.register()]), LockModule.forRoot({ redis: url, logger: false })],
    providers: cacheManager ? [{ provide: CACHE_MANAGER, useValue: cacheManager }] : [],
  }).compile();
  await module.init();
  modules.push(module);
  return { flights: module.get(SingleFlightService), cache: module.get<Cache>(CACHE_MANAGER) };
}

/** A loader that counts its calls and returns `value` after `ms`. */
function counted<T>(value: T, ms = 50): { loader: () => Promise<T>; calls: () => number } {
  let calls = 0;
  return {
    loader: async () => {
      calls++;
      await delay(ms);
      return value;
    },
    calls: () => calls,
  };
}

const one = async (): Promise<number> => 1;

describe('SingleFlightService: arguments', () => {
  it.each([
    ['an empty key', () => ['', one] as const, 'key'],
    ['a loader that is no function', () => ['k', 'load'] as const, 'loader'],
    ['an unknown option', () => ['k', one, { tll: 5 }] as const, 'tll'],
    ['a timeout of 0', () => ['k', one, { timeout: 0 }] as const, 'timeout'],
    ['a negative lockTtl', () => ['k', one, { lockTtl: -1 }] as const, 'lockTtl'],
    ['a serialize that is no function', () => ['k', one, { serialize: 'json' }] as const, 'serialize'],
    ['a maxValueBytes of 0', () => ['k', one, { maxValueBytes: 0 }] as const, 'maxValueBytes'],
    ['a signal that is no AbortSignal', () => ['k', one, { signal: {} }] as const, 'signal'],
  ])('refuses %s with InvalidArgumentError, before any command', async (_what, args, argument) => {
    // No Redis there: an error of the store would show that a command was sent.
    const flights = await flightsOn({ redis: 'redis://127.0.0.1:1' });
    const load = (flights.load as (...a: unknown[]) => Promise<unknown>).bind(flights);
    await expect(load(...args())).rejects.toMatchObject({ constructor: InvalidArgumentError, argument });
  });

  it('refuses on Redlock, which keeps no shared values: LockNotConfiguredError, saying why', async () => {
    const masters = await Promise.all([1, 2, 3].map(() => RedisServer.start()));
    try {
      const flights = await flightsOn({ redlock: { nodes: masters.map((master) => master.url) } });
      await expect(flights.load('k', async () => 1)).rejects.toBeInstanceOf(LockNotConfiguredError);
      await expect(flights.load('k', async () => 1)).rejects.toThrow(/Redlock/);
    } finally {
      await Promise.all(apps.splice(0).map((app) => closeLockApp(app)));
      await Promise.all(masters.map((master) => master.stop()));
    }
  });
});

describe.each(STORE_KINDS)('SingleFlightService on the %s store, one application', (kind) => {
  async function flights(): Promise<SingleFlightService> {
    const app = await createLockApp(kind, { logger: false });
    apps.push(app);
    return app.module.get(SingleFlightService);
  }

  it('20 concurrent callers of one key share one load and its value', async () => {
    const service = await flights();
    const { loader, calls } = counted({ id: 7 });
    const values = await Promise.all(Array.from({ length: 20 }, () => service.load('product:7', loader)));
    expect(calls()).toBe(1);
    expect(new Set(values).size).toBe(1);
    expect(values[0]).toEqual({ id: 7 });
    // Nothing is kept once it is done: the next call loads again.
    await service.load('product:7', loader);
    expect(calls()).toBe(2);
  });

  it("a loader's error reaches every caller; nothing is kept, unless cacheErrorsFor", async () => {
    const service = await flights();
    let calls = 0;
    const failing = async (): Promise<never> => {
      calls++;
      await delay(20);
      throw Object.assign(new Error('backend down'), { code: 'E_DOWN' });
    };
    const results = await Promise.allSettled(Array.from({ length: 5 }, () => service.load('k', failing)));
    expect(results.map((result) => result.status)).toEqual(Array(5).fill('rejected'));
    expect((results[0] as PromiseRejectedResult).reason).toMatchObject({ message: 'backend down', code: 'E_DOWN' });
    expect(calls).toBe(1);
    await expect(service.load('k', failing)).rejects.toThrow('backend down');
    expect(calls).toBe(2);
    // Kept for 300 ms: a call within them rejects without loading; after them, it loads again.
    await expect(service.load('cached', failing, { cacheErrorsFor: 300 })).rejects.toThrow('backend down');
    await expect(service.load('cached', failing, { cacheErrorsFor: 300 })).rejects.toThrow('backend down');
    expect(calls).toBe(3);
    await delay(350);
    await expect(service.load('cached', failing, { cacheErrorsFor: 300 })).rejects.toThrow('backend down');
    expect(calls).toBe(4);
    // Whatever was thrown, even nothing at all, is kept (before: a thrown undefined was not).
    let nothings = 0;
    const throwsNothing = async (): Promise<never> => {
      nothings++;
      throw undefined; // eslint-disable-line @typescript-eslint/only-throw-error
    };
    await expect(service.load('nothing', throwsNothing, { cacheErrorsFor: 5_000 })).rejects.toBeUndefined();
    await expect(service.load('nothing', throwsNothing, { cacheErrorsFor: 5_000 })).rejects.toMatchObject({
      message: 'undefined',
    });
    expect(nothings).toBe(1);
  });

  it("a caller's timeout and signal end its own wait only: the others get the value of the one load", async () => {
    const service = await flights();
    const { loader, calls } = counted('ready', 300);
    const patient = service.load('slow', loader);
    const hasty = service.load('slow', loader, { timeout: 50 });
    const gaveUp = new AbortController();
    const aborted = service.load('slow', loader, { signal: gaveUp.signal });
    gaveUp.abort(new Error('client went away'));
    await expect(hasty).rejects.toBeInstanceOf(LoadTimeoutError);
    await expect(hasty).rejects.toMatchObject({ code: 'LOAD_TIMEOUT', key: 'slow', timeout: 50 });
    await expect(aborted).rejects.toThrow('client went away');
    await expect(patient).resolves.toBe('ready');
    expect(calls()).toBe(1);
  });
});

describe('SingleFlightService on Redis, two applications (as two processes)', () => {
  const server = useRedisServer();
  afterAll(async () => {
    await Promise.all(apps.splice(0).map((app) => closeLockApp(app)));
  });

  async function pair(): Promise<[SingleFlightService, SingleFlightService]> {
    return [await flightsOn({ redis: server().url }), await flightsOn({ redis: server().url })];
  }

  it("the other application's callers receive the value of the one load", async () => {
    const [a, b] = await pair();
    const { loader, calls } = counted({ id: 1, at: Date.now() }, 200);
    const first = a.load('shared', loader);
    await delay(20);
    const others = Array.from({ length: 10 }, () => b.load('shared', loader));
    expect(await Promise.all(others)).toEqual(Array(10).fill(await first));
    expect(calls()).toBe(1);
  });

  it("a loader's error reaches the other application as a LoaderError: its name, message, code and HTTP status", async () => {
    const [a, b] = await pair();
    const missing = async (): Promise<never> => {
      await delay(100);
      throw Object.assign(new NotFoundException('no product 9'), { code: 'E_NO_PRODUCT' });
    };
    const here = a.load('missing', missing);
    await delay(20);
    const there = b.load('missing', missing);
    await expect(here).rejects.toBeInstanceOf(NotFoundException);
    await expect(there).rejects.toBeInstanceOf(LoaderError);
    await expect(there).rejects.toMatchObject({
      name: 'NotFoundException',
      message: 'no product 9',
      code: 'E_NO_PRODUCT',
      status: 404,
    });
  });

  it('values that cannot travel: the loader gets them, the others a clear InvalidArgumentError at once', async () => {
    const [a, b] = await pair();
    for (const [key, value, options, says] of [
      ['big', 'x'.repeat(2_000), { maxValueBytes: 1_000 }, /2002 bytes serialized, above maxValueBytes \(1000\)/],
      ['bigint', { amount: 10n }, {}, /cannot be serialized/],
    ] as const) {
      const here = a.load(key, () => delay(100).then(() => value), options);
      await delay(20);
      const there = b.load(key, () => delay(100).then(() => value), options);
      await expect(here).resolves.toBe(value);
      await expect(there).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(there).rejects.toThrow(says);
    }
  });

  it('travels undefined, a 1 MB value, and values with their own serialize / deserialize', async () => {
    const [a, b] = await pair();
    const across = async <T>(key: string, value: T, options = {}) => {
      const here = a.load(key, () => delay(100).then(() => value), options);
      await delay(20);
      const there = b.load(key, () => delay(100).then(() => value), options);
      await here;
      return there;
    };
    expect(await across('nothing', undefined)).toBeUndefined();
    const megabyte = 'm'.repeat(1_000_000);
    expect(await across('megabyte', megabyte)).toBe(megabyte);
    const when = new Date('2026-11-28T12:00:00Z');
    const dates = { serialize: (d: Date) => d.toISOString(), deserialize: (text: string) => new Date(text) };
    const received = await across('date', when, dates);
    expect(received).toBeInstanceOf(Date);
    expect(received.getTime()).toBe(when.getTime());
  });

  it('leaves nothing without an expiry', async () => {
    const [a] = await pair();
    await a.load('tidy', async () => 'done');
    const redis = new Redis(server().url);
    try {
      const keys = await redis.keys('*');
      expect(keys.length).toBeGreaterThan(0);
      for (const key of keys) expect([key, await redis.pttl(key)]).not.toEqual([key, -1]);
    } finally {
      redis.disconnect();
    }
  });
});

describe('SingleFlightService with Redis away', () => {
  it('rejects with LockBackendError within the command timeout, never hangs', async () => {
    const flights = await flightsOn({ redis: 'redis://127.0.0.1:1', commandTimeout: 300 });
    const started = performance.now();
    await expect(flights.load('k', async () => 1, { timeout: 10_000 })).rejects.toBeInstanceOf(LockBackendError);
    expect(performance.now() - started).toBeLessThan(5_000);
  });
});

describe('SingleFlightService.getOrLoad: arguments', () => {
  it.each([
    ['no options', () => ['k', one] as const, 'options'],
    ['no ttl', () => ['k', one, {}] as const, 'ttl'],
    ['a ttl of 0', () => ['k', one, { ttl: 0 }] as const, 'ttl'],
    ['a negative staleFor', () => ['k', one, { ttl: 100, staleFor: -1 }] as const, 'staleFor'],
    ['an earlyRefresh of -1', () => ['k', one, { ttl: 100, earlyRefresh: -1 }] as const, 'earlyRefresh'],
    ['an unknown option', () => ['k', one, { ttl: 100, stale: 5 }] as const, 'stale'],
  ])('refuses %s with InvalidArgumentError, before any command', async (_what, args, argument) => {
    const flights = await flightsOn({ redis: 'redis://127.0.0.1:1' });
    const getOrLoad = (flights.getOrLoad as (...a: unknown[]) => Promise<unknown>).bind(flights);
    await expect(getOrLoad(...args())).rejects.toMatchObject({ constructor: InvalidArgumentError, argument });
  });
});

describe.each(STORE_KINDS)('SingleFlightService.getOrLoad on the %s store', (kind) => {
  async function flights(): Promise<SingleFlightService> {
    const app = await createLockApp(kind, { logger: false });
    apps.push(app);
    return app.module.get(SingleFlightService);
  }

  it('reads through: loads once for concurrent callers, serves the cache for ttl, loads again after it', async () => {
    const service = await flights();
    const { loader, calls } = counted({ id: 3 }, 30);
    const options = { ttl: 300, earlyRefresh: 0 };
    const first = await Promise.all(Array.from({ length: 10 }, () => service.getOrLoad('p:3', loader, options)));
    expect(first).toEqual(Array(10).fill({ id: 3 }));
    expect(calls()).toBe(1);
    expect(await service.getOrLoad('p:3', loader, options)).toEqual({ id: 3 });
    expect(calls()).toBe(1);
    await delay(350);
    expect(await service.getOrLoad('p:3', loader, options)).toEqual({ id: 3 });
    expect(calls()).toBe(2);
  });

  it('keeps a "not found" (null or undefined) for notFoundTtl, and an error not at all', async () => {
    const service = await flights();
    const { loader: nothing, calls } = counted(null, 10);
    const options = { ttl: 10_000, notFoundTtl: 200, earlyRefresh: 0 };
    expect(await service.getOrLoad('p:none', nothing, options)).toBeNull();
    expect(await service.getOrLoad('p:none', nothing, options)).toBeNull();
    expect(calls()).toBe(1);
    await delay(250);
    await service.getOrLoad('p:none', nothing, options);
    expect(calls()).toBe(2);
    let failures = 0;
    const failing = async (): Promise<never> => {
      failures++;
      throw new Error('down');
    };
    await expect(service.getOrLoad('p:err', failing, { ttl: 10_000 })).rejects.toThrow('down');
    await expect(service.getOrLoad('p:err', failing, { ttl: 10_000 })).rejects.toThrow('down');
    expect(failures).toBe(2);
  });

  it('a refresh that fails: the stale value is served, and this process tries again only a second later', async () => {
    const service = await flights();
    let attempts = 0;
    let down = false;
    const loader = async () => {
      attempts++;
      await delay(10);
      if (down) throw new Error('database down');
      return 'first';
    };
    const options = { ttl: 100, staleFor: 10_000, earlyRefresh: 0 };
    expect(await service.getOrLoad('down', loader, options)).toBe('first');
    down = true;
    await delay(150);
    const served: string[] = [];
    const end = performance.now() + 1_500;
    while (performance.now() < end) {
      served.push(await service.getOrLoad('down', loader, options));
      await delay(5);
    }
    expect(new Set(served)).toEqual(new Set(['first']));
    // The first load, then one refresh at once and one a second after it failed (before: one after each).
    expect(attempts).toBeLessThanOrEqual(4);
    expect(attempts).toBeGreaterThanOrEqual(2);
  });

  it('with staleFor, serves the stale value at once after ttl while one refresh runs, then the new value', async () => {
    const service = await flights();
    let version = 0;
    const loader = async () => {
      await delay(150);
      return ++version;
    };
    const options = { ttl: 200, staleFor: 5_000, earlyRefresh: 0 };
    expect(await service.getOrLoad('v', loader, options)).toBe(1);
    await delay(250);
    const started = performance.now();
    const stale = await Promise.all(Array.from({ length: 5 }, () => service.getOrLoad('v', loader, options)));
    // At once: the refresh (150 ms) runs in the background.
    expect(performance.now() - started).toBeLessThan(100);
    expect(stale).toEqual([1, 1, 1, 1, 1]);
    await delay(300);
    expect(await service.getOrLoad('v', loader, options)).toBe(2);
    expect(version).toBe(2);
  });
});

describe('SingleFlightService.getOrLoad on Redis, three applications (as three processes)', () => {
  const server = useRedisServer();

  /** Three applications asking for `key` every few ms for `ms`: what each call waited, and the loads. */
  async function traffic(key: string, options: { ttl: number; staleFor?: number; earlyRefresh?: number }, ms: number) {
    const services = [
      await flightsOn({ redis: server().url }),
      await flightsOn({ redis: server().url }),
      await flightsOn({ redis: server().url }),
    ];
    const loads: number[] = [];
    const loader = async () => {
      loads.push(Date.now());
      await delay(50);
      return { at: Date.now() };
    };
    await services[0].getOrLoad(key, loader, options); // the first fill
    const waits: number[] = [];
    const end = performance.now() + ms;
    await Promise.all(
      services.map(async (service) => {
        while (performance.now() < end) {
          const started = performance.now();
          await service.getOrLoad(key, loader, options);
          waits.push(performance.now() - started);
          await delay(5);
        }
      }),
    );
    waits.sort((a, b) => a - b);
    return { loads, waits, p99: waits[Math.ceil(0.99 * waits.length) - 1] };
  }

  it('stale-while-revalidate: no call waits for the loader after the first fill, one refresh per expiry for the three', async () => {
    const { loads, waits, p99 } = await traffic('swr', { ttl: 300, staleFor: 1_000, earlyRefresh: 0 }, 3_000);
    // Each refresh starts at the first call after an expiry and takes 50 ms: a fresh period lasts 300 ms from its end.
    expect(loads.length).toBeGreaterThanOrEqual(6);
    expect(loads.length).toBeLessThanOrEqual(3_000 / 300 + 2);
    // Never two loads of one expiry: loads are a fresh period apart.
    for (let i = 1; i < loads.length; i++) expect(loads[i] - loads[i - 1]).toBeGreaterThanOrEqual(300);
    expect(waits.length).toBeGreaterThan(300);
    // An order of magnitude: a call reads the cache; none waits the loader's 50 ms.
    expect(p99).toBeLessThan(40);
  });

  it('early refresh without staleFor: one load per cached value at most, and few calls wait for one', async () => {
    const { loads, waits } = await traffic('xfetch', { ttl: 300, earlyRefresh: 1 }, 3_000);
    // Refreshed before expiry, each value once: two loads are never closer than one load's 50 ms.
    for (let i = 1; i < loads.length; i++) expect(loads[i] - loads[i - 1]).toBeGreaterThanOrEqual(50);
    expect(loads.length).toBeLessThanOrEqual(3_000 / 100);
    // Calls that waited about a load (≥ 40 ms): few, most refreshes having begun before the expiry.
    const waited = waits.filter((wait) => wait >= 40).length;
    expect(waited).toBeLessThan(waits.length / 10);
  });
});

/** What an outside review broke, each fixed with this test first. */
describe('SingleFlightService: found by an outside review', () => {
  const server = useRedisServer();

  async function commandsProcessed(): Promise<number> {
    const redis = new Redis(server().url);
    try {
      return Number(/total_commands_processed:(\d+)/.exec(await redis.info('stats'))![1]);
    } finally {
      redis.disconnect();
    }
  }

  it('a loader that never ends holds its key no longer than its callers wait: another process loads it then', async () => {
    const a = await flightsOn({ redis: server().url });
    const b = await flightsOn({ redis: server().url });
    const never = () => new Promise<string>(() => undefined);
    await expect(a.load('hung', never, { timeout: 200 })).rejects.toBeInstanceOf(LoadTimeoutError);
    // Before: the lock stayed renewed for ever, and every caller of every process timed out.
    const started = performance.now();
    await expect(b.load('hung', async () => 'loaded by b', { timeout: 3_000 })).resolves.toBe('loaded by b');
    expect(performance.now() - started).toBeLessThan(1_500);
  });

  it("a read lease without a result (its reader's process died) makes the next caller wait quietly, then load", async () => {
    const flights = await flightsOn({ redis: server().url });
    const dead = await bootLockModule({ redis: server().url, logger: false });
    apps.push(dead);
    // A reader that never releases: its lease runs out after 1 s.
    await dead.locks.lock('single-flight:orphan', { mode: 'read', ttl: 1_000 });
    const before = await commandsProcessed();
    const started = performance.now();
    await expect(flights.load('orphan', async () => 'loaded', { timeout: 5_000 })).resolves.toBe('loaded');
    const commands = (await commandsProcessed()) - before;
    expect(performance.now() - started).toBeGreaterThan(500);
    // Before: hundreds of thousands of commands in that second, reading and trying again in a loop.
    expect(commands).toBeLessThan(200);
  });

  it('load("cache:x") and getOrLoad("x") are two keys: neither gets the other\'s value', async () => {
    const flights = await flightsOn({ redis: server().url });
    const [loaded, cached] = await Promise.all([
      flights.load('cache:x', () => delay(100).then(() => 'from load')),
      flights.getOrLoad('x', () => delay(100).then(() => 'from getOrLoad'), { ttl: 10_000 }),
    ]);
    expect([loaded, cached]).toEqual(['from load', 'from getOrLoad']);
  });

  it('a module whose default timeout is 0 (one attempt) still gives single-flight callers a wait, and one load', async () => {
    const flights = await flightsOn({ redis: server().url, defaults: { timeout: 0 } });
    const { loader, calls } = counted('value', 100);
    await expect(Promise.all([flights.load('t0', loader), flights.load('t0', loader)])).resolves.toEqual([
      'value',
      'value',
    ]);
    expect(calls()).toBe(1);
  });

  it('a caller whose signal has aborted already is refused at once, and no load starts for it', async () => {
    const flights = await flightsOn({ redis: server().url });
    const { loader, calls } = counted('value', 10);
    const gone = AbortSignal.abort(new Error('client left'));
    await expect(flights.load('aborted', loader, { signal: gone })).rejects.toThrow('client left');
    await expect(flights.getOrLoad('aborted', loader, { ttl: 1_000, signal: gone })).rejects.toThrow('client left');
    await delay(50);
    expect(calls()).toBe(0);
  });

  it('a thrown plain object keeps its message across processes; an HTTP status out of range is left out', async () => {
    const a = await flightsOn({ redis: server().url });
    const b = await flightsOn({ redis: server().url });
    const plain = () =>
      delay(100).then(() => Promise.reject({ message: 'plain object', code: 'E_PLAIN', status: Number.NaN }));
    const here = a.load('plain', plain);
    await delay(20);
    const there = b.load('plain', plain);
    await expect(here).rejects.toMatchObject({ message: 'plain object' });
    const error = (await there.catch((thrown: unknown) => thrown)) as LoaderError;
    expect(error).toBeInstanceOf(LoaderError);
    expect({ message: error.message, code: error.code, status: error.status }).toEqual({
      message: 'plain object',
      code: 'E_PLAIN',
      status: undefined,
    });
  });
});

describe("SingleFlightService.getOrLoad with the application's @nestjs/cache-manager", () => {
  const server = useRedisServer();

  it('keeps values in CACHE_MANAGER (one per process here): one load for both applications, then each reads its own', async () => {
    const [a, b] = [await bootWithCache(server().url), await bootWithCache(server().url)];
    const { loader, calls } = counted({ id: 9 }, 150);
    const here = a.flights.getOrLoad('p:9', loader, { ttl: 10_000 });
    await delay(20);
    const there = b.flights.getOrLoad('p:9', loader, { ttl: 10_000 });
    expect(await Promise.all([here, there])).toEqual([{ id: 9 }, { id: 9 }]);
    expect(calls()).toBe(1);
    // Each application's own cache holds it (the one that received it from the other's load too).
    for (const { cache } of [a, b]) expect(await cache.get('nest-lock:cache:p:9')).toMatch(/^\d+:\d+:v/);
    // The same entry in both (found by a second outside review): one expiry, so their refreshes meet.
    expect(await b.cache.get('nest-lock:cache:p:9')).toBe(await a.cache.get('nest-lock:cache:p:9'));
    expect(await a.flights.getOrLoad('p:9', loader, { ttl: 10_000 })).toEqual({ id: 9 });
    expect(await b.flights.getOrLoad('p:9', loader, { ttl: 10_000 })).toEqual({ id: 9 });
    expect(calls()).toBe(1);
    // Not in nest-lock's own cache on Redis.
    const redis = new Redis(server().url);
    try {
      expect(await redis.keys('*value:{cache:*')).toEqual([]);
    } finally {
      redis.disconnect();
    }
  });
});

describe('SingleFlightService: found by a second outside review', () => {
  const server = useRedisServer();

  /** Loads `key` in another application within `within` ms: the key was not left held. */
  async function loadsElsewhere(key: string, within: number): Promise<void> {
    const other = await flightsOn({ redis: server().url, defaults: { ttl: 1_000 } });
    const started = performance.now();
    await expect(other.load(key, async () => 'loaded elsewhere', { timeout: 3_000 })).resolves.toBe('loaded elsewhere');
    expect(performance.now() - started).toBeLessThan(within);
  }

  it('a caller that aborts before the lock is taken leaves the key free (before: held and renewed for ever)', async () => {
    const flights = await flightsOn({ redis: server().url, defaults: { ttl: 1_000 } });
    const controller = new AbortController();
    const call = flights.load('aborted-early', async () => 'unwanted', { signal: controller.signal });
    queueMicrotask(() => controller.abort(new Error('client hung up')));
    await expect(call).rejects.toThrow('client hung up');
    await delay(1_500);
    await loadsElsewhere('aborted-early', 1_000);
  });

  it('a caller whose timeout passes before the lock is answered leaves the key free', async () => {
    const flights = await flightsOn({ redis: server().url, defaults: { ttl: 1_000 } });
    server().pause();
    try {
      await expect(flights.load('timed-out-early', async () => 'unwanted', { timeout: 100 })).rejects.toBeInstanceOf(
        LoadTimeoutError,
      );
    } finally {
      server().resume();
    }
    await delay(1_500);
    await loadsElsewhere('timed-out-early', 1_000);
  });

  it('a background refresh slower than the callers’ timeout is not given up: one refresh at a time', async () => {
    const fleet = [
      await flightsOn({ redis: server().url }),
      await flightsOn({ redis: server().url }),
      await flightsOn({ redis: server().url }),
    ];
    let running = 0;
    let most = 0;
    let loads = 0;
    const loader = async (): Promise<number> => {
      loads++;
      most = Math.max(most, ++running);
      await delay(2_000);
      running--;
      return loads;
    };
    const options = { ttl: 200, staleFor: 60_000, timeout: 300 };
    await fleet[0].getOrLoad('slow-refresh', loader, { ...options, timeout: 5_000 });
    await delay(250);
    // Before: each refresh was given up after 300 ms (its lock with it), and another began beside it.
    const until = performance.now() + 3_000;
    while (performance.now() < until) {
      await Promise.all(fleet.map((flights) => flights.getOrLoad('slow-refresh', loader, options)));
      await delay(50);
    }
    await delay(2_100);
    expect(most).toBe(1);
    // The fill, then refreshes one after another (2 s each, 200 ms fresh between).
    expect(loads).toBeLessThanOrEqual(3);
  });

  it('a refresh received from another process is kept in a per-process CACHE_MANAGER (before: each refreshed again)', async () => {
    const [{ flights: a }, { flights: b }] = [await bootWithCache(server().url), await bootWithCache(server().url)];
    let loads = 0;
    const loader = async (): Promise<number> => (await delay(150), ++loads);
    const options = { ttl: 300, staleFor: 60_000 };
    await Promise.all([a.getOrLoad('kept', loader, options), b.getOrLoad('kept', loader, options)]);
    expect(loads).toBe(1);
    await delay(350);
    // Both stale at once: one refresh for the two; each keeps its value.
    await Promise.all([a.getOrLoad('kept', loader, options), b.getOrLoad('kept', loader, options)]);
    await delay(250);
    expect(loads).toBe(2);
    expect([await a.getOrLoad('kept', loader, options), await b.getOrLoad('kept', loader, options)]).toEqual([2, 2]);
    await delay(100);
    expect(loads).toBe(2);
  });

  it('a process that received a value keeps it with the load time, so early refresh still works on a shared cache', async () => {
    const shared = new Map<string, unknown>();
    const sharedCache = {
      get: async (key: string) => shared.get(key),
      set: async (key: string, value: unknown) => void shared.set(key, value),
    };
    const boot = async () => (await bootWithCache(server().url, sharedCache)).flights;
    const [a, b] = [await boot(), await boot()];
    const loader = () => delay(300).then(() => 'value');
    const here = a.getOrLoad('xfetch', loader, { ttl: 10_000 });
    await delay(20);
    const there = b.getOrLoad('xfetch', loader, { ttl: 10_000 });
    await delay(150);
    // A caller of the loader's own process that came late: it is no receiver, and writes nothing.
    const late = a.getOrLoad('xfetch', loader, { ttl: 10_000 });
    const written: string[] = [];
    sharedCache.set = async (key: string, value: unknown) => void (written.push(String(value)), shared.set(key, value));
    await Promise.all([here, there, late]);
    await delay(50);
    // Before: the copies of the waiters, written last, said the load took 0 ms (or the time each
    // waited): XFetch never fired early. Now every copy is the loader's entry.
    const entry = /^\d+:(\d+):/.exec(String(shared.get('nest-lock:cache:xfetch')))!;
    expect(Number(entry[1])).toBeGreaterThanOrEqual(250);
    expect(new Set(written).size).toBe(1);
  });

  it('a loader whose lease was lost meanwhile does not write over the value of the load that followed', async () => {
    const [a, b, c] = [
      await flightsOn({ redis: server().url }),
      await flightsOn({ redis: server().url }),
      await flightsOn({ redis: server().url }),
    ];
    const operator = await bootLockModule({ redis: server().url, logger: false });
    apps.push(operator);
    const slow = a.getOrLoad('overwritten', () => delay(700).then(() => 'old'), { ttl: 10_000, lockTtl: 300 });
    await delay(100);
    // The lease of a's load is taken from it (as when its process froze past the lease).
    await operator.locks.forceUnlock('single-flight-cache:overwritten');
    await expect(b.getOrLoad('overwritten', async () => 'new', { ttl: 10_000 })).resolves.toBe('new');
    await expect(slow).resolves.toBe('old');
    await delay(50);
    expect(await c.getOrLoad('overwritten', async () => 'unwanted', { ttl: 10_000 })).toBe('new');
  });

  it("getOrLoad's timeout bounds a cache that does not answer (LoadTimeoutError, not a hang)", async () => {
    const hanging = { get: () => new Promise(() => undefined), set: () => new Promise(() => undefined) };
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server().url, logger: false })],
      providers: [{ provide: CACHE_MANAGER, useValue: hanging }],
    }).compile();
    await module.init();
    modules.push(module);
    const started = performance.now();
    await expect(
      module.get(SingleFlightService).getOrLoad('hung-cache', async () => 'v', { ttl: 1_000, timeout: 300 }),
    ).rejects.toBeInstanceOf(LoadTimeoutError);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it("getOrLoad's timeout bounds the read of its own cache when Redis does not answer (before: the command timeout)", async () => {
    const flights = await flightsOn({ redis: server().url, commandTimeout: 3_000 });
    await flights.getOrLoad('frozen', async () => 'warm', { ttl: 1 });
    server().pause();
    try {
      const started = performance.now();
      await expect(flights.getOrLoad('frozen', async () => 'v', { ttl: 1_000, timeout: 300 })).rejects.toBeInstanceOf(
        LoadTimeoutError,
      );
      expect(performance.now() - started).toBeLessThan(1_500);
    } finally {
      server().resume();
    }
  });

  it('an error with a status that is no HttpException travels without it (the loader’s own process answers 500 too)', async () => {
    const a = await flightsOn({ redis: server().url });
    const b = await flightsOn({ redis: server().url });
    const failing = () =>
      delay(100).then(() => Promise.reject(Object.assign(new Error('upstream said 200'), { status: 200 })));
    const here = a.load('status', failing);
    await delay(20);
    const there = b.load('status', failing);
    await expect(here).rejects.toThrow('upstream said 200');
    await expect(there).rejects.toMatchObject({ constructor: LoaderError, status: undefined });
  });

  it('a loader that loads its own key again waits for itself until its timeout, then the key works (documented)', async () => {
    const flights = await flightsOn({ redis: server().url });
    // Not refused at once: knowing the call chain (AsyncLocalStorage) costs every promise of the
    // loader's process on Node 20 — 20 ms more on the callers' p99 of the single-flight bench.
    const reentrant = (): Promise<string> => flights.load('self', reentrant, { timeout: 300 });
    await expect(flights.load('self', reentrant, { timeout: 300 })).rejects.toBeInstanceOf(LoadTimeoutError);
    // Its inner call gives up a moment later (it joined after the lock was answered): the flight ends then.
    await delay(200);
    await expect(flights.load('self', async () => 'fine')).resolves.toBe('fine');
  });
});

describe('SingleFlightService: found by a third outside review', () => {
  const server = useRedisServer();

  it('a loader that never settles, called without pause: the stream of callers does not keep the key for ever', async () => {
    const a = await flightsOn({ redis: server().url, defaults: { ttl: 1_000 } });
    const b = await flightsOn({ redis: server().url, defaults: { ttl: 1_000 } });
    const never = () => new Promise<string>(() => undefined);
    let streaming = true;
    const stream = (async () => {
      while (streaming) {
        a.load('hung-stream', never, { timeout: 300 }).catch(() => undefined);
        await delay(100);
      }
    })();
    try {
      await delay(500);
      // Before: every caller of a joined the first flight, which never emptied: b timed out for ever.
      await expect(b.load('hung-stream', async () => 'loaded by b', { timeout: 3_000 })).resolves.toBe('loaded by b');
    } finally {
      streaming = false;
      await stream;
    }
  });

  it('a background refresh that never settles does not keep the process alive after app.close()', async () => {
    const child = spawnWorker('close-while-refreshing', [server().url], { stdout: 'pipe' });
    const exited = once(child, 'exit');
    const closing = new Promise<void>((resolve) => onWorkerReports(child, () => resolve()));
    try {
      await closing;
      const closedAt = performance.now();
      await exited;
      // Before: the refresh's wait (the stale window, 30 s) kept it alive.
      expect(performance.now() - closedAt).toBeLessThan(5_000);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });

  it('a value of exactly maxValueBytes reaches the other processes through getOrLoad too', async () => {
    const a = await flightsOn({ redis: server().url });
    const b = await flightsOn({ redis: server().url });
    const value = { s: 'x'.repeat(992) }; // 1,000 bytes of JSON
    const options = { ttl: 10_000, maxValueBytes: 1_000 };
    const here = a.getOrLoad('edge', () => delay(150).then(() => value), options);
    await delay(20);
    // Before: refused to b, its entry (value and two numbers) measured against the limit.
    await expect(Promise.all([here, b.getOrLoad('edge', () => value, options)])).resolves.toEqual([value, value]);
  });

  it('a process that received a value keeps the text that travelled, not the value serialized again', async () => {
    const [a, b] = [await bootWithCache(server().url), await bootWithCache(server().url)];
    const options = {
      ttl: 10_000,
      serialize: (value: { a: number }) => JSON.stringify(value),
      deserialize: (text: string) => ({ ...(JSON.parse(text) as { a: number }), hydrated: true }),
    };
    const here = a.flights.getOrLoad('hydrated', () => delay(150).then(() => ({ a: 1 })), options);
    await delay(20);
    await Promise.all([here, b.flights.getOrLoad('hydrated', async () => ({ a: 2 }), options)]);
    await delay(50);
    expect(await b.cache.get('nest-lock:cache:hydrated')).toBe(await a.cache.get('nest-lock:cache:hydrated'));
  });

  it('a cached text with an entry’s numbers but no record is a miss: loaded and written over, not an error', async () => {
    const flights = await flightsOn({ redis: server().url });
    const redis = new Redis(server().url);
    try {
      await redis.set('lock:value:{cache:odd}', `${Date.now() + 60_000}:5:{"old":true}`, 'PX', 60_000);
      await expect(flights.getOrLoad('odd', async () => 'loaded', { ttl: 10_000 })).resolves.toBe('loaded');
      expect(await redis.get('lock:value:{cache:odd}')).toMatch(/^\d+:\d+:v"loaded"$/);
    } finally {
      redis.disconnect();
    }
  });
});
