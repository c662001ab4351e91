import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Server } from 'node:http';
import request from 'supertest';
import { AppModule } from '../apps/demo/src/app.module.js';
import { readDemoConfig } from '../apps/demo/src/demo.config.js';
import type { StampedeRun } from '../apps/demo/src/stampede/stampede.service.js';
import { STORE_KINDS } from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';

/** `POST /stampede`: the server fires the requests at itself, all at once, and reports per lock mode. */
describe.each(STORE_KINDS)('the stampede endpoint on the %s store', (kind) => {
  let server: RedisServer | undefined;
  let app: INestApplication;
  const http = () => app.getHttpServer() as Server;
  const fire = async (body: object) => {
    const response = await request(http()).post('/stampede').send(body);
    expect(response.status).toBe(200);
    return (response.body as { runs: StampedeRun[] }).runs;
  };

  beforeAll(async () => {
    server = kind === 'redis' ? await RedisServer.start() : undefined;
    // A slow backend (1 s): without the lock every request has missed before the first load fills the cache.
    const config = readDemoConfig({ REDIS_URL: server?.url, BACKEND_LATENCY_MS: '1000' });
    const module = await Test.createTestingModule({ imports: [AppModule.register(config)] }).compile();
    app = module.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
  });
  afterAll(async () => {
    await app?.close();
    await server?.stop();
  });

  it('makes 1 backend call for 100 requests at a cold product with the lock on, and many with it off', async () => {
    const [on, off] = await fire({ n: 100, lock: 'both' });

    expect(on).toMatchObject({ lock: 'on', requests: 100, processes: 1, backendCalls: 1, statuses: { 200: 100 } });
    expect(off).toMatchObject({ lock: 'off', requests: 100, processes: 1, statuses: { 200: 100 } });
    expect(off.backendCalls).toBeGreaterThan(1);
    expect(on.productId).not.toBe(off.productId);
    // Every request waited for the 1 s load, one way or the other.
    for (const run of [on, off]) {
      expect(run.latencyMs.p50).toBeGreaterThanOrEqual(1_000);
      expect(run.latencyMs.p50).toBeLessThanOrEqual(run.latencyMs.p99);
      expect(run.latencyMs.p99).toBeLessThanOrEqual(run.latencyMs.max);
      expect(run.histogram.counts.reduce((sum, count) => sum + count, 0)).toBe(100);
    }
    expect(on.histogram.binMs).toBe(off.histogram.binMs);
  });

  it('fires the three ways at once: single-flight makes 1 backend call too, with fewer Redis commands than the lock', async () => {
    const [on, off, single] = await fire({ n: 100, lock: 'all' });

    expect([on.lock, off.lock, single.lock]).toEqual(['on', 'off', 'single-flight']);
    expect(single).toMatchObject({ requests: 100, processes: 1, backendCalls: 1, statuses: { 200: 100 } });
    expect(off.backendCalls).toBeGreaterThan(1);
    if (kind === 'redis') {
      // Each miss of the lock's workflow takes the lock and reads the cache again; single-flight's share one load.
      expect(single.redisCommandsPerRequest!).toBeLessThan(on.redisCommandsPerRequest!);
    } else {
      expect([on, off, single].map((run) => run.redisCommandsPerRequest)).toEqual([null, null, null]);
    }
  });

  it('runs one mode on the product it is given, cold again each time', async () => {
    const [first] = await fire({ n: 20, lock: 'on', productId: 77 });
    const [again] = await fire({ n: 20, lock: 'on', productId: 77 });

    expect(first).toMatchObject({ lock: 'on', productId: 77, backendCalls: 1, statuses: { 200: 20 } });
    expect(again).toMatchObject({ lock: 'on', productId: 77, backendCalls: 1, statuses: { 200: 20 } });
  });

  it('counts the statuses of an unknown product: 404 for all, one backend call', async () => {
    const [run] = await fire({ n: 30, lock: 'on', productId: 20_000 });

    expect(run).toMatchObject({ backendCalls: 1, statuses: { 404: 30 } });
  });

  it('tells the page how far a stampede reaches', async () => {
    const response = await request(http()).get('/stampede');

    expect(response.body).toEqual({ processes: 1, maxRequests: 1_000 });
  });

  it.each([
    [[], /body must be a JSON object/],
    [{ n: 0 }, /n must be a whole number from 1 to 1000, got 0/],
    [{ n: 1_001 }, /n must be a whole number from 1 to 1000/],
    [{ n: '100' }, /n must be a whole number/],
    [
      { lock: 'maybe' },
      /lock must be "on", "off", "single-flight", "both" \(on, then off\) or "all" \(the three\), got "maybe"/,
    ],
    [{ productId: 0 }, /productId must be a whole number from 1/],
    [{ productId: 1.5 }, /productId must be a whole number from 1/],
    [{ spread: 'yes' }, /spread must be true or false/],
    [{ spread: true }, /spread needs DEMO_PEERS/],
  ])('refuses %p with 400 and says why, before firing anything', async (body, message) => {
    await request(http()).delete('/stats').expect(204);
    const response = await request(http()).post('/stampede').send(body);

    expect(response.status).toBe(400);
    expect((response.body as { message: string }).message).toMatch(message);
    expect((await request(http()).get('/stats')).body).toMatchObject({ cacheHits: 0, cacheMisses: 0 });
  });
});
