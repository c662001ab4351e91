// `npm run bench`: nest-lock side by side with redis-semaphore, redlock and a hand-written lock on
// a private redis-server; writes bench/results/<name>.{md,json,svg}. See bench/README.md.
//
// node bench/run.mjs [--quick] [--reps N] [--only W3,W4] [--variants id,id] [--scale X] [--out NAME]
// node bench/run.mjs --soak [--soak-cycles N] [--soak-waits N]
// node bench/run.mjs --topology cluster,redlock [--quick] [--reps N] [--scale X]
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { checkAcceptance } from './lib/acceptance.mjs';
import { snapshotLibrary } from './lib/library.mjs';
import { waitChart } from './lib/chart.mjs';
import { now } from './lib/clock.mjs';
import { consoleSummary, headline, markdown } from './lib/report.mjs';
import { runSections, runSlicedPairs } from './lib/runs.mjs';
import { aggregate, measurePairs, median } from './lib/stats.mjs';
import { startTarget } from './lib/topologies.mjs';
import { writeFormatted } from './lib/write.mjs';
import { REDIS_BENCHMARK, VARIANTS } from './lib/variants.mjs';
import { contended, sizedWorkload, WORKLOADS } from './lib/workloads.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const resultsDir = join(here, 'results');

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    reps: { type: 'string' },
    only: { type: 'string' },
    variants: { type: 'string' },
    scale: { type: 'string', default: '1' },
    out: { type: 'string' },
    pin: { type: 'string', default: 'same' },
    lib: { type: 'string' },
    baseline: { type: 'string' },
    soak: { type: 'boolean', default: false },
    'soak-cycles': { type: 'string' },
    'soak-waits': { type: 'string' },
    topology: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});

if (flags.help) {
  process.stdout.write(readFileSync(join(here, 'README.md'), 'utf8'));
  process.exit(0);
}
const library = snapshotLibrary(root, flags.lib);
process.once('exit', library.remove);
// Another build of nest-lock measured beside this one, in the same run (rows "… (baseline build)").
const baseline = flags.baseline ? snapshotLibrary(root, flags.baseline) : undefined;
if (baseline) process.once('exit', baseline.remove);
try {
  if (flags.soak) {
    const { runSoak } = await import('./soak.mjs');
    process.exitCode = (await runSoak(flags, library)) ? 0 : 1;
  } else if (flags.topology) {
    const { runTopologies } = await import('./topologies.mjs');
    await runTopologies(flags, library);
  } else {
    await runBench();
  }
} finally {
  library.remove();
  baseline?.remove();
}

