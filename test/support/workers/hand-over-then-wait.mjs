// A child process of the stale-handover test: H holds the lock; on "B" a second waiter B joins the
// line (behind the parent's waiter); on "go" H releases — handing the lock to the parent's waiter —
// and B waits its turn, holds the lock for 3 s and releases it. Prints one JSON line per event.
//
// usage: node hand-over-then-wait.mjs <redisUrl> <key>
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { startWorkerApp } from './worker-app.mjs';

const [url, key] = process.argv.slice(2);
const say = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
const { locks, close } = await startWorkerApp(url);
const holder = await locks.lock(key, { ttl: 30_000 });
say({ event: 'held', fence: await holder.fence() });
let next;
for await (const line of createInterface({ input: process.stdin })) {
  if (line === 'B') {
    next = locks.lock(key, { ttl: 10_000, step: 20, maxStep: 100, timeout: 20_000 });
    say({ event: 'B waits' });
  } else if (line === 'go') {
    await delay(300);
    say({ event: 'released', ok: await holder.unlock() });
    const lock = await next;
    // Drawn while B holds the lock.
    say({ event: 'B holds', fence: await lock.fence(), token: lock.token });
    await delay(3_000);
    say({ event: 'B released', ok: await lock.unlock() });
    await close();
    process.exit(0);
  }
}
