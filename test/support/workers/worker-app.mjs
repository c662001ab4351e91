// What every child-process worker shares: a Nest application context with the built library
// on Redis (as a user's app would import it), a plain client, and a start line.
import { NestFactory } from '@nestjs/core';
import { Cluster, Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { LockModule, LockService, SemaphoreService } from '../../../libs/lock/dist/index.js';

/**
 * `target`: a redis:// URL, or `cluster:<host:port>,<host:port>…` for a Redis Cluster (the module
 * connects with `{ cluster: { nodes } }`, the plain client is an ioredis Cluster).
 */
export async function startWorkerApp(target) {
  const nodes = target.startsWith('cluster:') ? target.slice('cluster:'.length).split(',') : undefined;
  const redisOption = nodes ? { cluster: { nodes: nodes.map((node) => `redis://${node}`) } } : target;
  const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: redisOption }), { logger: false });
  const redis = nodes ? new Cluster(nodes.map((node) => `redis://${node}`)) : new Redis(target);
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
