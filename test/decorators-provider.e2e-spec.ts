import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Inject, Injectable, Module, SetMetadata } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  InvalidArgumentError,
  LockModule,
  LockService,
  LockTimeoutError,
  Semaphore,
  SemaphoreService,
  WithLock,
} from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
// A value import, so that `design:returntype` names Observable for the declared-Observable path.
import { interval, isObservable, Observable, take } from 'rxjs';
import { deferred } from './support/deferred.js';
import { STORE_KINDS, uniqueKey, useLockApp } from './support/lock-app.js';
import { lockKeyOf, untilWaitingAt } from './support/redis-keys.js';
import { RedisServer } from './support/redis-server.js';
import { heldAfter, until, within } from './support/timing.js';

class OutOfStockError extends Error {
  constructor(readonly sku: string) {
    super(`${sku} is out of stock`);
  }
}

const Audited = (action: string) => SetMetadata('audit', action);

@Injectable()
class InventoryService {
  readonly log: string[] = [];
  private inside = 0;
  maxInside = 0;

  @WithLock('sku:{0}')
  async reserve(sku: string, ms: number): Promise<string> {
    this.maxInside = Math.max(this.maxInside, ++this.inside);
    await delay(ms);
    this.inside--;
    this.log.push(`reserved ${sku}`);
    return sku;
  }

  /** Holds `sku:{0}` and calls reserve() on the same key: it must not wait for itself. */
  @WithLock('sku:{0}')
  async restock(sku: string, held: { resolve(): void }, finish: Promise<void>): Promise<void> {
    await this.reserve(sku, 1);
    held.resolve();
    await finish;
    this.log.push(`restocked ${sku}`);
  }

  @WithLock('sku:{0}')
  async sell(sku: string): Promise<never> {
    throw new OutOfStockError(sku);
  }

  // The types refuse a synchronous method (a locked call is asynchronous); plain JavaScript still gets a promise.
  // @ts-expect-error -- number is neither a promise nor an Observable
  @WithLock('sku:{0}')
  count(sku: string): number {
    return sku.length;
  }

  @WithLock((order: { sku: string }) => `sku:${order.sku}`)
  async ship(order: { sku: string }): Promise<string> {
    return `shipped ${order.sku}`;
  }

  @WithLock('feed:{0}')
  feed(sku: string, ticks: number): Observable<number> {
    return interval(30).pipe(take(ticks));
  }

  @Semaphore(1, { scope: 'local', timeout: 0 })
  async recount(): Promise<void> {
    await delay(50);
  }

  @Audited('above')
  @WithLock('audit:{0}')
  async auditedAbove(id: string): Promise<string> {
    return id;
  }

  @WithLock('audit:{0}')
  @Audited('below')
  async auditedBelow(id: string): Promise<string> {
    return id;
  }
}

@Module({ providers: [InventoryService], exports: [InventoryService] })
class InventoryModule {}

