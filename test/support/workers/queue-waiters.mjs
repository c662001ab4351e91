// A child process of the arrival-order tests: one application whose waiters line up for one lock as
// the test tells it. Prints {"ready":true} once started; then each line read from stdin is a label:
// a waiter for the lock starts at once, and once granted notes its label on Redis (`<key>:granted`),
// holds the lock a moment and unlocks. When stdin ends, it waits for its waiters and exits.
//
// usage: node queue-waiters.mjs <redisUrl> <key> <fair: true|false|strict>
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { startWorkerApp } from './worker-app.mjs';

const [url, key, mode] = process.argv.slice(2);
const fair = mode === 'strict' ? 'strict' : mode === 'true';
const { locks, redis, close } = await startWorkerApp(url);
const waiters = [];
const labels = createInterface({ input: process.stdin });
labels.on('line', (label) => {
  waiters.push(
    locks.withLock(
      key,
      async () => {
        await redis.rpush(`${key}:granted`, label);
        await delay(2);
      },
      { fair, timeout: 30_000 },
    ),
  );
});
console.log(JSON.stringify({ ready: true }));
await new Promise((resolve) => labels.once('close', resolve));
await Promise.all(waiters);
await close();
