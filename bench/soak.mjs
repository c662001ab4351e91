// `npm run bench -- --soak`: issue 8 item 5. nest-lock alone on a private redis-server:
//   1. 1,000,000 lock/unlock cycles in one process (64 concurrent free keys), heap and handles
//      sampled after a full GC between batches (nothing in flight then);
//   2. 200,000 contended waits: two processes, several workers on each of a few keys;
// with Redis's subscribed channels (PUBSUB CHANNELS / SHARDCHANNELS / NUMSUB / NUMPAT) and client
// count sampled alongside. Passes when the heap after the cycles and after the waits is within
// 5 MB of the heap after the first 10,000 cycles, the quiescent handle count is back where it was,
// and no channel is left subscribed once nobody waits.
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { now } from './lib/clock.mjs';
import { startRedis } from './lib/redis-server.mjs';
import { writeFormatted } from './lib/write.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const MB = 1024 * 1024;
const HEAP_SLACK = 5 * MB;
/** Quiescent handles may differ by this many (a connection's timers) without counting as a leak. */
const HANDLE_SLACK = 2;
/** Each phase stops here, finished or not (an unfinished phase fails the soak). */
const PHASE_LIMIT_MS = 12 * 60_000;

export async function runSoak(flags, library) {
  const cycles = count('soak-cycles', flags['soak-cycles'] ?? 1_000_000);
  const waits = count('soak-waits', flags['soak-waits'] ?? Math.max(1, Math.round(cycles / 5)));
  const baselineAt = Math.min(10_000, Math.max(1, Math.floor(cycles / 10)));
  const checkpoints = [baselineAt];
  for (let i = 1; i <= 20; i++) checkpoints.push(baselineAt + Math.round(((cycles - baselineAt) * i) / 20));
  const uniqueCheckpoints = [...new Set(checkpoints)].filter((point) => point <= cycles);

  const server = await startRedis();
  const admin = new Redis(server.url);
  const samples = [];
  const children = [];
  const started = now();
  let report;
  try {
    console.log(
      `soak: ${cycles.toLocaleString('en-US')} cycles, ${waits.toLocaleString('en-US')} contended waits, on ${server.url} (pid ${server.pid})`,
    );
    const main = start('main', server.url, library.dir);
    const helper = start('helper', server.url, library.dir);
    children.push(main.child, helper.child);
    await Promise.all([main.next('ready'), helper.next('ready')]);

    const pending = new Set();
    const onSample = async (message) => {
      const redisSampled = redisSample(admin);
      pending.add(redisSampled);
      const redis = await redisSampled.finally(() => pending.delete(redisSampled));
      samples.push({ ...message, redis });
      const heap = (message.heapUsed / MB).toFixed(1);
      console.log(
        `  ${message.role.padEnd(6)} ${message.phase.padEnd(9)} ${String(message.done).padStart(9)}  heap ${heap} MB  handles ${message.handles}  channels ${redis.channels}  clients ${redis.clients}`,
      );
    };
    main.onSample = onSample;
    helper.onSample = onSample;

    // 1. cycles
    main.child.send({
      type: 'cycles',
      cycles,
      checkpoints: uniqueCheckpoints,
      deadline: now() + PHASE_LIMIT_MS,
      concurrency: 64,
    });
    const cyclesDone = await main.next('cycles-done');
    console.log(
      `  cycles: ${cyclesDone.cycles.toLocaleString('en-US')} in ${cyclesDone.seconds.toFixed(0)} s, ${cyclesDone.errors} errors`,
    );

    // 2. contended waits, half counted in each process
    const deadline = now() + PHASE_LIMIT_MS;
    const perProcess = Math.ceil(waits / 2);
    const contend = {
      type: 'contend',
      waits: perProcess,
      keys: 8,
      workersPerKey: 2,
      deadline,
      sampleEvery: Math.max(1, Math.round(perProcess / 10)),
    };
    main.child.send(contend);
    helper.child.send(contend);
    const contended = await Promise.all([main.next('contended-done'), helper.next('contended-done')]);
    for (const done of contended) {
      console.log(
        `  contended (${done.role}): ${done.waits.toLocaleString('en-US')} waits of ${done.acquired.toLocaleString('en-US')} acquisitions in ${done.seconds.toFixed(0)} s, ${done.errors} errors`,
      );
    }

    // Nobody waits any more: every channel must be dropped (allowing a grace period to unsubscribe).
    let leftover = await redisSample(admin);
    for (let tries = 0; tries < 50 && leftover.channels + leftover.patterns > 0; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      leftover = await redisSample(admin);
    }
    main.child.send({ type: 'final' });
    const final = await main.next('final');
    await onSample(final);

    main.child.send({ type: 'close' });
    helper.child.send({ type: 'close' });
    await Promise.all([main.next('closed'), helper.next('closed')]);
    const afterClose = await redisSample(admin);
    await Promise.allSettled([...pending]);

    const mainCycles = samples.filter((sample) => sample.role === 'main' && sample.phase === 'cycles');
    const baseline = mainCycles[0];
    const afterCycles = mainCycles.at(-1);
    const allSamples = samples.map((sample) => sample.redis);
    report = {
      date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      redis: server.version,
      node: process.versions.node,
      library: { source: library.source, digest: library.digest },
      minutes: Number(((now() - started) / 60_000).toFixed(1)),
      target: { cycles, waits, baselineAt },
      cycles: cyclesDone,
      contended,
      baseline: pick(baseline),
      afterCycles: pick(afterCycles),
      final: pick(final),
      leftoverChannels: leftover,
      afterClose,
      mostChannels: Math.max(...allSamples.map((redis) => redis.channels)),
      mostClients: Math.max(...allSamples.map((redis) => redis.clients)),
      samples: samples.map(({ type: _type, ...sample }) => sample),
    };
    const totalWaits = contended.reduce((sum, done) => sum + done.waits, 0);
    report.checks = [
      {
        point: `${cyclesDone.target.toLocaleString('en-US')} cycles done`,
        value: cyclesDone.cycles.toLocaleString('en-US'),
        pass: cyclesDone.cycles >= cyclesDone.target && cyclesDone.errors === 0,
      },
      {
        point: `${waits.toLocaleString('en-US')} contended waits done`,
        value: totalWaits.toLocaleString('en-US'),
        pass: totalWaits >= waits && contended.every((done) => done.errors === 0),
      },
      heapCheck('heap after the cycles', afterCycles, baseline),
      heapCheck('heap after the contended waits', final, baseline),
      {
        point: `active handles back to the baseline (±${HANDLE_SLACK})`,
        value: `${baseline.handles} → ${afterCycles.handles} → ${final.handles}`,
        pass:
          Math.abs(final.handles - baseline.handles) <= HANDLE_SLACK &&
          Math.abs(afterCycles.handles - baseline.handles) <= HANDLE_SLACK,
      },
      {
        point: 'no channel left subscribed once nobody waits',
        value: `${leftover.channels} channels, ${leftover.shardChannels} shard channels, ${leftover.patterns} patterns (at most ${report.mostChannels} during the run)`,
        pass: leftover.channels === 0 && leftover.patterns === 0,
      },
    ];
  } finally {
    for (const child of children) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      const timer = setTimeout(() => child.exitCode === null && process.kill(child.pid, 'SIGKILL'), 5_000);
      await once(child, 'exit');
      clearTimeout(timer);
    }
    admin.disconnect();
    await server.stop();
  }

  const passed = report.checks.every((check) => check.pass);
  mkdirSync(join(here, 'results'), { recursive: true });
  const out = flags.out ?? 'soak';
  await writeFormatted(join(here, 'results', `${out}.json`), JSON.stringify(report, null, 1) + '\n');
  await writeFormatted(join(here, 'results', `${out}.md`), soakMarkdown(report));
  console.log('');
  for (const check of report.checks) console.log(`  ${check.pass ? 'pass' : 'FAIL'}  ${check.point}: ${check.value}`);
  console.log(
    `\nsoak ${passed ? 'passed' : 'FAILED'}; wrote bench/results/${out}.md, ${out}.json in ${report.minutes} min`,
  );
  return passed;
}

