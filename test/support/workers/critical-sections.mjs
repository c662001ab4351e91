// A child process of the mutual-exclusion test: `workers` concurrent loops, each running
// `sections` read-await-write increments of one Redis counter, under the lock or (control) not.
//
// usage: node critical-sections.mjs <redisUrl> <key> <processes> <workers> <sections> <lock|none>
import { setTimeout as delay } from 'node:timers/promises';
import { startTogether, startWorkerApp } from './worker-app.mjs';

const [url, key, processes, workers, sections, mode] = process.argv.slice(2);
const { locks, redis, close } = await startWorkerApp(url);
const counterKey = `${key}:counter`;

async function criticalSection() {
  const value = Number(await redis.get(counterKey));
  await delay(1);
  await redis.set(counterKey, value + 1);
}

await startTogether(redis, `${key}:ready`, Number(processes));
let completed = 0;
await Promise.all(
  Array.from({ length: Number(workers) }, async () => {
    for (let i = 0; i < Number(sections); i++) {
      if (mode === 'lock') await locks.withLock(key, criticalSection, { timeout: 60_000 });
      else await criticalSection();
      completed++;
    }
  }),
);

await close();
process.stdout.write(JSON.stringify({ completed }));
