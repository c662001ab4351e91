// A child process of the local-passes tests: 8 loops that take one lock again and again with
// withLock (a short section each), so that the lock goes from holder to holder inside this process.
// Prints one line once 50 sections have run, then goes on until it is killed.
//
// usage: node local-passes-until-killed.mjs <redisUrl> <key> <ttl>
import { setTimeout as delay } from 'node:timers/promises';
import { startWorkerApp } from './worker-app.mjs';

const [url, key, ttl] = process.argv.slice(2);
const { locks } = await startWorkerApp(url);
let sections = 0;
await Promise.all(
  Array.from({ length: 8 }, async () => {
    for (;;) {
      await locks.withLock(
        key,
        async () => {
          if (++sections === 50) process.stdout.write(`${JSON.stringify({ sections })}\n`);
          await delay(1);
        },
        { ttl: Number(ttl), timeout: 60_000 },
      );
    }
  }),
);
