import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, Get, type INestApplication, type LoggerService, Param, Post, Query } from '@nestjs/common';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { LockModule, type LockModuleOptions, LockService, Semaphore, SemaphoreService, WithLock } from 'nest-lock';
import type { Server } from 'node:http';
import request from 'supertest';
import { RedisServer } from './support/redis-server.js';

/** Counts what the application logs as errors: a lock error mapped to an HTTP answer is not one. */
class ErrorCounter implements LoggerService {
  readonly errors: unknown[] = [];
  log() {}
  warn() {}
  error(message: unknown) {
    this.errors.push(message);
  }
}

@Controller('orders')
class OrdersController {
  @Post(':id/ship')
  @WithLock('order:{0}', { timeout: 0 })
  async ship(@Param('id') id: string) {
    return { id, shipped: true };
  }

  @Post(':id/pay')
  @WithLock('order:{0}', { timeout: 0, retryAfter: 5 })
  async pay(@Param('id') id: string) {
    return { id, paid: true };
  }

  // Without `?reason=` the key's second part is missing from the request: 400.
  @Post(':id/refund')
  @WithLock('order:{0}.{1}', { timeout: 0 })
  async refund(@Param('id') id: string, @Query('reason') reason?: string) {
    return { id, reason };
  }
}

@Controller('reports')
class ReportsController {
  @Get('daily')
  @Semaphore(1, { name: 'daily', timeout: 0 })
  async daily() {
    return { report: 'daily' };
  }

  @Get('yearly')
  @Semaphore(1, { name: 'yearly', timeout: 0, retryAfter: 7 })
  async yearly() {
    return { report: 'yearly' };
  }
}

type Platform = 'express' | 'fastify';

interface HttpApp {
  app: INestApplication;
  logger: ErrorCounter;
  http(): Server;
}

async function startApp(platform: Platform, options: LockModuleOptions): Promise<HttpApp> {
  const logger = new ErrorCounter();
  const module = await Test.createTestingModule({
    imports: [LockModule.forRoot(options)],
    controllers: [OrdersController, ReportsController],
  }).compile();
  const app =
    platform === 'fastify'
      ? module.createNestApplication<NestFastifyApplication>(new FastifyAdapter(), { logger })
      : module.createNestApplication({ logger });
  await app.init();
  if (platform === 'fastify') await (app as NestFastifyApplication).getHttpAdapter().getInstance().ready();
  return { app, logger, http: () => app.getHttpServer() as Server };
}

