// A child process of the fairness test: waits for one lock, notes on Redis the order in which it
// was granted, holds it for a moment, and exits.
//
// usage: node line-up.mjs <redisUrl> <key> <label> <fair|unfair>
import { setTimeout as delay } from 'node:timers/promises';
import { startWorkerApp } from './worker-app.mjs';

const [url, key, label, mode] = process.argv.slice(2);
const { locks, redis, close } = await startWorkerApp(url);
const lock = await locks.lock(key, { timeout: 30_000, fair: mode === 'fair' });
await redis.rpush(`${key}:granted`, label);
await delay(20);
await lock.unlock();
await close();
