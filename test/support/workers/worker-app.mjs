// What every child-process worker shares: a Nest application context with the built library
// on Redis (as a user's app would import it), a plain client, and a start line.
import { NestFactory } from '@nestjs/core';
import { Cluster, Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { LeaderService, LockModule, LockService, SemaphoreService } from '../../../libs/lock/dist/index.js';

/**
 * `target`: a redis:// URL, `cluster:<host:port>,…` for a Redis Cluster (the module connects with
 * `{ cluster: { nodes } }`, the plain client is an ioredis Cluster), or `sentinel:<name>,<host:port>,…`
 * for a primary watched by sentinels (`{ sentinels, name }`).
 */
export async function startWorkerApp(target) {
  const [redisOption, redis] = connectionsTo(target);
  const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: redisOption }), { logger: false });
  return {
    locks: app.get(LockService),
    semaphores: app.get(SemaphoreService),
    leaders: app.get(LeaderService),
    redis,
    async close() {
      redis.disconnect();
      await app.close();
    },
  };
}

/** The module's `redis` option for `target`, and a plain client of the same Redis. */
function connectionsTo(target) {
  if (target.startsWith('cluster:')) {
    const nodes = target
      .slice('cluster:'.length)
      .split(',')
      .map((node) => `redis://${node}`);
    return [{ cluster: { nodes } }, new Cluster(nodes)];
  }
  if (target.startsWith('sentinel:')) {
    const [name, ...sentinels] = target.slice('sentinel:'.length).split(',');
    const options = {
      name,
      sentinels: sentinels.map((address) => ({ host: address.split(':')[0], port: Number(address.split(':')[1]) })),
    };
    return [options, new Redis(options)];
  }
  return [target, new Redis(target)];
}

/**
 * Every process checks in under `key`, then waits until all `processes` have, so that they start together.
 * The plain client's commands may fail while the fault under test is already injected (a slow start on a
 * loaded machine meets a primary killed on schedule: CLUSTERDOWN, MOVED to the dead node, "Too many
 * Cluster redirections"): the worker asks again until they succeed — bounded by its overdue timer, or by
 * runWorkers' timeout — rather than let the rejection reach its top-level await and end the process
 * (exit code 1). A check-in sent again after a lost reply counts once: each process adds its own member
 * to a set (SADD), where INCR would have counted it twice.
 */
export async function startTogether(redis, key, processes, onProgress = () => undefined) {
  const member = `${process.pid}:${Math.random().toString(36).slice(2)}`;
  const untilAnswered = async (what, send) => {
    for (let failures = 0; ; failures++) {
      try {
        return await send();
      } catch (error) {
        onProgress(`${what} failed ${failures + 1} time(s), last: ${error?.message} (client ${redis.status})`);
        await delay(50);
      }
    }
  };
  onProgress(`SADD ${key}`);
  await untilAnswered(`SADD ${key}`, () => redis.sadd(key, member));
  for (;;) {
    const count = Number(await untilAnswered(`SCARD ${key}`, () => redis.scard(key)));
    onProgress(`checked in; ${count} of ${processes} in (client ${redis.status})`);
    if (count >= processes) return;
    await delay(5);
  }
}
