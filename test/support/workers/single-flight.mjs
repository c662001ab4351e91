// One process of the single-flight specs: fires <callers> concurrent loads of one cold key at a
// moment the test sends on stdin (one line: a Date.now() in ms, the same for every process), and prints
// what came of them as one JSON line: {"event":"done","loads":…,"values":…,"errors":[…],"latencies":[…]}.
// Before, {"event":"ready"} once the application runs; {"event":"loading"} when its loader has counted
// itself and begins its wait, {"event":"loaded","ms":…} when it is done (its duration).
//
// usage: node single-flight.mjs <redisUrl> <key> <callers> <loaderMs> <mode> <lockTtl>
//   mode: single-flight — SingleFlightService.load;
//         coded-error   — the same, with a loader that throws an error with a code;
//         lock-reread   — the demo's workflow by hand: read the cache, on a miss take the key's lock,
//                         read again, load and fill, unlock (a Redis string as the cache);
//         local         — callers of this process share one load, processes do not (the floor of the
//                         callers' latency on this machine, and one load per process);
//         push          — the floor of a coordinated load: callers of a process share one promise, one
//                         process wins a SET NX and publishes the value; the others, subscribed before,
//                         take it from the message (no lock line, no renewal, no death of the loader
//                         covered: a bound, not a design);
//         none          — the control: every caller runs the loader.
//   Every loader call counts itself on Redis (<key>:loads), so that the test sees calls in every process.
import { setTimeout as delay } from 'node:timers/promises';
import { createInterface } from 'node:readline';
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import { LockModule, LockService, SingleFlightService } from '../../../libs/lock/dist/index.js';

const [url, key, callersArg, loaderMsArg, mode, lockTtlArg] = process.argv.slice(2);
const callers = Number(callersArg);
const loaderMs = Number(loaderMsArg);
const lockTtl = Number(lockTtlArg);
const print = (line) => process.stdout.write(`${JSON.stringify({ ...line, pid: process.pid, at: Date.now() })}\n`);

const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: url, logger: false }), {
  logger: false,
});
const flights = app.get(SingleFlightService);
const locks = app.get(LockService);
const redis = new Redis(url);
let loads = 0;

async function loader() {
  loads++;
  const started = performance.now();
  await redis.incr(`${key}:loads`);
  print({ event: 'loading' });
  await delay(loaderMs);
  print({ event: 'loaded', ms: performance.now() - started });
  if (mode === 'coded-error') throw Object.assign(new Error(`no product for ${key}`), { code: 'E_NO_PRODUCT' });
  return { key, by: process.pid };
}

let shared;
/** One caller, as its mode asks. */
async function call() {
  if (mode === 'none') return loader();
  if (mode === 'local') return (shared ??= loader());
  if (mode === 'push') return (shared ??= pushed());
  if (mode === 'lock-reread') return lockAndReread();
  return flights.load(key, loader, { lockTtl, timeout: 30_000 });
}

// Subscribed before the run, as a fleet's wake-up channel is.
const subscriber = mode === 'push' ? new Redis(url) : undefined;
const published = new Promise((resolve) => subscriber?.on('message', (_channel, message) => resolve(message)));
await subscriber?.subscribe(`${key}:value`);

async function pushed() {
  if ((await redis.set(`${key}:push-lock`, '1', 'PX', lockTtl, 'NX')) === 'OK') {
    const value = await loader();
    await redis.publish(`${key}:value`, JSON.stringify(value));
    return value;
  }
  return JSON.parse(await published);
}

async function lockAndReread() {
  const cached = await redis.get(`${key}:cache`);
  if (cached !== null) return JSON.parse(cached);
  return locks.withLock(
    `reread:${key}`,
    async () => {
      const again = await redis.get(`${key}:cache`);
      if (again !== null) return JSON.parse(again);
      const value = await loader();
      await redis.set(`${key}:cache`, JSON.stringify(value), 'PX', 60_000);
      return value;
    },
    { timeout: 60_000 },
  );
}

// A process that has served before, as the pods of a running deployment: its code paths compiled and
// its connections open — the wake-up subscription included, which a first wait opens (a cold process
// pays both in its first burst: tens of ms on a 2-core machine). Each round is loaded once here, and
// once waited for while another application holds the key's lock, as a load of another process would.
if (mode === 'single-flight' || mode === 'coded-error') {
  const other = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: url, logger: false }), {
    logger: false,
  });
  for (let round = 0; round < 3; round++) {
    const warmUp = `warm-up:${process.pid}:${round}`;
    await Promise.all(Array.from({ length: callers }, () => flights.load(warmUp, async () => ({ key: warmUp }))));
    const held = await other.get(LockService).lock(`single-flight:${warmUp}`);
    const waiting = Promise.all(
      Array.from({ length: callers }, () => flights.load(warmUp, async () => ({ key: warmUp }))),
    );
    await delay(20);
    await held.unlock();
    await waiting;
  }
  await other.close();
}
print({ event: 'ready' });
const [line] = await new Promise((resolve) =>
  createInterface({ input: process.stdin }).once('line', (l) => resolve([l])),
);
await delay(Math.max(0, Number(line) - Date.now()));

const latencies = [];
const errors = new Map();
let values = 0;
async function caller() {
  const start = performance.now();
  try {
    const value = await call();
    if (value?.key === key) values++;
  } catch (error) {
    const shown = JSON.stringify({ name: error.name, message: error.message, code: error.code });
    errors.set(shown, (errors.get(shown) ?? 0) + 1);
  }
  latencies.push(performance.now() - start);
  firstValueAt ??= Date.now();
}
let firstValueAt;
// The callers come as an HTTP server's requests would: a batch per turn of the event loop, not all
// in one synchronous loop (which would hold back every reply, the load's included, until it ends).
const cpuAtStart = process.cpuUsage();
const calls = [];
for (let i = 0; i < callers; i += 50) {
  for (let j = i; j < Math.min(callers, i + 50); j++) calls.push(caller());
  await new Promise((resolve) => setImmediate(resolve));
}
const issued = Date.now();
await Promise.all(calls);
if (process.env.SF_DEBUG)
  print({
    event: 'timing',
    issued: issued - Number(line),
    firstValue: firstValueAt - Number(line),
    cpuMs: Math.round((process.cpuUsage(cpuAtStart).user + process.cpuUsage(cpuAtStart).system) / 1000),
  });
redis.disconnect();
subscriber?.disconnect();
await app.close();
// Exits once the report is written: stdout is a pipe, written asynchronously, and a long line (every
// latency) could be cut by an exit right after the write.
process.stdout.write(
  `${JSON.stringify({ event: 'done', loads, values, errors: [...errors], latencies, pid: process.pid, at: Date.now() })}\n`,
  () => process.exit(0),
);
