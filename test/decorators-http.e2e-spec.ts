import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Body, Controller, Get, type INestApplication, Param, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { LockModule, LockService, Semaphore, WithLock } from 'nest-lock';
import type { Server } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { defer, from, map, type Observable } from 'rxjs';
import request from 'supertest';
import { deferred } from './support/deferred.js';
import { STORE_KINDS } from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';

/** Counts how many calls per id are inside at once. */
class Occupancy {
  private readonly inside = new Map<string, number>();
  readonly maxInside = new Map<string, number>();
  maxOverall = 0;
  private overall = 0;

  async occupy(id: string, ms: number): Promise<void> {
    const now = (this.inside.get(id) ?? 0) + 1;
    this.inside.set(id, now);
    this.maxInside.set(id, Math.max(this.maxInside.get(id) ?? 0, now));
    this.maxOverall = Math.max(this.maxOverall, ++this.overall);
    await delay(ms);
    this.inside.set(id, now - 1);
    this.overall--;
  }
}

const occupancy = new Occupancy();
/** The Observable handler's moments, in the test's hands: subscribed (the method has returned), and when it completes. */
let stream = { subscribed: deferred(), completes: deferred() };

@Controller('orders')
class OrdersController {
  @Post(':id/pay')
  @WithLock('order:{0}')
  async pay(@Param('id') id: string) {
    await occupancy.occupy(id, 100);
    return { id, paid: true };
  }

  // Decorator order reversed on purpose: the route metadata must reach the method either way.
  @WithLock('order:{0}', { timeout: 0 })
  @Post(':id/ship')
  async ship(@Param('id') id: string) {
    return { id, shipped: true };
  }

  @Post(':id/refresh')
  @WithLock('order:{0}', { onBusy: 'skip' })
  async refresh(@Param('id') id: string) {
    return { id, refreshed: true };
  }

  @Post('by-body')
  @WithLock('order:{0.orderId}')
  async byBody(@Body() body: { orderId?: string }) {
    return body;
  }

  // A key function that throws on input it did not expect, and a template whose getter throws.
  @Post('by-function')
  @WithLock((body: { order: { id: string } }) => `order:${body.order.id}`)
  async byFunction(@Body() body: { order: { id: string } }) {
    return body;
  }

  @Post('by-getter')
  @WithLock('order:{0.id}')
  async byGetter(@Body() _body: unknown) {
    return { getter: 'ran' };
  }

  @Get(':id/events')
  @WithLock('order:{0}')
  events(@Param('id') id: string): Observable<{ id: string }> {
    return defer(() => {
      stream.subscribed.resolve();
      return from(stream.completes.promise);
    }).pipe(map(() => ({ id })));
  }
}

@Controller('reports')
class ReportsController {
  @Get()
  @Semaphore(2, { timeout: 0 })
  async create() {
    await delay(300);
    return { report: 'done' };
  }
}

describe.each(STORE_KINDS)('@WithLock and @Semaphore over HTTP, on the %s store', (kind) => {
  let server: RedisServer | undefined;
  let app: INestApplication;
  let locks: LockService;
  const http = () => app.getHttpServer() as Server;

  beforeAll(async () => {
    server = kind === 'redis' ? await RedisServer.start() : undefined;
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot(server ? { redis: server.url } : {})],
      controllers: [OrdersController, ReportsController],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
    locks = app.get(LockService);
  });
  afterAll(async () => {
    await app.close();
    await server?.stop();
  });

  it('runs same-id requests one at a time and different ids in parallel', async () => {
    const ids = [`${kind}-a`, `${kind}-a`, `${kind}-a`, `${kind}-b`, `${kind}-c`];
    const responses = await Promise.all(ids.map((id) => request(http()).post(`/orders/${id}/pay`)));

    expect(responses.map((response) => response.status)).toEqual([201, 201, 201, 201, 201]);
    expect(occupancy.maxInside.get(`${kind}-a`)).toBe(1);
    expect(occupancy.maxOverall).toBeGreaterThanOrEqual(2);
  });

  it('answers 409 naming the key when the lock is held and timeout is 0', async () => {
    const held = await locks.lock('order:7');

    const response = await request(http()).post('/orders/7/ship');

    expect(response.status).toBe(409);
    expect(response.body).toMatchObject({ statusCode: 409, code: 'LOCK_TIMEOUT', key: 'order:7' });
    await held.unlock();
    expect((await request(http()).post('/orders/7/ship')).status).toBe(201);
  });

  it("answers 201 with an empty body, without running the handler, when onBusy: 'skip' finds the lock held", async () => {
    const held = await locks.lock('order:8');

    const skipped = await request(http()).post('/orders/8/refresh');

    expect(skipped.status).toBe(201);
    expect(skipped.text).toBe('');
    await held.unlock();
    expect((await request(http()).post('/orders/8/refresh')).body).toEqual({ id: '8', refreshed: true });
  });

  it('lets two of three concurrent requests through @Semaphore(2) and answers 503 with Retry-After', async () => {
    const responses = await Promise.all([0, 1, 2].map(() => request(http()).get('/reports')));
    const statuses = responses.map((response) => response.status).sort();

    expect(statuses).toEqual([200, 200, 503]);
    const refused = responses.find((response) => response.status === 503)!;
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.body).toMatchObject({
      code: 'SEMAPHORE_TIMEOUT',
      semaphore: 'ReportsController.create',
      limit: 2,
    });
  });

  it('answers 400 when a key placeholder resolves to nothing, and locks nothing', async () => {
    const response = await request(http()).post('/orders/by-body').send({ orderId: '' });

    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'key' });
    expect((response.body as { message: string }).message).toContain('{0.orderId}');
    expect(await locks.isLocked('order:')).toBe(false);
  });

  // A template naming a property its argument does not have is the code's fault (issue 29): a body
  // without the field is one (validate the request so that it is a 400 before the lock is asked for).
  it('answers 500 when a key placeholder names a property the argument does not have, and locks nothing', async () => {
    const response = await request(http()).post('/orders/by-body').send({});

    expect(response.status).toBe(500);
    expect(response.body).toMatchObject({ code: 'INVALID_ARGUMENT', message: 'Internal server error' });
    expect(await locks.isLocked('order:undefined')).toBe(false);
  });

  it('answers 400 (not 500) when the key function throws, naming the key argument', async () => {
    const response = await request(http()).post('/orders/by-function').send({});

    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'key' });
    expect((response.body as { message: string }).message).toContain('the key function threw');
  });

  it('answers 400 (not 500) when a getter on a template placeholder throws', async () => {
    const controller = app.get(OrdersController);
    const body = Object.defineProperty({}, 'id', {
      get() {
        throw new Error('no id yet');
      },
    });

    const error = await controller.byGetter(body).catch((e: unknown) => e);

    expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'key' });
    expect((error as Error).message).toContain('{0.id}');
    expect((error as Error).cause).toEqual(new Error('no id yet'));
  });

  it('holds the lock of an Observable handler until the Observable completes', async () => {
    stream = { subscribed: deferred(), completes: deferred() };
    const pending = request(http())
      .get(`/orders/${kind}-stream/events`)
      .then((response) => response);
    await stream.subscribed.promise;
    await delay(100); // a lock released when the method returned would be free by now
    expect(await locks.isLocked(`order:${kind}-stream`)).toBe(true);
    stream.completes.resolve();

    const response = await pending;
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ id: `${kind}-stream` });
    expect(await locks.isLocked(`order:${kind}-stream`)).toBe(false);
  });
});
