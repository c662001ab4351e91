// Running the worker processes of one measurement (bench/worker.mjs) and collecting what they
// report: shared by the bench (run.mjs) and its topology runs (topologies.mjs).
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { now, offsetTo } from './clock.mjs';
import { measureSections } from './stats.mjs';
import { ACQUIRE_TIMEOUT } from './variants.mjs';

const workerScript = join(dirname(fileURLToPath(import.meta.url)), '..', 'worker.mjs');

/** W1 / W2: one process measures every variant in turns (see worker.mjs); its results by variant. */
export async function runSlicedPairs({ target, library, baseline, workload, variants, rep, cpus }) {
  const key = `bench:${rep}:${workload.id}`;
  const config = {
    variants: variants.map((variant) => variant.id),
    workload: workload.id,
    url: target.spec.url,
    library: library.dir,
    baseline: baseline?.dir,
    key,
    keys: workload.keys,
    slices: workload.slices,
    sliceMs: workload.sliceMs,
    warmupMs: workload.warmup,
  };
  // Pinned through `taskset`, which execs node with the IPC channel still open.
  const pinned = cpus === undefined ? {} : { execPath: 'taskset', execArgv: ['-c', cpus, process.execPath] };
  const child = fork(workerScript, [JSON.stringify(config)], {
    ...pinned,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  try {
    const inbox = collect(child);
    await withTimeout(inbox.next('ready'), 60_000, `${key}: worker not ready`);
    const result = inbox.next('result');
    child.send({ type: 'go' });
    const perVariant = variants.length * (workload.warmup + workload.slices * workload.sliceMs);
    const { results } = await withTimeout(result, perVariant + 120_000, `${key}: worker did not finish`);
    await exited(child, 15_000);
    return results;
  } finally {
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGKILL');
    await target.flush();
  }
}

/**
 * W3 / W4: starts the processes of one run on `target` (lib/topologies.mjs), gives them one
 * schedule, measures what they recorded.
 */
export async function runSections({ target, library, baseline, workload, variant, rep }) {
  const key = `bench:${rep}:${workload.id}:${variant.id}`;
  const children = Array.from({ length: workload.processes }, (_, index) => {
    const config = {
      variant: variant.id,
      workload: workload.id,
      target: target.spec,
      library: library.dir,
      baseline: baseline?.dir,
      key,
      process: index,
      workers: workload.workers,
      holdMs: workload.holdMs,
      limit: workload.limit,
    };
    return fork(workerScript, [JSON.stringify(config)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  });
  try {
    const messages = children.map((child) => collect(child));
    await withTimeout(Promise.all(messages.map((inbox) => inbox.next('ready'))), 60_000, `${key}: workers not ready`);

    // Holds are compared on Redis's clock, each process's shifted by its own measured offset.
    const parentOffset = await offsetTo(target.clock);
    const warmStart = now() + 100;
    const t0 = warmStart + workload.warmup;
    const tEnd = t0 + workload.duration;
    const snapshots = [t0, tEnd].map((at) => after(at - now()).then(() => target.snapshot()));
    const results = messages.map((inbox) => inbox.next('result'));
    for (const child of children) child.send({ type: 'go', warmStart, t0, tEnd });

    const reports = await withTimeout(
      Promise.all(results),
      tEnd - now() + 2 * ACQUIRE_TIMEOUT + 30_000,
      `${key}: workers did not finish`,
    );
    const [before, last] = await Promise.all(snapshots);
    const counter = workload.id === 'W3' ? await target.counter(`${key}:counter`) : undefined;
    await Promise.all(children.map((child) => exited(child, 15_000)));
    return measureSections({
      reports,
      server: { before, after: last },
      t0,
      tEnd,
      limit: workload.limit,
      counter,
      parentOffset,
    });
  } finally {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGKILL');
    await target.flush();
  }
}

/** The messages of one child, by type, and its death as a rejection. */
function collect(child) {
  const waiting = new Map();
  const arrived = new Map();
  child.on('message', (message) => {
    const resolve = waiting.get(message.type);
    if (resolve) resolve(message);
    else arrived.set(message.type, message);
  });
  const died = once(child, 'exit').then(([code, signal]) => {
    throw new Error(`worker ${child.pid} exited (${code ?? signal}) before it reported`);
  });
  died.catch(() => undefined);
  return {
    next(type) {
      if (arrived.has(type)) return Promise.resolve(arrived.get(type));
      return Promise.race([new Promise((resolve) => waiting.set(type, resolve)), died]);
    },
  };
}

async function exited(child, ms) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  await withTimeout(once(child, 'exit'), ms, `worker ${child.pid} did not exit`).catch(() => {
    process.kill(child.pid, 'SIGKILL');
  });
}

function after(ms) {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

export async function withTimeout(promise, ms, message) {
  let timer;
  try {
    return await Promise.race([
      promise,
      new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
