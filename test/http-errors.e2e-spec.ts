import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import {
  Body,
  Controller,
  Get,
  ImATeapotException,
  Injectable,
  type INestApplication,
  type LoggerService,
  Param,
  Post,
} from '@nestjs/common';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { LockModule, type LockModuleOptions, LockService, Semaphore, SemaphoreService, WithLock } from 'nest-lock';
import type { Server } from 'node:http';
import request from 'supertest';
import { RedisServer } from './support/redis-server.js';

/** What the application logs at error level, as one line each. */
class ErrorLines implements LoggerService {
  readonly errors: string[] = [];
  log() {}
  warn() {}
  error(message: unknown, ...rest: unknown[]) {
    this.errors.push([message, ...rest].map(String).join(' | '));
  }
}

/** The decorators sit on a provider's methods, as most applications put them; the controller is plain. */
@Injectable()
class Orders {
  @WithLock('order:{0}', { timeout: 0 })
  async ship(id: string) {
    return { id, shipped: true };
  }

  @Semaphore(1, { name: 'invoices', timeout: 0 })
  async invoice(id: string) {
    return { id, invoiced: true };
  }

  // A template that names a property the argument never has: the code's fault.
  @WithLock('order:{0.idd}', { timeout: 0 })
  async cancel(order: { id: string }) {
    return order;
  }

  // A key made of the request's input: an empty one is the client's fault.
  @WithLock('customer:{0.customer}', { timeout: 0 })
  async remind(order: { customer: string }) {
    return order;
  }

  async fail(): Promise<never> {
    throw new Error('not a lock error');
  }
}

@Controller('orders')
class OrdersController {
  constructor(
    private readonly orders: Orders,
    private readonly locks: LockService,
  ) {}

  @Post(':id/ship')
  ship(@Param('id') id: string) {
    return this.orders.ship(id);
  }

  @Post(':id/invoice')
  invoice(@Param('id') id: string) {
    return this.orders.invoice(id);
  }

  @Post('cancel')
  cancel(@Body() order: { id: string }) {
    return this.orders.cancel(order);
  }

  @Post('remind')
  remind(@Body() order: { customer: string }) {
    return this.orders.remind(order);
  }

  /** LockService called by hand. */
  @Post(':id/pack')
  async pack(@Param('id') id: string) {
    return this.locks.withLock(`order:${id}`, () => ({ id, packed: true }), { timeout: 0 });
  }

  @Get('fail')
  fail() {
    return this.orders.fail();
  }

  @Get('teapot')
  teapot() {
    throw new ImATeapotException();
  }
}

type Platform = 'express' | 'fastify';

interface HttpApp {
  app: INestApplication;
  logger: ErrorLines;
  http(): Server;
}

async function startApp(platform: Platform, options: LockModuleOptions): Promise<HttpApp> {
  const logger = new ErrorLines();
  const module = await Test.createTestingModule({
    // nest-lock's own lines go to this app's logger (Nest's static logger is the last app's).
    imports: [LockModule.forRoot({ ...options, logger })],
    controllers: [OrdersController],
    providers: [Orders],
  }).compile();
  const app =
    platform === 'fastify'
      ? module.createNestApplication<NestFastifyApplication>(new FastifyAdapter(), { logger })
      : module.createNestApplication({ logger });
  await app.init();
  if (platform === 'fastify') await (app as NestFastifyApplication).getHttpAdapter().getInstance().ready();
  return { app, logger, http: () => app.getHttpServer() as Server };
}

