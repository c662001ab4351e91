// A child process of the topology tests: `workers` loops that, until `durationMs` has passed, take
// one of `keys` with withLock — or a permit of it with withPermit, mode `semaphore:<limit>` — (a
// short read-await-write of the key's counter inside, for locks), and record each hold for the
// history checker (test/support/history.ts) and each error by its code. Each holder draws its fence
// (`fence()`, on demand) at a random moment of its hold — first thing, in the middle of its section,
// or last thing — and records when it came (`fencedAt`); a draw that fails leaves the hold without a
// fence and is counted by its code in `fenceErrors` (apart from the calls' errors).
//
// usage: node hold-history.mjs <target> <keys,comma-separated> <processes> <workers> <durationMs> <timeoutMs> <lock|semaphore:N>
// (target: a redis:// URL or cluster:<host:port>,…; see worker-app.mjs)
import { setTimeout as delay } from 'node:timers/promises';
import { startTogether, startWorkerApp } from './worker-app.mjs';

const [target, keyList, processes, workers, durationMs, timeoutMs, mode] = process.argv.slice(2);
const limit = mode.startsWith('semaphore:') ? Number(mode.slice('semaphore:'.length)) : undefined;
const keys = keyList.split(',');
// What each worker loop is doing, told on stderr if the process outlives every call's timeout
// (a hang becomes a failure that says where it stopped, not a test timeout).
const phases = Array.from({ length: Number(workers) }, () => 'starting the app');
const overdue = setTimeout(
  () => {
    process.stderr.write(`hold-history ${process.pid} overdue; workers: ${JSON.stringify(phases)}\n`);
    process.exit(3);
  },
  Number(durationMs) + Number(timeoutMs) + 30_000,
);
const { locks, semaphores, redis, close } = await startWorkerApp(target);
await startTogether(redis, `${keys[0]}:ready`, Number(processes), (progress) => phases.fill(progress));
const end = Date.now() + Number(durationMs);

function sectionFailed(error) {
  throw Object.assign(new Error(`the section's own Redis client failed: ${error.message}`), { code: 'SECTION_CLIENT' });
}
const holds = [];
const errors = {};
const fenceErrors = {};
let slowestCall = 0;
await Promise.all(
  Array.from({ length: Number(workers) }, async (_, worker) => {
    for (let i = 0; Date.now() < end; i++) {
      const key = keys[(worker + i) % keys.length];
      const requestedAt = Date.now();
      phases[worker] = `waiting for ${key} since ${requestedAt}`;
      try {
        const hold = async (lock) => {
          const acquiredAt = Date.now();
          const validUntil = acquiredAt + lock.validity;
          // The step of the section after which the fence is drawn: 0 first thing, 2 last thing.
          const drawAfter = Math.floor(Math.random() * 3);
          const drawn = {};
          const drawFence = async (step) => {
            if (step !== drawAfter) return;
            phases[worker] = `drawing the fence of ${key} since ${Date.now()}`;
            try {
              drawn.fence = await lock.fence();
              drawn.fencedAt = Date.now();
            } catch (error) {
              const code = error?.code ?? `${error?.name}: ${error?.message}`;
              fenceErrors[code] = (fenceErrors[code] ?? 0) + 1;
            }
          };
          await drawFence(0);
          if (limit === undefined) {
            const counter = `${key}:counter`;
            phases[worker] = `GET ${counter} since ${Date.now()}`;
            // The section's own client (not the library) may fail during a failover: counted apart.
            const value = Number(await redis.get(counter).catch(sectionFailed));
            await delay(1);
            await drawFence(1);
            phases[worker] = `SET ${counter} since ${Date.now()}`;
            await redis.set(counter, value + 1).catch(sectionFailed);
            phases[worker] = `releasing ${key} since ${Date.now()}`;
          } else {
            await delay(1);
            await drawFence(1);
            await delay(1);
          }
          await drawFence(2);
          holds.push({
            pid: process.pid,
            worker,
            key,
            ...(limit === undefined ? { kind: 'lock' } : { kind: 'semaphore', limit }),
            token: lock.token,
            ...drawn,
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
        // The library's errors by their code; anything else by its message.
        const code = error?.code ?? `${error?.name}: ${error?.message}`;
        errors[code] = (errors[code] ?? 0) + 1;
        await delay(20);
      }
      slowestCall = Math.max(slowestCall, Date.now() - requestedAt);
    }
    phases[worker] = 'done';
  }),
);

phases.fill(`closing since ${Date.now()}`);
await close();
clearTimeout(overdue);
process.stdout.write(JSON.stringify({ holds, errors, fenceErrors, slowestCall }));
