import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { NotFoundException } from '@nestjs/common';
import { Redis } from 'ioredis';
import {
  InvalidArgumentError,
  LoaderError,
  LoadTimeoutError,
  LockBackendError,
  LockNotConfiguredError,
  type LockModuleOptions,
  SingleFlightService,
} from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, createLockApp, type LockApp, STORE_KINDS } from './support/lock-app.js';
import { RedisServer, useRedisServer } from './support/redis-server.js';

/** Every application a test boots, closed after it. */
const apps: LockApp[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => closeLockApp(app)));
});

async function flightsOn(options: LockModuleOptions): Promise<SingleFlightService> {
  const app = await bootLockModule({ logger: false, ...options });
  apps.push(app);
  return app.module.get(SingleFlightService);
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
    ['a negative ttl', () => ['k', one, { ttl: -1 }] as const, 'ttl'],
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