// Found by the first-hour review: through a service, every lock error reached the client as a bare 500.
describe.each<Platform>(['express', 'fastify'])(
  'lock errors as HTTP answers wherever they surface, over %s',
  (platform) => {
    let server: RedisServer;
    let mapped: HttpApp;
    /** `httpErrors: false`: the application maps errors itself. */
    let unmapped: HttpApp;

    beforeAll(async () => {
      server = await RedisServer.start();
      mapped = await startApp(platform, { redis: server.url, commandTimeout: 200 });
      unmapped = await startApp(platform, { redis: server.url, commandTimeout: 200, httpErrors: false });
    });
    afterAll(async () => {
      await mapped.app.close();
      await unmapped.app.close();
      await server.stop();
    });

    it('answers 409 for a held lock taken by a decorated provider method the controller calls', async () => {
      const held = await mapped.app.get(LockService).lock(`order:${platform}-1`);

      const response = await request(mapped.http()).post(`/orders/${platform}-1/ship`);

      expect(response.status).toBe(409);
      expect(response.body).toMatchObject({ statusCode: 409, code: 'LOCK_TIMEOUT', key: `order:${platform}-1` });
      await held.unlock();
      expect((await request(mapped.http()).post(`/orders/${platform}-1/ship`)).status).toBe(201);
    });

    it('answers 409 for a lock LockService was asked for by hand', async () => {
      const held = await mapped.app.get(LockService).lock(`order:${platform}-2`);

      const response = await request(mapped.http()).post(`/orders/${platform}-2/pack`);

      expect(response.status).toBe(409);
      expect(response.body).toMatchObject({ code: 'LOCK_TIMEOUT', key: `order:${platform}-2` });
      await held.unlock();
    });

    it('answers 503 with Retry-After for a full semaphore of a provider method', async () => {
      const permit = await mapped.app.get(SemaphoreService).acquire('invoices', 1);

      const response = await request(mapped.http()).post(`/orders/${platform}-3/invoice`);

      expect(response.status).toBe(503);
      expect(response.headers['retry-after']).toBe('1');
      expect(response.body).toMatchObject({ code: 'SEMAPHORE_TIMEOUT', semaphore: 'invoices', limit: 1 });
      await permit.release();
    });

    it('answers 400 for a key the request made empty, and 500 with one log line for a template naming what its argument lacks', async () => {
      const empty = await request(mapped.http()).post('/orders/remind').send({ customer: '' });
      const errorsBefore = mapped.logger.errors.length;
      const fault = await request(mapped.http()).post('/orders/cancel').send({ id: '42' });

      expect(empty.status).toBe(400);
      expect(empty.body).toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'key' });
      expect(fault.status).toBe(500);
      expect(fault.body).toMatchObject({ statusCode: 500, code: 'INVALID_ARGUMENT', message: 'Internal server error' });
      const logged = mapped.logger.errors.slice(errorsBefore);
      expect(logged).toHaveLength(1);
      expect(logged[0]).toMatch(
        /POST \/orders\/cancel: InvalidArgumentError \[INVALID_ARGUMENT\]: Invalid key: \{0\.idd\} of "order:\{0\.idd\}" names "idd"/,
      );
      expect(logged[0]).not.toMatch(/\n/);
    });

    it('leaves errors that are not nest-lock’s as they are', async () => {
      const plain = await request(mapped.http()).get('/orders/fail');
      const teapot = await request(mapped.http()).get('/orders/teapot');

      expect(plain.status).toBe(500);
      expect(plain.body).toEqual({ statusCode: 500, message: 'Internal server error' });
      expect(teapot.status).toBe(418);
    });

    it('httpErrors: false leaves every lock error to the application (Nest answers them 500)', async () => {
      const held = await unmapped.app.get(LockService).lock(`order:${platform}-4`);

      const viaService = await request(unmapped.http()).post(`/orders/${platform}-4/ship`);
      const byHand = await request(unmapped.http()).post(`/orders/${platform}-4/pack`);

      expect([viaService.status, byHand.status]).toEqual([500, 500]);
      expect(viaService.body).toEqual({ statusCode: 500, message: 'Internal server error' });
      await held.unlock();
    });

    describe('with Redis stopped', () => {
      beforeAll(async () => {
        await server.stop();
      });
      afterAll(async () => {
        await server.restart();
      });

      it('answers 503 with Retry-After within the timeout, through the service', async () => {
        const started = performance.now();
        const response = await request(mapped.http()).post(`/orders/${platform}-5/ship`);

        expect(response.status).toBe(503);
        expect(response.headers['retry-after']).toBe('1');
        expect(response.body).toMatchObject({ code: 'BACKEND_UNAVAILABLE', key: `order:${platform}-5` });
        expect(performance.now() - started).toBeLessThan(2_000);
      });
    });
  },
);
