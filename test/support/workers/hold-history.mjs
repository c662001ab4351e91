// A child process of the topology tests: `workers` loops that, until `durationMs` has passed, take
// one of `keys` with withLock — or a permit of it with withPermit, mode `semaphore:<limit>` — (a
// short read-await-write of the key's counter inside, for locks), and record each hold for the
// history checker (test/support/history.ts) and each error by its code.
//
// usage: node hold-history.mjs <target> <keys,comma-separated> <processes> <workers> <durationMs> <timeoutMs> <lock|semaphore:N>
// (target: a redis:// URL or cluster:<host:port>,…; see worker-app.mjs)
import { setTimeout as delay } from 'node:timers/promises';
import { startTogether, startWorkerApp } from './worker-app.mjs';

const [target, keyList, processes, workers, durationMs, timeoutMs, mode] = process.argv.slice(2);
const limit = mode.startsWith('semaphore:') ? Number(mode.slice('semaphore:'.length)) : undefined;
const keys = keyList.split(',');
const { locks, semaphores, redis, close } = await startWorkerApp(target);

await startTogether(redis, `${keys[0]}:ready`, Number(processes));
const end = Date.now() + Number(durationMs);
const holds = [];
const errors = {};
let slowestCall = 0;
await Promise.all(
  Array.from({ length: Number(workers) }, async (_, worker) => {
    for (let i = 0; Date.now() < end; i++) {
      const key = keys[(worker + i) % keys.length];
      const requestedAt = Date.now();
      try {
        const hold = async (lock) => {
          const acquiredAt = Date.now();
          const validUntil = acquiredAt + lock.validity;
          if (limit === undefined) {
            const counter = `${key}:counter`;
            const value = Number(await redis.get(counter));
            await delay(1);
            await redis.set(counter, value + 1);
          } else {
            await delay(2);
          }
          holds.push({
            pid: process.pid,
            worker,
            key,
            ...(limit === undefined ? { kind: 'lock' } : { kind: 'semaphore', limit }),
            token: lock.token,
            fence: lock.fence,
            requestedAt,
            acquiredAt,
            validUntil: lock.validity > 0 ? Math.max(validUntil, Date.now() + lock.validity) : validUntil,
            releasedAt: Date.now(),
          });
        };
        const options = { timeout: Number(timeoutMs), ttl: 2_000 };
        if (limit === undefined) await locks.withLock(key, hold, options);
        else await semaphores.withPermit(key, limit, hold, options);
      } catch (error) {
        const code = error?.code ?? error?.name ?? 'unknown';
        errors[code] = (errors[code] ?? 0) + 1;
        await delay(20);
      }
      slowestCall = Math.max(slowestCall, Date.now() - requestedAt);
    }
  }),
);

await close();
process.stdout.write(JSON.stringify({ holds, errors, slowestCall }));
