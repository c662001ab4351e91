// A child process of the mutual-exclusion test: `workers` concurrent loops, each running
// `sections` read-await-write increments of one Redis counter, under the lock or (control) not.
// It imports the built library, as a user's application would.
//
// usage: node critical-sections.mjs <redisUrl> <key> <processes> <workers> <sections> <lock|none>
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { LockModule, LockService } from '../../../libs/lock/dist/index.js';

const [url, key, processes, workers, sections, mode] = process.argv.slice(2);
const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: url }), { logger: false });
const locks = app.get(LockService);
const redis = new Redis(url);
const counterKey = `${key}:counter`;

async function criticalSection() {
  const value = Number(await redis.get(counterKey));
  await delay(1);
  await redis.set(counterKey, value + 1);
}

// Start together: every process checks in, then waits until all have.
const readyKey = `${key}:ready`;
await redis.incr(readyKey);
while (Number(await redis.get(readyKey)) < Number(processes)) await delay(5);

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

redis.disconnect();
await app.close();
process.stdout.write(JSON.stringify({ completed }));
