// getOrLoad serves a stale value while its background refresh hangs (a loader that never settles), and
// the application closes meanwhile. argv: <redisUrl>. stdout: {"closing": true} when app.close() is
// called. Nothing calls process.exit: the test watches whether the process ends by itself.
import { NestFactory } from '@nestjs/core';
import { setTimeout as delay } from 'node:timers/promises';
import { LockModule, SingleFlightService } from '../../../libs/lock/dist/index.js';

const [url] = process.argv.slice(2);
const app = await NestFactory.createApplicationContext(
  LockModule.forRoot({ redis: url, logger: false, defaults: { ttl: 2_000 } }),
  {
    logger: false,
  },
);
const flights = app.get(SingleFlightService);
const key = `close-while-refreshing:${process.pid}`;
const options = { ttl: 200, staleFor: 30_000, earlyRefresh: 0, timeout: 1_000 };
await flights.getOrLoad(key, async () => 'first', options);
await delay(250);
// Stale: served at once, and a refresh that never ends starts in the background.
await flights.getOrLoad(key, () => new Promise(() => undefined), options);
await delay(300);
process.stdout.write(`${JSON.stringify({ closing: true })}\n`);
await app.close();