describe.each(STORE_KINDS)('@WithLock and @Semaphore on provider methods, on the %s store', (kind) => {
  let server: RedisServer | undefined;
  let module: TestingModule;
  let inventory: InventoryService;
  let locks: LockService;

  beforeAll(async () => {
    server = kind === 'redis' ? await RedisServer.start() : undefined;
    module = await Test.createTestingModule({
      imports: [LockModule.forRoot(server ? { redis: server.url } : {}), InventoryModule],
    }).compile();
    inventory = module.get(InventoryService);
    locks = module.get(LockService);
  });
  afterAll(async () => {
    await module.close();
    await server?.stop();
  });

  it('serialises calls from two concurrent chains on the same key', async () => {
    inventory.maxInside = 0;
    const sku = uniqueKey('sku');

    expect(await Promise.all([inventory.reserve(sku, 50), inventory.reserve(sku, 50)])).toEqual([sku, sku]);
    expect(inventory.maxInside).toBe(1);
  });

  it('runs a nested call on the same key at once while a different chain keeps waiting', async () => {
    const sku = uniqueKey('sku');
    const held = deferred();
    const finish = deferred();
    inventory.log.length = 0;

    const restocking = inventory.restock(sku, held, finish.promise);
    await held.promise;
    const otherChain = inventory.reserve(sku, 1);
    await untilWaitingAt(server?.url, lockKeyOf(`sku:${sku}`), { orAfterMs: 50 });
    expect(inventory.log).toEqual([`reserved ${sku}`]);

    finish.resolve();
    await Promise.all([restocking, otherChain]);
    expect(inventory.log).toEqual([`reserved ${sku}`, `restocked ${sku}`, `reserved ${sku}`]);
  });

  it("passes the method's own error through with its class and message, and unlocks", async () => {
    const sku = uniqueKey('sku');
    const error = await inventory.sell(sku).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(OutOfStockError);
    expect((error as OutOfStockError).message).toBe(`${sku} is out of stock`);
    expect(await locks.isLocked(`sku:${sku}`)).toBe(false);
  });

  it('returns the result of a synchronous method as a promise, and takes keys from a key function', async () => {
    expect(await (inventory.count('abc') as unknown as Promise<number>)).toBe(3);
    expect(await inventory.ship({ sku: 'x1' })).toBe('shipped x1');
  });

  it('rejects with InvalidArgumentError when a placeholder resolves to nothing', async () => {
    await expect(inventory.reserve(undefined as unknown as string, 1)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await locks.isLocked('sku:undefined')).toBe(false);
  });

  it('returns a declared Observable that takes the lock on subscription and holds it until completion', async () => {
    const sku = uniqueKey('sku');
    const feed = inventory.feed(sku, 5);
    expect(isObservable(feed)).toBe(true);
    expect(await locks.isLocked(`feed:${sku}`)).toBe(false);

    const ticks: number[] = [];
    const firstTick = deferred();
    const done = new Promise<void>((complete) =>
      feed.subscribe({ next: (tick) => (ticks.push(tick), firstTick.resolve()), complete }),
    );
    await firstTick.promise; // four more ticks, 30 ms apart, before it completes
    expect(await locks.isLocked(`feed:${sku}`)).toBe(true);

    await done;
    // The release is sent when the Observable completes, before this check on the same connection.
    expect(ticks).toEqual([0, 1, 2, 3, 4]);
    expect(await locks.isLocked(`feed:${sku}`)).toBe(false);
  });

  it('releases the lock of an Observable that is unsubscribed early', async () => {
    const sku = uniqueKey('sku');
    const firstTick = deferred();
    const subscription = inventory.feed(sku, 100).subscribe(() => firstTick.resolve());
    await firstTick.promise;
    expect(await locks.isLocked(`feed:${sku}`)).toBe(true);

    subscription.unsubscribe();
    expect(await locks.isLocked(`feed:${sku}`)).toBe(false);
  });

  it('limits a local semaphore inside the process', async () => {
    const results = await Promise.allSettled([inventory.recount(), inventory.recount()]);

    expect(results.map((result) => result.status).sort()).toEqual(['fulfilled', 'rejected']);
    expect(module.get(SemaphoreService).local('InventoryService.recount', 1).count()).toBe(1);
  });

  it('keeps metadata of other decorators whatever their order, and the method name', () => {
    const reflector = module.get(Reflector);

    const method = (name: keyof InventoryService) =>
      Object.getOwnPropertyDescriptor(InventoryService.prototype, name)!.value as () => unknown;

    expect(reflector.get('audit', method('auditedAbove'))).toBe('above');
    expect(reflector.get('audit', method('auditedBelow'))).toBe('below');
    expect(method('reserve').name).toBe('reserve');
  });
});

describe('a decorated method whose release fails', () => {
  @Injectable()
  class FreezingService {
    constructor(@Inject(RedisServer) readonly server: RedisServer) {}

    @WithLock('freezing:{0}')
    async work(id: string): Promise<string> {
      this.server.pause(); // the release that follows cannot reach Redis
      return `worked on ${id}`;
    }

    @WithLock('freezing:{0}')
    async fail(id: string): Promise<string> {
      this.server.pause();
      throw new OutOfStockError(id);
    }
  }

  let server: RedisServer;
  let module: TestingModule;

  beforeAll(async () => {
    server = await RedisServer.start();
    module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server.url, commandTimeout: 200 })],
      providers: [FreezingService, { provide: RedisServer, useValue: server }],
    }).compile();
  });
  afterAll(async () => {
    server.resume();
    await module.close();
    await server.stop();
  });

  it('still returns its result, and still throws its own error', async () => {
    const service = module.get(FreezingService);
    try {
      expect(await service.work('a')).toBe('worked on a');
    } finally {
      server.resume();
    }
    try {
      await expect(service.fail('b')).rejects.toBeInstanceOf(OutOfStockError);
    } finally {
      server.resume();
    }
  });
});

