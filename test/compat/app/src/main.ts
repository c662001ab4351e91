// What a user's application does with the packed nest-lock, checked end to end against a
// redis-server it starts itself: forRoot and forRootAsync, withLock, @WithLock's 409,
// @Semaphore's 503 with Retry-After, and a decorated route while Redis is stopped.
// Compiled as CommonJS (NestJS 11, test/compat/nest11.sh) and as ESM (NestJS 12, test/compat/nest12-esm.sh).
import 'reflect-metadata';
import { type INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { LockModule, LockService, SemaphoreService } from 'nest-lock';
import { strict as assert } from 'node:assert';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { createConnection, createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { gate, OrdersController } from './orders.controller.js';

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  return port;
}

async function startRedis(): Promise<{ url: string; server: ChildProcess }> {
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const server = spawn('redis-server', args, { stdio: 'ignore' });
  for (let attempt = 0; ; attempt++) {
    // Settles on connect, refusal or close: a probe destroyed before either would leave it pending.
    const connected = await new Promise<boolean>((resolve) => {
      const socket = createConnection(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
      socket.once('close', () => resolve(false));
    });
    if (connected) return { url: `redis://127.0.0.1:${port}`, server };
    if (attempt > 100) throw new Error('redis-server did not start');
    await sleep(50);
  }
}

async function until(condition: () => Promise<boolean>, what: string): Promise<void> {
  for (let attempt = 0; !(await condition()); attempt++) {
    if (attempt > 200) throw new Error(`timed out waiting until ${what}`);
    await sleep(25);
  }
}

async function startApp(lockModule: ReturnType<typeof LockModule.forRoot>): Promise<INestApplication> {
  @Module({ imports: [lockModule], controllers: [OrdersController] })
  class AppModule {}

  const app = await NestFactory.create(AppModule, { logger: false, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  return app;
}

/** usage: node main.js <NestJS major version the application installed> */
async function main(nestMajor: string): Promise<void> {
  const require = createRequire(join(process.cwd(), 'package.json'));
  const { version } = require('@nestjs/core/package.json') as { version: string };
  assert.equal(version.split('.')[0], nestMajor);

  const redis = await startRedis();
  const app = await startApp(LockModule.forRoot({ redis: redis.url }));
  const base = await app.getUrl();
  const locks = app.get(LockService);
  const semaphores = app.get(SemaphoreService);

  assert.equal(await locks.withLock('compat', () => Promise.resolve('done')), 'done');

  // @WithLock: a second request while the first holds order:1 is 409.
  gate.close();
  const first = fetch(`${base}/orders/1/ship`, { method: 'POST' });
  await until(() => locks.isLocked('order:1'), 'the first request holds order:1');
  const busy = await fetch(`${base}/orders/1/ship`, { method: 'POST' });
  assert.equal(busy.status, 409);
  assert.equal(((await busy.json()) as { code: string }).code, 'LOCK_TIMEOUT');
  gate.release();
  assert.equal((await first).status, 201);

  // @Semaphore(1): a second request while the permit is taken is 503 with Retry-After.
  gate.close();
  const holder = fetch(`${base}/orders/report`);
  await until(async () => (await semaphores.count('OrdersController.report')) === 1, 'the report permit is held');
  const full = await fetch(`${base}/orders/report`);
  assert.equal(full.status, 503);
  assert.match(full.headers.get('retry-after') ?? '', /^\d+$/);
  assert.equal(((await full.json()) as { code: string }).code, 'SEMAPHORE_TIMEOUT');
  gate.release();
  assert.equal((await holder).status, 200);

  // forRootAsync, its options from a factory.
  const asyncApp = await startApp(
    LockModule.forRootAsync({ useFactory: async () => ({ redis: redis.url, keyPrefix: 'async:' }) }),
  );
  assert.equal(await asyncApp.get(LockService).withLock('compat', () => Promise.resolve('async')), 'async');
  await asyncApp.close();

  // Redis stopped: a decorated route fails rather than running unprotected, with 503 and Retry-After.
  redis.server.kill('SIGKILL');
  await once(redis.server, 'exit');
  const outage = await fetch(`${base}/orders/2/ship`, { method: 'POST' });
  assert.equal(outage.status, 503, `status ${outage.status} with Redis stopped`);
  assert.ok(Number(outage.headers.get('retry-after')) >= 1, 'Retry-After with Redis stopped');

  await app.close();
  console.log(`nest-lock works in this NestJS ${version} application (Redis stopped: ${outage.status})`);
}

main(process.argv[2] ?? '').catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
