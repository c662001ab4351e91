// One process of one run, started by bench/run.mjs with an IPC channel:
//   node bench/worker.mjs '<json config>'
//
// - W1 / W2 (`config.variants`: several): every variant opened in this one process, measured in
//   short slices taken in turn (a rotated order every round), so that all of them see the same
//   machine: on a noisy host a slow second hits every library, not just the one that ran then.
// - W3 / W4 (`config.variant`: one): this process's `workers` loops on the shared key, on the
//   schedule the parent sends to every process of the run; each section's hold is recorded on the
//   shared clock.
import { exclude, sample } from './lib/instrument.mjs';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { now, offsetTo, sleepUntil } from './lib/clock.mjs';
import { addDelta, serverDelta, serverSnapshot } from './lib/server-stats.mjs';
import { dataClient, nodeClient } from './lib/topologies.mjs';
import { open, variantById } from './lib/variants.mjs';

/** No loop of a worker runs more than this many operations, whatever the clock says. */
const MAX_OPERATIONS = 5_000_000;

const config = JSON.parse(process.argv[2]);
const send = (message) => new Promise((resolve) => process.send(message, resolve));
const nextMessage = (type) =>
  new Promise((resolve) => {
    const listener = (message) => {
      if (message?.type !== type) return;
      process.off('message', listener);
      resolve(message);
    };
    process.on('message', listener);
  });
// The parent going away ends the run: never outlive it.
process.on('disconnect', () => process.exit(2));

if (config.variants) await slicedPairs();
else await sections();
process.exit(0);

/** W1 (one loop) and W2 (`keys` loops, one key each): acquire + release, as fast as it goes. */
async function slicedPairs() {
  const ids = config.variants;
  const adapters = new Map();
  for (const id of ids) adapters.set(id, await open(variantById(id), config.url, config));
  const admin = exclude(new Redis(config.url));
  const loops = config.workload === 'W1' ? 1 : config.keys;
  const results = Object.fromEntries(
    ids.map((id) => [
      id,
      {
        latencies: [],
        pairs: 0,
        elapsed: 0,
        cpuMicros: 0,
        commands: 0,
        writes: 0,
        server: { commands: {}, cpuSeconds: 0 },
        errors: [],
      },
    ]),
  );
  for (const [id, adapter] of adapters) for (let i = 0; i < 5; i++) await adapter.pair(`${config.key}:${id}:warm`);

  await send({ type: 'ready' });
  await nextMessage('go');
  // Round -1 warms every variant up (the first compile of its hot paths) and is not counted.
  for (let round = -1; round < config.slices; round++) {
    for (const id of rotate(ids, round + 1)) {
      const adapter = adapters.get(id);
      const result = results[id];
      const counted = round >= 0;
      const serverBefore = await serverSnapshot(admin);
      const before = sample(now());
      const end = before.at + (counted ? config.sliceMs : config.warmupMs);
      let pairs = 0;
      await Promise.all(
        Array.from({ length: loops }, async (_, loop) => {
          const key = `${config.key}:${id}:${loop}`;
          while (pairs < MAX_OPERATIONS && now() < end) {
            const begin = now();
            try {
              await adapter.pair(key);
            } catch (error) {
              result.errors.push(String(error?.message ?? error));
              await delay(1);
              continue;
            }
            pairs++;
            if (counted) result.latencies.push(now() - begin);
          }
        }),
      );
      // Every loop has finished its last pair: the slice's time includes that tail.
      const after = sample(now());
      const serverAfter = await serverSnapshot(admin);
      if (!counted) continue;
      result.pairs += pairs;
      result.elapsed += after.at - before.at;
      result.cpuMicros += after.cpuMicros - before.cpuMicros;
      result.commands += after.commands - before.commands;
      result.writes += after.writes - before.writes;
      addDelta(result.server, serverDelta(serverBefore, serverAfter));
    }
  }
  for (const result of Object.values(results)) result.errors = summarize(result.errors);
  await send({ type: 'result', results });
  for (const adapter of adapters.values()) await adapter.close();
  admin.disconnect();
}

/**
 * W3 (mutex: GET counter, `holdMs`, SET counter + 1) and W4 (semaphore of `limit`: `holdMs`):
 * `workers` loops, each recording `[worker, requested, start, end]` per section on the shared clock.
 */
async function sections() {
  const target = config.target ?? { kind: 'single', url: config.url };
  const adapter = await open(variantById(config.variant), target, config);
  const data = config.workload === 'W3' ? exclude(dataClient(target)) : undefined;
  // Warm up: connections, script caches, the first compile of the hot paths.
  const warmKey = `${config.key}:warm:${config.process}`;
  for (let i = 0; i < 5; i++) {
    if (config.workload === 'W4') await adapter.withPermit(warmKey, config.limit, async () => undefined);
    else await adapter.withLock(warmKey, async () => undefined);
  }
  await data?.ping();
  const clockClient = exclude(nodeClient(target));
  const clockOffset = await offsetTo(clockClient);
  clockClient.disconnect();

  const go = nextMessage('go');
  await send({ type: 'ready' });
  const { warmStart, t0, tEnd } = await go;
  // Counters and CPU at the edges of the measured window, wherever the event loop lets the timers fire.
  const samples = [t0, tEnd].map(
    (at) => new Promise((resolve) => setTimeout(() => resolve(sample(now())), Math.max(0, at - now()))),
  );
  await sleepUntil(warmStart);

  const holds = [];
  const errors = [];
  const counterKey = `${config.key}:counter`;
  await Promise.all(
    Array.from({ length: config.workers }, async (_, worker) => {
      const section =
        config.workload === 'W3'
          ? async (requested) => {
              const start = now();
              const value = Number(await data.get(counterKey));
              await delay(config.holdMs);
              await data.set(counterKey, value + 1);
              holds.push([worker, requested, start, now()]);
            }
          : async (requested) => {
              const start = now();
              await delay(config.holdMs);
              holds.push([worker, requested, start, now()]);
            };
      for (let i = 0; i < MAX_OPERATIONS && now() < tEnd; i++) {
        const requested = now();
        try {
          if (config.workload === 'W3') await adapter.withLock(config.key, () => section(requested));
          else await adapter.withPermit(config.key, config.limit, () => section(requested));
        } catch (error) {
          errors.push(String(error?.message ?? error));
          // A failing library must not spin: the run shows its errors, not a busy loop.
          await delay(10);
        }
      }
    }),
  );
  const [first, last] = await Promise.all(samples);
  await send({ type: 'result', holds, clockOffset, errors: summarize(errors), samples: [first, last] });
  await adapter.close();
  data?.disconnect();
}

function summarize(errors) {
  return { count: errors.length, first: errors[0] };
}

function rotate(list, by) {
  const shift = by % list.length;
  return [...list.slice(shift), ...list.slice(0, shift)];
}
