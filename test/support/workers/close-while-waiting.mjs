// A lock() waits (timeout 20 s) for a key another holder keeps, and the application closes meanwhile.
// argv: memory | redis <url>. stdout: {"closing": true} when app.close() is called, then
// {"outcome", "code", "settledAfterCloseMs"} once the waiting call settled. Nothing calls process.exit:
// the test watches whether the process ends by itself.
import { NestFactory } from '@nestjs/core';
import { setTimeout as delay } from 'node:timers/promises';
import { LockModule, LockService } from '../../../libs/lock/dist/index.js';

const [kind, url] = process.argv.slice(2);
const report = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const boot = () =>
  NestFactory.createApplicationContext(LockModule.forRoot(kind === 'redis' ? { redis: url } : {}), { logger: false });

const app = await boot();
// On Redis the holder is another application, as another process would be; the memory store has only one.
const holderApp = kind === 'redis' ? await boot() : app;
const key = `close-while-waiting:${process.pid}`;
await holderApp.get(LockService).lock(key, { ttl: 60_000 });

const waiting = app
  .get(LockService)
  .lock(key, { timeout: 20_000 })
  .then(
    () => ({ outcome: 'acquired' }),
    (error) => ({ outcome: 'rejected', code: error?.code ?? String(error) }),
  );
await delay(200);

report({ closing: true });
const closedAt = performance.now();
await app.close();
if (holderApp !== app) await holderApp.close();
const settled = await waiting;
report({ ...settled, settledAfterCloseMs: Math.round(performance.now() - closedAt) });
