import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Server } from 'node:http';
import request from 'supertest';
import { AppModule } from '../apps/demo/src/app.module.js';
import { readDemoConfig } from '../apps/demo/src/demo.config.js';
import { STORE_KINDS } from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';

describe.each(STORE_KINDS)('demo app on the %s store', (kind) => {
  let server: RedisServer | undefined;
  let app: INestApplication;
  const http = () => app.getHttpServer() as Server;
  const stats = async () => (await request(http()).get('/stats')).body as Record<string, number>;
  const getMany = (path: string, count: number) =>
    Promise.all(Array.from({ length: count }, () => request(http()).get(path)));

  beforeAll(async () => {
    server = kind === 'redis' ? await RedisServer.start() : undefined;
    const module = await Test.createTestingModule({
      imports: [AppModule.register(readDemoConfig({ REDIS_URL: server?.url, BACKEND_LATENCY_MS: '200' }))],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
  });
  afterAll(async () => {
    await app.close();
    await server?.stop();
  });
  beforeEach(async () => {
    await request(http()).delete('/stats').expect(204);
  });

  it('answers 100 concurrent misses of one product with one backend call', async () => {
    const responses = await getMany('/products/42', 100);

    expect(new Set(responses.map((response) => response.status))).toEqual(new Set([200]));
    expect(new Set(responses.map((response) => JSON.stringify(response.body))).size).toBe(1);
    expect(responses[0].body).toMatchObject({ id: 42, name: 'Product 42' });
    // Under load a late request may find the cache filled already: a hit, not a miss.
    const { backendCalls, cacheHits, cacheMisses } = await stats();
    expect(backendCalls).toBe(1);
    expect(cacheHits + cacheMisses).toBe(100);
  });

  it('caches "not found": 50 concurrent requests for an unknown id make one backend call, and repeats none', async () => {
    const first = await getMany('/products/20000', 50);
    const again = await getMany('/products/20000', 50);

    expect([...first, ...again].every((response) => response.status === 404)).toBe(true);
    expect(first[0].body).toMatchObject({ message: 'There is no product 20000' });
    const { backendCalls, cacheHits } = await stats();
    expect(backendCalls).toBe(1);
    expect(cacheHits).toBeGreaterThanOrEqual(50);
  });

  it('answers a failing backend call with a clear 502, and lets the next request reach the backend at once', async () => {
    await request(http()).post('/backend/failures/7').expect(204);
    const failed = await request(http()).get('/products/7');
    expect(failed.status).toBe(502);
    expect(failed.body).toMatchObject({ message: 'the catalogue backend failed to load product 7' });

    await request(http()).delete('/backend/failures/7').expect(204);
    const started = performance.now();
    const next = await request(http()).get('/products/7');
    expect(next.status).toBe(200);
    // Well under the lock's timeout (5 s): the failed load released the lock in `finally`.
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(await stats()).toMatchObject({ backendCalls: 2 });
  });

  it('stampedes the backend without the lock (the control that shows the count can fail)', async () => {
    await getMany('/products/43?lock=off', 100);

    expect((await stats()).backendCalls).toBeGreaterThan(1);
  });

  it('evicts one product from the cache', async () => {
    await request(http()).get('/products/44').expect(200);
    await request(http()).delete('/cache/44').expect(204);
    await request(http()).get('/products/44').expect(200);

    expect(await stats()).toMatchObject({ backendCalls: 2, cacheMisses: 2 });
  });

  it('serves the page that fires the stampede', async () => {
    const response = await request(http()).get('/');

    expect(response.status).toBe(200);
    expect(response.headers['content-type']).toContain('text/html');
    expect(response.text).toContain('Fire 100 requests');
  });

  it('runs one reindex at a time (409) and two reports at a time (503 with Retry-After)', async () => {
    const reindex = await Promise.all([0, 1].map(() => request(http()).post('/reindex')));
    expect(reindex.map((response) => response.status).sort()).toEqual([201, 409]);

    const reports = await Promise.all([0, 1, 2].map(() => request(http()).post('/reports')));
    expect(reports.map((response) => response.status).sort()).toEqual([201, 201, 503]);
    expect(reports.find((response) => response.status === 503)!.headers['retry-after']).toBe('1');
  });
});

describe('demo configuration', () => {
  it('has defaults for everything, the memory store included', () => {
    expect(readDemoConfig({})).toEqual({
      port: 3000,
      redisUrl: undefined,
      backendLatencyMs: 200,
      cacheTtlMs: 60_000,
      notFoundTtlMs: 10_000,
      lock: true,
      peers: [],
    });
  });

  it.each([
    [{ PORT: 'eighty' }, /PORT/],
    [{ BACKEND_LATENCY_MS: '-5' }, /BACKEND_LATENCY_MS/],
    [{ CACHE_TTL_MS: '0' }, /CACHE_TTL_MS/],
    [{ REDIS_URL: 'localhost:6379' }, /REDIS_URL/],
    [{ DEMO_LOCK: 'maybe' }, /DEMO_LOCK/],
    [{ REDIS_URL: 'redis://127.0.0.1:6379', DEMO_PEERS: 'localhost:3001' }, /DEMO_PEERS must list base URLs/],
    [{ DEMO_PEERS: 'http://localhost:3001' }, /DEMO_PEERS needs REDIS_URL/],
  ])('refuses %p with a message naming the variable', (env, message) => {
    expect(() => readDemoConfig(env)).toThrow(message);
  });

  it('reads DEMO_PEERS as a list of base URLs', () => {
    const config = readDemoConfig({
      REDIS_URL: 'redis://127.0.0.1:6379',
      DEMO_PEERS: 'http://localhost:3001/, http://10.0.0.2:3000',
    });

    expect(config.peers).toEqual(['http://localhost:3001', 'http://10.0.0.2:3000']);
  });

  it('turns the lock off for the whole process with DEMO_LOCK=off', () => {
    expect(readDemoConfig({ DEMO_LOCK: 'off' }).lock).toBe(false);
  });
});
