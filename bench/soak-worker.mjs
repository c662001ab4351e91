// A process of the soak (bench/soak.mjs): nest-lock on Redis, told by the parent what to run.
// Run with --expose-gc: every heap sample is taken after a full collection.
//
// - 'cycles' (main process only): `cycles` lock + unlock pairs over `concurrency` free keys, in
//   batches; between batches nothing is in flight, and the heap and handles are sampled.
// - 'contend': `workersPerKey` workers on each of `keys` keys, with the other process doing the
//   same, until this process has counted `waits` acquisitions that had to wait (or the deadline).
// - 'final': a quiescent sample; 'close': close the app and exit.
import { NestFactory } from '@nestjs/core';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { now } from './lib/clock.mjs';

if (typeof globalThis.gc !== 'function') throw new Error('run the soak worker with --expose-gc');
const config = JSON.parse(process.argv[2]);
// The copy of the build that run.mjs froze for this soak.
const { LockModule, LockService } = await import(pathToFileURL(join(config.library, 'index.js')).href);
const send = (message) => new Promise((resolve) => process.send(message, resolve));
process.on('disconnect', () => process.exit(2));

const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: config.url }), { logger: false });
const locks = app.get(LockService);
const options = { timeout: 60_000 };

function sample(phase, done) {
  globalThis.gc();
  const resources = process.getActiveResourcesInfo();
  const byType = {};
  for (const type of resources) byType[type] = (byType[type] ?? 0) + 1;
  return {
    role: config.role,
    phase,
    done,
    at: now(),
    heapUsed: process.memoryUsage().heapUsed,
    rss: process.memoryUsage().rss,
    handles: resources.length,
    byType,
  };
}

process.on('message', (message) => {
  const handlers = { cycles: runCycles, contend: runContended, final: sendFinal, close: closeApp };
  handlers[message.type]?.(message).catch(async (error) => {
    await send({ type: 'failed', role: config.role, error: String(error?.stack ?? error) });
    process.exit(1);
  });
});
await send({ type: 'ready', role: config.role });

async function runCycles({ cycles, checkpoints, deadline, concurrency }) {
  let done = 0;
  let errors = 0;
  const started = now();
  for (const checkpoint of checkpoints) {
    const batch = checkpoint - done;
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async (_, loop) => {
        const key = `soak:cycle:${loop}`;
        // Bounded by the batch size and by the deadline.
        while (next < batch && now() < deadline) {
          next++;
          try {
            const lock = await locks.lock(key, options);
            await lock.unlock();
          } catch {
            errors++;
          }
        }
      }),
    );
    done += next;
    await send({ type: 'sample', ...sample('cycles', done), errors });
    if (now() >= deadline) break;
  }
  await send({ type: 'cycles-done', cycles: done, target: cycles, errors, seconds: (now() - started) / 1000 });
}

async function runContended({ waits, keys, workersPerKey, deadline, sampleEvery }) {
  let waited = 0;
  let acquired = 0;
  let errors = 0;
  let nextSample = sampleEvery;
  const started = now();
  await Promise.all(
    Array.from({ length: keys * workersPerKey }, async (_, worker) => {
      const key = `soak:contended:${worker % keys}`;
      while (waited < waits && now() < deadline) {
        try {
          await locks.withLock(
            key,
            (lock) => {
              acquired++;
              if (lock.elapsed > 0) waited++;
            },
            options,
          );
        } catch {
          errors++;
        }
        if (waited >= nextSample) {
          nextSample += sampleEvery;
          await send({ type: 'sample', ...sample('contended', waited), acquired, errors });
        }
      }
    }),
  );
  await send({
    type: 'contended-done',
    role: config.role,
    waits: waited,
    acquired,
    errors,
    seconds: (now() - started) / 1000,
  });
}

async function sendFinal() {
  await send({ type: 'final', ...sample('final', 0) });
}

async function closeApp() {
  await app.close();
  await send({ type: 'closed', role: config.role });
  process.exit(0);
}
