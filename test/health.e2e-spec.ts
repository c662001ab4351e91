import { afterEach, describe, expect, it } from '@jest/globals';
import { Controller, Get, type INestApplication, Inject, Module } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import { LeaderService, LockModule, type LockModuleOptions } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { LockHealthIndicator } from 'nest-lock/terminus';
import { existsSync, readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import request from 'supertest';
import { useBuilt } from './support/built.js';
import { useRedisServer } from './support/redis-server.js';

@Controller('health')
class HealthController {
  constructor(
    @Inject(HealthCheckService) private readonly health: HealthCheckService,
    @Inject(LockHealthIndicator) private readonly lock: LockHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.lock.pingCheck()]);
  }

  @Get('named')
  @HealthCheck()
  named() {
    return this.health.check([() => this.lock.pingCheck('redis')]);
  }

  @Get('leader')
  @HealthCheck()
  leader() {
    return this.health.check([() => this.lock.leaderCheck('billing')]);
  }
}

@Module({
  // Terminus logs every failed check as an error; the answer is what is tested here.
  imports: [TerminusModule.forRoot({ logger: false })],
  controllers: [HealthController],
  providers: [LockHealthIndicator],
})
class HealthModule {}

describe('LockHealthIndicator through a TerminusModule /health endpoint', () => {
  const server = useRedisServer();
  let app: INestApplication | undefined;

  async function start(options: LockModuleOptions): Promise<Server> {
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ ...options, logger: false }), HealthModule],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
    return app.getHttpServer() as Server;
  }

  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('200 with Redis up: the lock indicator is up with the round trip in ms', async () => {
    const http = await start({ redis: server().url });

    const response = await request(http).get('/health');
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      status: 'ok',
      info: { lock: { status: 'up', latency: expect.any(Number) } },
      error: {},
      details: { lock: { status: 'up', latency: expect.any(Number) } },
    });
    const { latency } = (response.body as { info: { lock: { latency: number } } }).info.lock;
    expect(latency).toBeGreaterThanOrEqual(0);
    expect(latency).toBeLessThan(1_000);
  });

  it('503 with Redis stopped: down, with the reason; 200 again once it is back', async () => {
    const http = await start({ redis: server().url, commandTimeout: 300 });
    expect((await request(http).get('/health')).status).toBe(200);

    await server().kill();
    try {
      const response = await request(http).get('/health');
      expect(response.status).toBe(503);
      expect(response.body).toEqual({
        status: 'error',
        info: {},
        error: { lock: { status: 'down', message: expect.stringMatching(/^Redis /), code: 'BACKEND_UNAVAILABLE' } },
        details: {
          lock: { status: 'down', message: expect.stringMatching(/^Redis /), code: 'BACKEND_UNAVAILABLE' },
        },
      });
    } finally {
      await server().restart();
    }

    // The client reconnects by itself (within its 2 s back-off): the check follows.
    let status = 0;
    const deadline = performance.now() + 10_000;
    while (status !== 200 && performance.now() < deadline) {
      status = (await request(http).get('/health')).status;
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(status).toBe(200);
  });

  it('503 when Redis is frozen: the probe is bounded by commandTimeout', async () => {
    const http = await start({ redis: server().url, commandTimeout: 300 });
    server().pause();
    try {
      const started = performance.now();
      const response = await request(http).get('/health');
      expect(response.status).toBe(503);
      expect(response.body).toMatchObject({
        error: { lock: { status: 'down', message: expect.stringContaining('did not answer within 300 ms') } },
      });
      expect(performance.now() - started).toBeLessThan(5_000);
    } finally {
      server().resume();
    }
  });

  it('pingCheck(key) reports under that key', async () => {
    const http = await start({ redis: server().url });

    const response = await request(http).get('/health/named');
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ info: { redis: { status: 'up', latency: expect.any(Number) } } });
  });

  it('leaderCheck(name): up with the term and since when while leading, up as a follower, down once resigned', async () => {
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server().url, logger: false }), HealthModule],
    }).compile();
    app = module.createNestApplication({ logger: false });
    await app.init();
    const http = app.getHttpServer() as Server;
    const leaders = app.get(LeaderService);
    const before = Date.now();
    const leadership = leaders.campaign('billing');
    await leadership.whenLeader();
    const leading = await request(http).get('/health/leader').expect(200);
    expect(leading.body).toMatchObject({
      info: {
        billing: {
          status: 'up',
          leading: true,
          term: leadership.term,
          since: new Date(leadership.since!).toISOString(),
        },
      },
    });
    expect(leadership.since).toBeGreaterThanOrEqual(before);

    // A second application on the same Redis campaigns behind the first: a healthy follower.
    const other = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server().url, logger: false }), HealthModule],
    }).compile();
    const follower = other.createNestApplication({ logger: false });
    await follower.init();
    try {
      follower.get(LeaderService).campaign('billing');
      await delay(100);
      const following = await request(follower.getHttpServer() as Server)
        .get('/health/leader')
        .expect(200);
      expect(following.body).toMatchObject({ info: { billing: { status: 'up', leading: false } } });
    } finally {
      await follower.close();
    }

    await leaders.resign('billing');
    const resigned = await request(http).get('/health/leader').expect(503);
    expect(resigned.body).toMatchObject({
      error: { billing: { status: 'down', message: 'this process does not campaign for "billing"' } },
    });
  });

  it('the memory store is up', async () => {
    const http = await start({ store: 'memory' });

    const response = await request(http).get('/health');
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ status: 'ok', info: { lock: { status: 'up' } } });
  });
});

describe('the nest-lock/terminus entry point', () => {
  useBuilt('library');

  it('is built where libs/lock/package.json exports it', async () => {
    type Target = { types: string; default: string };
    const manifest = JSON.parse(readFileSync(new URL('../libs/lock/package.json', import.meta.url), 'utf8')) as {
      exports: Record<string, { import: Target; require: Target }>;
    };
    const entry = manifest.exports['./terminus'];
    expect(entry).toEqual({
      import: { types: './dist/terminus/index.d.ts', default: './dist/terminus/index.js' },
      require: { types: './dist/cjs/terminus/index.d.ts', default: './dist/cjs/terminus/index.js' },
    });
    for (const file of [entry.import.types, entry.import.default, entry.require.types, entry.require.default]) {
      expect(existsSync(new URL(`../libs/lock/${file}`, import.meta.url))).toBe(true);
    }
  });
});
