import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
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

  beforeAll(async () => {
    server = kind === 'redis' ? await RedisServer.start() : undefined;
    const module = await Test.createTestingModule({
      imports: [AppModule.register(readDemoConfig({ REDIS_URL: server?.url }))],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
  });
  const http = () => app.getHttpServer() as Server;

  afterAll(async () => {
    await app.close();
    await server?.stop();
  });

  it('runs one job of a name at a time: the second concurrent run gets 409 naming the lock key', async () => {
    const [first, second] = await Promise.all([
      request(http()).post('/jobs/nightly/run'),
      new Promise((resolve) => setTimeout(resolve, 100)).then(() => request(http()).post('/jobs/nightly/run')),
    ]);

    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ job: 'nightly' });
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({ key: 'job:nightly' });
  });

  it('runs jobs of different names side by side', async () => {
    const responses = await Promise.all(['a', 'b'].map((name) => request(http()).post(`/jobs/${name}/run`)));

    expect(responses.map((response) => response.status)).toEqual([201, 201]);
  });
});

describe('demo configuration', () => {
  it('defaults to port 3000 and the memory store', () => {
    expect(readDemoConfig({})).toEqual({ port: 3000, redisUrl: undefined });
  });

  it('rejects a PORT that is not a port number', () => {
    expect(() => readDemoConfig({ PORT: 'eighty' })).toThrow(/PORT/);
  });
});
