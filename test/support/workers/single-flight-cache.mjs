// One process of the read-through acceptance runs (test/topologies/single-flight-cache): asks
// SingleFlightService.getOrLoad for one key <rate> times a second, from the moment the test sends on
// stdin (one line: a Date.now() in ms) for <seconds>, and prints one JSON line at the end:
// {"event":"done","latencies":[…],"loads":[<Date.now() of each loader call of this process>]}.
// Before, {"event":"ready"} once the application runs.
//
// usage: node single-flight-cache.mjs <redisUrl> <key> <rate> <seconds> <ttl> <staleFor> <earlyRefresh> <loaderMs>
import { setTimeout as delay } from 'node:timers/promises';
import { createInterface } from 'node:readline';
import { NestFactory } from '@nestjs/core';
import { LockModule, SingleFlightService } from '../../../libs/lock/dist/index.js';

const [url, key, rate, seconds, ttl, staleFor, earlyRefresh, loaderMs] = process.argv.slice(2);
const print = (line) => process.stdout.write(`${JSON.stringify({ ...line, pid: process.pid })}\n`);
const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: url, logger: false }), {
  logger: false,
});
const flights = app.get(SingleFlightService);
const options = { ttl: Number(ttl), staleFor: Number(staleFor), earlyRefresh: Number(earlyRefresh) };
const loads = [];
const loader = async () => {
  loads.push(Date.now());
  await delay(Number(loaderMs));
  return { at: Date.now() };
};

print({ event: 'ready' });
const [line] = await new Promise((resolve) =>
  createInterface({ input: process.stdin }).once('line', (l) => resolve([l])),
);
await delay(Math.max(0, Number(line) - Date.now()));

// Calls at a steady rate, each on its own: a slow one does not hold the next back.
const latencies = [];
const calls = [];
const interval = 1_000 / Number(rate);
const start = performance.now();
for (let i = 0; performance.now() - start < Number(seconds) * 1_000; i++) {
  calls.push(
    (async () => {
      const began = performance.now();
      await flights.getOrLoad(key, loader, options);
      latencies.push({ at: Date.now(), ms: performance.now() - began });
    })(),
  );
  await delay(Math.max(0, start + (i + 1) * interval - performance.now()));
}
await Promise.all(calls);
await app.close();
// Exits once the report is written: stdout is a pipe, written asynchronously (see single-flight.mjs).
process.stdout.write(`${JSON.stringify({ event: 'done', latencies, loads, pid: process.pid })}\n`, () =>
  process.exit(0),
);