describe('a decorated provider that Nest built with a factory', () => {
  it('uses the LockService of the one application running', async () => {
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot()],
      providers: [{ provide: InventoryService, useFactory: () => new InventoryService() }],
    }).compile();
    try {
      expect(await module.get(InventoryService).reserve('sku-9', 1)).toBe('sku-9');
    } finally {
      await module.close();
    }
  });
});

describe('decorated methods without LockModule', () => {
  it('fail at bootstrap, saying which module to import', async () => {
    const compiling = Test.createTestingModule({ providers: [InventoryService] }).compile();

    await expect(compiling).rejects.toThrow(
      '@WithLock needs LockService: import LockModule.forRoot() / forRootAsync()',
    );
  });

  it('refuse to run unprotected on an instance Nest did not create', async () => {
    const inventory = new InventoryService();

    await expect(inventory.reserve('sku-1', 1)).rejects.toThrow(
      /@WithLock on InventoryService.reserve has no LockService/,
    );
    expect(inventory.log).toEqual([]);
  });

  it('refuse bad decorator options when the class is defined', () => {
    expect(() => WithLock('k', { ttl: 0 })).toThrow(InvalidArgumentError);
    expect(() => WithLock('order:{id}')).toThrow(InvalidArgumentError);
    expect(() => WithLock('order:{0')).toThrow(/"\{" is never closed in "order:\{0"/);
    expect(() => WithLock(['order:{0}', 'order:1}'])).toThrow(/"\}" closes nothing/);
    expect(() => Semaphore(0)).toThrow(InvalidArgumentError);
    expect(() => Semaphore(2, { scope: 'global' as 'local' })).toThrow(InvalidArgumentError);
    expect(() => WithLock('k', { retryAfter: -1 })).toThrow(/retryAfter/);
    expect(() => Semaphore(2, { retryAfter: 0.5 })).toThrow(/retryAfter/);
    expect(() => Semaphore(2, { scope: 'local', retryAfter: Number.NaN })).toThrow(/retryAfter/);
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

// Found by an outside review; failed before its fix.
describe.each(STORE_KINDS)('an Observable a @WithLock method returns without declaring it (%s store)', (kind) => {
  const Feeds = defineFeedsWithUndeclaredObservable();
  const app = useLockApp(kind, {}, [Feeds]);

  /** The call's result, whether the wrapper returns the Observable itself or a promise of it. */
  async function call(key: string, ms: number, overlap: Overlap): Promise<Observable<string>> {
    const feeds = app().module.get(Feeds);
    return (await Promise.resolve<unknown>(feeds.feed(key, ms, overlap))) as Observable<string>;
  }

  it('every subscription holds the lock for its own life: a second one never runs beside the first', async () => {
    const key = uniqueKey('feed');
    const overlap = { running: 0, most: 0 };
    const feed$ = await call(key, 300, overlap);
    const first = settleSubscription(feed$);
    await until('the first subscription to run, holding the lock', () => overlap.running === 1);
    const second = settleSubscription(feed$);
    const [firstEnd, secondEnd] = await Promise.all([first, second]);

    expect(overlap.most).toBe(1);
    expect(firstEnd).toBe('complete');
    // With timeout 0 the second one cannot wait: it errors (or, had it waited, it ran after the first).
    expect(secondEnd === 'complete' || secondEnd instanceof LockTimeoutError).toBe(true);
    expect(await heldAfter(() => app().locks.isLocked(key), 1_000)).toBe(false);
  });

  it('an Observable nobody subscribes to does not keep the lock', async () => {
    const key = uniqueKey('feed');
    await call(key, 10, { running: 0, most: 0 });
    expect(await heldAfter(() => app().locks.isLocked(key), 1_000)).toBe(false);
  });
});