function start(role, url, library) {
  const child = fork(join(here, 'soak-worker.mjs'), [JSON.stringify({ role, url, library })], {
    execArgv: ['--expose-gc'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const waiting = new Map();
  const handle = {
    child,
    onSample: undefined,
    next(type) {
      return new Promise((resolve, reject) => {
        const limit = setTimeout(
          () => reject(new Error(`soak ${role}: no "${type}" in time`)),
          PHASE_LIMIT_MS + 60_000,
        );
        limit.unref();
        waiting.set(type, {
          resolve: (message) => {
            clearTimeout(limit);
            resolve(message);
          },
          reject,
        });
      });
    },
  };
  child.on('message', (message) => {
    if (message.type === 'failed') {
      console.error(`soak ${role} failed: ${message.error}`);
      return;
    }
    if (message.type === 'sample') {
      void handle.onSample?.(message);
      return;
    }
    const waiter = waiting.get(message.type);
    waiting.delete(message.type);
    waiter?.resolve(message);
  });
  void once(child, 'exit').then(([code, signal]) => {
    for (const waiter of waiting.values()) waiter.reject(new Error(`soak ${role} exited (${code ?? signal})`));
    waiting.clear();
  });
  return handle;
}

async function redisSample(admin) {
  const [channels, shardChannels, patterns, clients] = await Promise.all([
    admin.call('PUBSUB', 'CHANNELS'),
    admin.call('PUBSUB', 'SHARDCHANNELS'),
    admin.call('PUBSUB', 'NUMPAT'),
    admin.info('clients'),
  ]);
  const names = [...channels, ...shardChannels];
  let subscribers = 0;
  if (channels.length) {
    const numsub = await admin.call('PUBSUB', 'NUMSUB', ...channels.slice(0, 1000));
    for (let i = 1; i < numsub.length; i += 2) subscribers += Number(numsub[i]);
  }
  if (shardChannels.length) {
    const numsub = await admin.call('PUBSUB', 'SHARDNUMSUB', ...shardChannels.slice(0, 1000));
    for (let i = 1; i < numsub.length; i += 2) subscribers += Number(numsub[i]);
  }
  return {
    channels: channels.length + shardChannels.length,
    shardChannels: shardChannels.length,
    subscribers,
    patterns: Number(patterns),
    clients: Number(/connected_clients:(\d+)/.exec(clients)?.[1] ?? NaN),
    some: names.slice(0, 5),
  };
}

function heapCheck(what, sample, baseline) {
  const delta = sample.heapUsed - baseline.heapUsed;
  return {
    point: `${what} within 5 MB of the heap after the first ${baseline.done.toLocaleString('en-US')} cycles`,
    value: `${(baseline.heapUsed / MB).toFixed(1)} MB → ${(sample.heapUsed / MB).toFixed(1)} MB (${delta >= 0 ? '+' : ''}${(delta / MB).toFixed(2)} MB)`,
    pass: Math.abs(delta) <= HEAP_SLACK,
  };
}

function pick(sample) {
  const { phase, done, heapUsed, rss, handles, byType } = sample;
  return { phase, done, heapUsed, rss, handles, byType };
}

function count(name, text) {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1 || value > 100_000_000)
    throw new Error(`--${name} must be a whole number ≥ 1`);
  return value;
}

function soakMarkdown(report) {
  const mb = (bytes) => (bytes / MB).toFixed(1);
  const lines = [
    `# nest-lock soak — ${report.date}`,
    '',
    `Node ${report.node}, redis-server ${report.redis} (private); nest-lock built from \`${report.library.source}\` (JS digest ${report.library.digest}); ${report.minutes} min. Heap = \`heapUsed\` after \`global.gc()\`.`,
    '',
    '| point | value | result |',
    '| --- | --- | --- |',
    ...report.checks.map((check) => `| ${check.point} | ${check.value} | ${check.pass ? 'pass' : '**FAIL**'} |`),
    '',
    `Cycles: ${report.cycles.cycles.toLocaleString('en-US')} in ${report.cycles.seconds.toFixed(0)} s. Contended: ${report.contended.map((done) => `${done.role} ${done.waits.toLocaleString('en-US')} waits of ${done.acquired.toLocaleString('en-US')} acquisitions in ${done.seconds.toFixed(0)} s`).join('; ')}.`,
    '',
    '| process | phase | done | heap MB | rss MB | handles | channels | subscribers | clients |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...report.samples.map(
      (sample) =>
        `| ${sample.role} | ${sample.phase} | ${sample.done.toLocaleString('en-US')} | ${mb(sample.heapUsed)} | ${mb(sample.rss)} | ${sample.handles} | ${sample.redis.channels} | ${sample.redis.subscribers} | ${sample.redis.clients} |`,
    ),
    '',
    `Handles at the baseline: ${JSON.stringify(report.baseline.byType)}; at the end: ${JSON.stringify(report.final.byType)}.`,
    '',
  ];
  return lines.join('\n');
}
