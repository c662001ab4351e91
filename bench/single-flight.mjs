// The single-flight workload (issue 33): N processes × M concurrent misses of one cold key, a loader
// of a fixed time, in five ways — SingleFlightService.load; the demo's workflow by hand (lock, read the
// cache again, load, fill); the floor of a coordinated load (one process loads and publishes the value
// to the others, subscribed beforehand); callers of one process sharing one load, processes not (what
// in-process coalescing gives); and no coordination.
// Each way: loader calls, the callers' latency over the loader's time, Redis commands per request.
//
// node bench/single-flight.mjs [--processes 10] [--callers 1000] [--loader 200] [--reps 3] [--ways a,b] [--out NAME]
// Writes bench/results/<NAME>.md and .json (NAME: single-flight). Needs the built library (npm run build).
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { startRedis } from './lib/redis-server.mjs';
import { median, quantile } from './lib/stats.mjs';
import { writeFormatted } from './lib/write.mjs';

const { values: flags } = parseArgs({
  options: {
    processes: { type: 'string', default: '10' },
    callers: { type: 'string', default: '1000' },
    loader: { type: 'string', default: '200' },
    reps: { type: 'string', default: '3' },
    out: { type: 'string', default: 'single-flight' },
    ways: { type: 'string', default: '' },
  },
});
const processes = Number(flags.processes);
const callers = Number(flags.callers);
const loaderMs = Number(flags.loader);
const reps = Number(flags.reps);
const chosen = flags.ways.split(',').filter(Boolean);
const WORKER = new URL('../test/support/workers/single-flight.mjs', import.meta.url).pathname;

/** The ways, and how many callers each process fires (by hand every caller takes the lock in turn: fewer). */
const WAYS = [
  { mode: 'single-flight', title: 'SingleFlightService.load', callers },
  { mode: 'lock-reread', title: 'lock + re-read by hand (the demo)', callers: Math.max(1, Math.round(callers / 10)) },
  { mode: 'push', title: 'floor: one load, its value published to subscribers', callers },
  { mode: 'local', title: 'one load per process (in-process coalescing)', callers },
  { mode: 'none', title: 'no coordination', callers },
];

const server = await startRedis();
const admin = new Redis(server.url);
const results = [];
try {
  for (let rep = 1; rep <= reps; rep++) {
    for (const way of WAYS.filter((w) => chosen.length === 0 || chosen.includes(w.mode))) {
      const run = await fire(way, `cold:${rep}:${way.mode}`);
      results.push({ ...run, mode: way.mode, rep });
      console.log(
        `rep ${rep}/${reps} ${way.title.padEnd(46)} ${run.loads} load(s), p99 ${run.p99.toFixed(0)} ms ` +
          `(${run.overLoader.toFixed(0)} over the loader's ${run.loaderMs.toFixed(0)}), ${run.commandsPerRequest.toFixed(3)} commands/request`,
      );
    }
  }
} finally {
  admin.disconnect();
  await server.stop();
}
await report();

/** One run: every process ready, then all fire at one moment; what came of it. */
async function fire(way, key) {
  const reports = [];
  const children = Array.from({ length: processes }, (_, i) => {
    const child = spawn(
      process.execPath,
      [WORKER, server.url, key, String(way.callers), String(loaderMs), way.mode, String(i % 2 ? 2_000 : 3_000)],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    createInterface({ input: child.stdout }).on('line', (line) => reports.push(JSON.parse(line)));
    return child;
  });
  await until(() => reports.filter((r) => r.event === 'ready').length === processes);
  const before = await commandsProcessed();
  const startAt = Date.now() + 500;
  for (const child of children) child.stdin.write(`${startAt}\n`);
  await until(() => reports.filter((r) => r.event === 'done').length === processes, 120_000);
  const commands = (await commandsProcessed()) - before - 1;
  const done = reports.filter((r) => r.event === 'done');
  const latencies = done.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const loaded = reports.filter((r) => r.event === 'loaded').map((r) => r.ms);
  const loaderTime = median(loaded);
  const p99 = quantile(latencies, 0.99);
  return {
    processes,
    callers: way.callers,
    loads: Number(await admin.get(`${key}:loads`)),
    loaderMs: loaderTime,
    p50: quantile(latencies, 0.5),
    p99,
    overLoader: p99 - loaderTime,
    commandsPerRequest: commands / (processes * way.callers),
    served: done.reduce((sum, r) => sum + r.values, 0),
  };
}

async function commandsProcessed() {
  return Number(/total_commands_processed:(\d+)/.exec(await admin.info('stats'))[1]);
}

async function until(check, ms = 60_000) {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('a single-flight worker did not report in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function report() {
  const rows = WAYS.filter((way) => results.some((run) => run.mode === way.mode)).map((way) => {
    const runs = results.filter((run) => run.mode === way.mode);
    const med = (field) => median(runs.map((run) => run[field]));
    return {
      ...way,
      loads: med('loads'),
      p50: med('p50'),
      p99: med('p99'),
      overLoader: med('overLoader'),
      commandsPerRequest: med('commandsPerRequest'),
      served: med('served'),
    };
  });
  const out = new URL(`results/${flags.out}`, import.meta.url).pathname;
  writeFileSync(
    `${out}.json`,
    `${JSON.stringify({ processes, callers, loaderMs, reps, rows, runs: results }, null, 2)}\n`,
  );
  const lines = [
    `# Single-flight: ${processes} processes × concurrent misses of one cold key, a ${loaderMs} ms loader`,
    '',
    `Medians of ${reps} repetition(s), one redis-server, this machine (\`node bench/single-flight.mjs\`). "Over the`,
    "loader's\": the callers' p99 less the loader's own time (its timer included). By hand, each caller takes the",
    'lock in turn: it fires a tenth of the callers.',
    '',
    '| way | callers | loader calls | served | p50 ms | p99 ms | p99 over the loader ms | Redis commands / request |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (row) =>
        `| ${row.title} | ${processes} × ${row.callers} | ${row.loads} | ${row.served} | ${row.p50.toFixed(0)} | ${row.p99.toFixed(0)} | ${row.overLoader.toFixed(0)} | ${row.commandsPerRequest.toFixed(3)} |`,
    ),
    '',
  ];
  await writeFormatted(`${out}.md`, lines.join('\n'));
  console.log(`wrote ${out}.md and .json`);
}
