// A child process of the permit-limit test: `workers` concurrent loops, each running `sections`
// sections of ~5 ms that count how many sections are inside at once (INCR on entry, DECR on
// exit), holding a permit of a semaphore of `limit` or (control) not.
//
// usage: node permit-sections.mjs <redisUrl> <name> <processes> <workers> <sections> <limit> <semaphore|none>
import { setTimeout as delay } from 'node:timers/promises';
import { startTogether, startWorkerApp } from './worker-app.mjs';

const [url, name, processes, workers, sections, limit, mode] = process.argv.slice(2);
const { semaphores, redis, close } = await startWorkerApp(url);
const insideKey = `${name}:inside`;
let maxInside = 0;

async function section() {
  maxInside = Math.max(maxInside, await redis.incr(insideKey));
  await delay(5);
  await redis.decr(insideKey);
}

await startTogether(redis, `${name}:ready`, Number(processes));
let completed = 0;
await Promise.all(
  Array.from({ length: Number(workers) }, async () => {
    for (let i = 0; i < Number(sections); i++) {
      if (mode === 'semaphore') await semaphores.withPermit(name, Number(limit), section, { timeout: 60_000 });
      else await section();
      completed++;
    }
  }),
);

await close();
process.stdout.write(JSON.stringify({ completed, maxInside }));