describe.each<Platform>(['express', 'fastify'])('HTTP answers of the decorators over %s, on Redis', (platform) => {
  let server: RedisServer;
  /** Module defaults: Retry-After 1, the default body. */
  let plain: HttpApp;
  /** Module `retryAfter: 4` and an `errorBody` of its own. */
  let shaped: HttpApp;
  /** An `errorBody` that throws (409) or answers too late (an async hook, 400). */
  let misshaped: HttpApp;

  beforeAll(async () => {
    server = await RedisServer.start();
    plain = await startApp(platform, { redis: server.url, commandTimeout: 200 });
    shaped = await startApp(platform, {
      redis: server.url,
      commandTimeout: 200,
      keyPrefix: 'shaped:',
      retryAfter: 4,
      errorBody: (body, error) => ({ problem: body.code, detail: error.message, status: body.statusCode }),
    });
    misshaped = await startApp(platform, {
      redis: server.url,
      commandTimeout: 200,
      keyPrefix: 'misshaped:',
      errorBody: (body) => {
        if (body.statusCode === 409) throw new Error('a bug in the hook');
        // What an async hook returns; a JavaScript caller's types do not stop it.
        return Promise.reject(new Error('too late')) as unknown as Record<string, unknown>;
      },
    });
  });
  afterAll(async () => {
    await plain.app.close();
    await shaped.app.close();
    await misshaped.app.close();
    await server.stop();
  });

  describe('with Redis up', () => {
    it('answers 409 with the code and key when the lock is held', async () => {
      const held = await plain.app.get(LockService).lock(`order:${platform}-1`);

      const response = await request(plain.http()).post(`/orders/${platform}-1/ship`);

      expect(response.status).toBe(409);
      expect(response.headers['retry-after']).toBeUndefined();
      expect(response.body).toEqual({
        statusCode: 409,
        error: 'Conflict',
        code: 'LOCK_TIMEOUT',
        message: `Could not lock "order:${platform}-1" at once: it is held by another owner`,
        key: `order:${platform}-1`,
      });
      await held.unlock();
      expect((await request(plain.http()).post(`/orders/${platform}-1/ship`)).status).toBe(201);
    });

    it('answers 503 with Retry-After 1 (the default) when the semaphore is full', async () => {
      const permit = await plain.app.get(SemaphoreService).acquire('daily', 1);

      const response = await request(plain.http()).get('/reports/daily');

      expect(response.status).toBe(503);
      expect(response.headers['retry-after']).toBe('1');
      expect(response.body).toMatchObject({ statusCode: 503, code: 'SEMAPHORE_TIMEOUT', semaphore: 'daily', limit: 1 });
      await permit.release();
      expect((await request(plain.http()).get('/reports/daily')).status).toBe(200);
    });

    it("takes Retry-After from the module's retryAfter, and the decorator's over it", async () => {
      const semaphores = shaped.app.get(SemaphoreService);
      const permits = [await semaphores.acquire('daily', 1), await semaphores.acquire('yearly', 1)];

      const daily = await request(shaped.http()).get('/reports/daily');
      const yearly = await request(shaped.http()).get('/reports/yearly');

      expect([daily.status, daily.headers['retry-after']]).toEqual([503, '4']);
      expect([yearly.status, yearly.headers['retry-after']]).toEqual([503, '7']);
      await Promise.all(permits.map((permit) => permit.release()));
    });

    it('sends the body errorBody shapes, for every mapped error', async () => {
      const held = await shaped.app.get(LockService).lock(`order:${platform}-2`);

      const conflict = await request(shaped.http()).post(`/orders/${platform}-2/ship`);
      const badKey = await request(shaped.http()).post(`/orders/${platform}-2/refund`);

      expect(conflict.status).toBe(409);
      expect(conflict.body).toEqual({
        problem: 'LOCK_TIMEOUT',
        detail: `Could not lock "order:${platform}-2" at once: it is held by another owner`,
        status: 409,
      });
      expect(badKey.status).toBe(400);
      expect(badKey.body).toMatchObject({ problem: 'INVALID_ARGUMENT', status: 400 });
      await held.unlock();
    });
  });

  describe('with an errorBody that fails', () => {
    it('keeps the default body when the hook throws or returns a promise, never a 500', async () => {
      const held = await misshaped.app.get(LockService).lock(`order:${platform}-3`);

      const conflict = await request(misshaped.http()).post(`/orders/${platform}-3/ship`);
      const badKey = await request(misshaped.http()).post(`/orders/${platform}-3/refund`);

      expect(conflict.status).toBe(409);
      expect(conflict.body).toMatchObject({ statusCode: 409, code: 'LOCK_TIMEOUT', key: `order:${platform}-3` });
      expect(badKey.status).toBe(400);
      expect(badKey.body).toMatchObject({ statusCode: 400, code: 'INVALID_ARGUMENT' });
      await held.unlock();
    });
  });

  describe('with Redis stopped', () => {
    beforeAll(async () => {
      await server.stop();
    });
    afterAll(async () => {
      // Back on the same port, so that the apps' clients reconnect and close cleanly.
      await server.restart();
    });

    it('answers 503 with Retry-After and the backend code on a @WithLock route, and logs no error', async () => {
      const response = await request(plain.http()).post(`/orders/${platform}-3/ship`);

      expect(response.status).toBe(503);
      expect(response.headers['retry-after']).toBe('1');
      expect(response.body).toMatchObject({
        statusCode: 503,
        error: 'Service Unavailable',
        code: 'BACKEND_UNAVAILABLE',
        key: `order:${platform}-3`,
      });
      // The store's address and why it is away are for the log, not for clients.
      expect((response.body as { message: string }).message).toBe('The lock store is unavailable; try again later');
      expect(JSON.stringify(response.body)).not.toMatch(/\bat .*\.(ts|js):\d+/);
      expect(plain.logger.errors).toEqual([]);
    });

    it("uses the decorator's retryAfter, else the module's, for a backend failure", async () => {
      const pay = await request(plain.http()).post(`/orders/${platform}-4/pay`);
      const ship = await request(shaped.http()).post(`/orders/${platform}-4/ship`);

      expect([pay.status, pay.headers['retry-after'], (pay.body as { code: string }).code]).toEqual([
        503,
        '5',
        'BACKEND_UNAVAILABLE',
      ]);
      expect([ship.status, ship.headers['retry-after']]).toEqual([503, '4']);
      expect(ship.body).toMatchObject({ problem: 'BACKEND_UNAVAILABLE', status: 503 });
    });

    it('answers 503 on a @Semaphore route too', async () => {
      const response = await request(plain.http()).get('/reports/daily');

      expect(response.status).toBe(503);
      expect(response.headers['retry-after']).toBe('1');
      expect(response.body).toMatchObject({ code: 'BACKEND_UNAVAILABLE', key: 'daily' });
      expect(plain.logger.errors).toEqual([]);
    });
  });
});