async function runBench() {
  const reps = positiveInteger('reps', flags.reps ?? (flags.quick ? '1' : '5'));
  const only = flags.only ? flags.only.split(',').map((id) => id.trim().toUpperCase()) : ['W1', 'W2', 'W3', 'W4'];
  for (const id of only) if (!WORKLOADS[id]) throw new Error(`--only: unknown workload "${id}" (W1, W2, W3, W4)`);
  const chosen = flags.variants ? flags.variants.split(',').map((id) => id.trim()) : undefined;
  const scale = Number(flags.scale);
  if (!(scale > 0 && scale <= 20)) throw new Error('--scale must be a number in (0, 20]');
  const workloads = Object.fromEntries(only.map((id) => [id, sizedWorkload(id, { quick: flags.quick, scale })]));
  const out = flags.out ?? (flags.quick ? 'quick' : only.length < 4 || chosen ? 'partial' : 'latest');
  const benchmarkRequests = flags.quick ? 5_000 : 20_000;
  const placement = cpuPlacement(flags.pin);

  const target = await startTarget('single', { cpus: placement.redis });
  const [server] = target.servers;
  const started = now();
  const runs = [];
  try {
    console.log(
      `redis-server ${server.version} on ${server.url} (pid ${server.pid}); ${reps} repetition(s) of ${only.join(', ')}; ${placement.note}`,
    );
    for (let rep = 1; rep <= reps; rep++) {
      for (const id of only) {
        const record = (variant, metrics) => {
          runs.push({ rep, workload: id, variant: variant.id, metrics });
          console.log(`  rep ${rep}/${reps} ${id} ${variant.label.padEnd(32)} ${progressLine(id, metrics)}`);
        };
        const variants = rotate(variantsFor(id, chosen), rep - 1);
        if (contended(id)) {
          for (const variant of variants)
            record(variant, await runSections({ target, library, baseline, workload: workloads[id], variant, rep }));
          continue;
        }
        // W1 / W2: every library in one process, in turns; redis-benchmark before or after them.
        const floor = variants.find((variant) => variant.kind === 'redis-benchmark');
        const sliced = variants.filter((variant) => variant !== floor);
        if (floor && rep % 2 === 0) record(floor, redisBenchmark(server.port, benchmarkRequests, placement.pairs));
        if (sliced.length) {
          const results = await runSlicedPairs({
            target,
            library,
            baseline,
            workload: workloads[id],
            variants: sliced,
            rep,
            cpus: placement.pairs,
          });
          for (const variant of sliced) record(variant, measurePairs(results[variant.id]));
        }
        if (floor && rep % 2 === 1) record(floor, redisBenchmark(server.port, benchmarkRequests, placement.pairs));
      }
    }
  } finally {
    await target.stop();
  }

  // One row per workload and variant: its runs, and medians over them.
  const rows = [];
  for (const id of only) {
    for (const variant of variantsFor(id, chosen)) {
      const own = runs.filter((run) => run.workload === id && run.variant === variant.id).map((run) => run.metrics);
      if (own.length === 0) continue;
      const middle = medianRun(own);
      rows.push({
        workload: id,
        variant: variant.id,
        label: variant.label,
        role: variant.role,
        primary: variant.primary === true,
        runs: own.map(({ waits: _waits, ...rest }) => rest),
        summary: aggregate(own.map(({ waits: _waits, breakdown: _breakdown, errors: _errors, ...rest }) => rest)),
        breakdown: middle.breakdown,
        errors: own.reduce((sum, run) => sum + (run.errors?.count ?? 0), 0),
        firstError: own.find((run) => run.errors?.first)?.errors.first,
        waits: contended(id) ? own.flatMap((run) => run.waits).sort((a, b) => a - b) : undefined,
      });
    }
  }
  const checks = checkAcceptance(rows);
  const meta = {
    date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    machine: `${os.cpus()[0]?.model?.trim() ?? 'unknown CPU'}, ${os.availableParallelism()} cores, load ${os.loadavg()[0].toFixed(2)} at the end`,
    node: process.versions.node,
    redis: server.version,
    commit: flags.lib ? 'an unknown commit (--lib)' : gitCommit(),
    library: { source: library.source, digest: library.digest },
    ...(baseline ? { baseline: { source: baseline.source, digest: baseline.digest } } : {}),
    libraries: libraryVersions(),
    reps,
    quick: flags.quick,
    placement,
    minutes: Number(((now() - started) / 60_000).toFixed(1)),
    workloads: Object.fromEntries(Object.entries(workloads).map(([id, { describe: _d, ...sizes }]) => [id, sizes])),
  };

  mkdirSync(resultsDir, { recursive: true });
  const chartFile = `${out}.svg`;
  const panels = ['W3', 'W4']
    .filter((id) => rows.some((row) => row.workload === id))
    .map((id) => ({
      title: `${WORKLOADS[id].title}: wait for the ${id === 'W3' ? 'lock' : 'permit'}, by percentile (all repetitions)`,
      series: rows
        .filter((row) => row.workload === id)
        .map((row) => ({ label: row.label, waits: row.waits, subject: row.role === 'subject' })),
    }));
  if (panels.length) {
    const caption = `${meta.date} · ${reps} repetition(s) · ${meta.machine} · only ratios within one run mean anything`;
    writeFileSync(join(resultsDir, chartFile), waitChart(panels, caption));
  }
  const page = markdown({ meta, rows, checks, chartFile: panels.length ? chartFile : undefined });
  await writeFormatted(join(resultsDir, `${out}.md`), page);
  const json = { meta, checks, rows: rows.map(({ waits: _waits, ...row }) => row) };
  await writeFormatted(join(resultsDir, `${out}.json`), JSON.stringify(json, null, 1) + '\n');

  if (out === 'latest') {
    // The README shows the headline of the last full run, beside its chart.
    const readme = join(here, 'README.md');
    await writeFormatted(readme, headline({ meta, rows, checks }, readFileSync(readme, 'utf8')));
  }
  console.log(consoleSummary(checks));
  if (baseline) console.log(baselineSummary(rows));
  console.log(
    `\nwrote bench/results/${out}.md, ${out}.json${panels.length ? `, ${chartFile}` : ''} in ${meta.minutes} min`,
  );
}

/**
 * Where the processes run. On a small VM a ping-pong between two processes is fast when both sit
 * on one CPU (a context switch) and several times slower across CPUs (a wake-up of the other one),
 * and the scheduler flips between the two: unpinned, W1 and W2 measure mostly that. So by default
 * redis-server is pinned to CPU 0 and the W1/W2 process joins it there (`same`: pairs/s measure
 * the CPU a pair costs, client and server); `cross` puts it on CPU 1 (pairs/s measure wake-up
 * latency, closer to a network hop); `none` pins nothing. W3/W4 processes are never pinned.
 */
