// What every child-process worker shares: a Nest application context with the built library
// on Redis (as a user's app would import it), a plain client, and a start line.
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { LockModule, LockService, SemaphoreService } from '../../../libs/lock/dist/index.js';

export async function startWorkerApp(url) {
  const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: url }), { logger: false });
  const redis = new Redis(url);
  return {
    locks: app.get(LockService),
    semaphores: app.get(SemaphoreService),
    redis,
    async close() {
      redis.disconnect();
      await app.close();
    },
  };
}

/** Every process checks in under `key`, then waits until all `processes` have, so that they start together. */
export async function startTogether(redis, key, processes) {
  await redis.incr(key);
  while (Number(await redis.get(key)) < processes) await delay(5);
}