function cpuPlacement(pin) {
  if (!['same', 'cross', 'none'].includes(pin)) throw new Error('--pin must be same, cross or none');
  const usable = os.availableParallelism() >= 2 && !spawnSync('taskset', ['-c', '0', 'true']).error;
  if (pin === 'none' || !usable) {
    return { pin: 'none', note: usable ? 'nothing pinned' : 'nothing pinned (taskset or a second CPU missing)' };
  }
  return pin === 'same'
    ? { pin, redis: '0', pairs: '0', note: 'redis-server and the W1/W2 process on CPU 0; W3/W4 processes unpinned' }
    : {
        pin,
        redis: '0',
        pairs: '1',
        note: 'redis-server on CPU 0, the W1/W2 process on CPU 1; W3/W4 processes unpinned',
      };
}

function variantsFor(id, chosen) {
  return [...VARIANTS, REDIS_BENCHMARK].filter(
    (variant) =>
      variant.workloads.includes(id) &&
      (!chosen || chosen.includes(variant.id)) &&
      (!variant.baseline || flags.baseline !== undefined),
  );
}

/** Each nest-lock row against the same row on the baseline build: its throughput ratio, per workload. */
function baselineSummary(rows) {
  const lines = ['\nagainst the baseline build (throughput, this build ÷ baseline; medians):'];
  for (const row of rows.filter((candidate) => candidate.role === 'subject')) {
    const base = rows.find((other) => other.workload === row.workload && other.variant === `${row.variant}-baseline`);
    const mine = row.summary.rate?.median;
    const theirs = base?.summary.rate?.median;
    if (mine === undefined || theirs === undefined) continue;
    lines.push(
      `  ${row.workload} ${row.label.padEnd(28)} ${(mine / theirs).toFixed(3)}× (${Math.round(mine)} vs ${Math.round(theirs)})`,
    );
  }
  return lines.join('\n');
}

/** The floor: one client, PING after PING, as fast as the server answers; a pair needs two. */
function redisBenchmark(port, requests, cpus) {
  const args = ['-h', '127.0.0.1', '-p', String(port), '-t', 'ping', '-n', String(requests), '-c', '1', '--csv'];
  const [command, ...rest] =
    cpus === undefined ? ['redis-benchmark', ...args] : ['taskset', '-c', cpus, 'redis-benchmark', ...args];
  const run = spawnSync(command, rest, {
    encoding: 'utf8',
    timeout: 120_000,
  });
  if (run.error || run.status !== 0) throw new Error(`redis-benchmark failed: ${run.error?.message ?? run.stderr}`);
  const row = run.stdout.split('\n').find((line) => line.startsWith('"PING_MBULK"'));
  const fields = row?.split(',').map((field) => Number(field.replace(/"/g, '')));
  if (!fields || !Number.isFinite(fields[1])) throw new Error(`cannot read redis-benchmark output: ${run.stdout}`);
  // columns: test, rps, avg, min, p50, p95, p99, max (latencies in ms)
  return {
    rate: fields[1] / 2,
    pingRate: fields[1],
    latencyP50: fields[4] * 2,
    latencyP99: fields[6] * 2,
    roundTrips: 2,
    serverCommands: 2,
  };
}

function progressLine(id, metrics) {
  const rate = `${Math.round(metrics.rate).toLocaleString('en-US')} ${WORKLOADS[id].unit}`;
  if (!contended(id)) return rate;
  const safety =
    id === 'W3'
      ? `counter ${metrics.counterExact ? 'exact' : 'WRONG'}, ${metrics.overlaps} overlaps`
      : `max inside ${metrics.maxInside}`;
  const errors = metrics.errors.count ? `, ${metrics.errors.count} errors` : '';
  return `${rate}, wait p99 ${metrics.waitP99.toFixed(1)} ms, max ${metrics.waitMax.toFixed(0)} ms, ${safety}${errors}`;
}

/** The run whose throughput is the median: its per-command breakdown stands for the row. */
function medianRun(runs) {
  const middle = median(runs.map((run) => run.rate));
  return runs.reduce((best, run) => (Math.abs(run.rate - middle) < Math.abs(best.rate - middle) ? run : best));
}

function rotate(list, by) {
  const shift = by % list.length;
  return [...list.slice(shift), ...list.slice(0, shift)];
}

function positiveInteger(name, text) {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1 || value > 100)
    throw new Error(`--${name} must be a whole number from 1 to 100`);
  return value;
}

function gitCommit() {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'libs'], { cwd: root, encoding: 'utf8' }).trim();
    return dirty ? `${commit} + uncommitted changes in libs/` : commit;
  } catch {
    return 'unknown';
  }
}

function libraryVersions() {
  const version = (name) => {
    try {
      return JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')).version;
    } catch {
      return 'missing';
    }
  };
  return Object.fromEntries(
    ['redis-semaphore', '@sesamecare-oss/redlock', 'ioredis', '@nestjs/core'].map((name) => [name, version(name)]),
  );
}
