// `npm run bench -- --topology cluster,redlock` (issue 10, point 6): the contended workloads W3 and
// W4 on a Redis Cluster of 3 primaries and on Redlock over 3 independent masters, each beside the
// same workload on one redis-server in the same run, so that the cost of the topology is a ratio
// measured on one machine at one time. Writes bench/results/topologies.{md,json}.
//
// Every library runs where it can: on the cluster through an ioredis Cluster client (nest-lock
// through `redis: { cluster: { nodes } }`); on Redlock nest-lock's `redlock` option, redlock with its
// 3 clients and redis-semaphore's RedlockMutex (W4 is not run there: nest-lock refuses semaphores
// on Redlock). The key of each run differs (repetition, workload, library), so the runs of the
// cluster land on slots of all three primaries.
import os from 'node:os';
import { join } from 'node:path';
import { now } from './lib/clock.mjs';
import { runSections } from './lib/runs.mjs';
import { median } from './lib/stats.mjs';
import { startTarget, TOPOLOGIES } from './lib/topologies.mjs';
import { VARIANTS } from './lib/variants.mjs';
import { sizedWorkload } from './lib/workloads.mjs';
import { writeFormatted } from './lib/write.mjs';

const TITLES = { single: 'one redis-server', cluster: 'Redis Cluster, 3 primaries', redlock: 'Redlock, 3 masters' };

export async function runTopologies(flags, library) {
  const kinds = flags.topology === 'all' ? TOPOLOGIES : flags.topology.split(',').map((kind) => kind.trim());
  for (const kind of kinds) {
    if (!TOPOLOGIES.includes(kind)) throw new Error(`--topology: unknown "${kind}" (${TOPOLOGIES.join(', ')}, all)`);
  }
  const reps = Number(flags.reps ?? (flags.quick ? 1 : 3));
  if (!Number.isInteger(reps) || reps < 1 || reps > 100) throw new Error('--reps must be a whole number from 1 to 100');
  const scale = Number(flags.scale ?? 1);
  const workloads = {
    W3: sizedWorkload('W3', { quick: flags.quick, scale }),
    W4: sizedWorkload('W4', { quick: flags.quick, scale }),
  };
  const started = now();
  const runs = [];

  for (const kind of kinds) {
    const ids = kind === 'redlock' ? ['W3'] : ['W3', 'W4'];
    const single = await startTarget('single');
    const other = await startTarget(kind).catch(async (error) => {
      await single.stop();
      throw error;
    });
    console.log(`${TITLES[kind]} on ${other.servers.map((server) => server.port).join(', ')}; ${reps} repetition(s)`);
    try {
      for (let rep = 1; rep <= reps; rep++) {
        for (const id of ids) {
          const workload = workloads[id];
          const variants = VARIANTS.filter(
            (variant) => variant.workloads.includes(id) && variant.topologies?.includes(kind),
          );
          for (const variant of rotate(variants, rep - 1)) {
            // Both places in turn, the first one alternating: neither always runs on a warmer machine.
            for (const target of rep % 2 ? [other, single] : [single, other]) {
              const { waits, ...kept } = await runSections({ target, library, workload, variant, rep });
              kept.waitCount = waits.length;
              runs.push({ topology: kind, on: target.kind, rep, workload: id, variant: variant.id, metrics: kept });
              console.log(
                `  rep ${rep}/${reps} ${id} ${variant.label.padEnd(24)} ${target.kind.padEnd(8)} ${line(id, kept)}`,
              );
            }
          }
        }
      }
    } finally {
      await other.stop();
      await single.stop();
    }
  }

  const rows = summarize(runs);
  const meta = {
    date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    machine: `${os.cpus()[0]?.model?.trim() ?? 'unknown CPU'}, ${os.availableParallelism()} cores, load ${os.loadavg()[0].toFixed(2)} at the end`,
    node: process.versions.node,
    library: { source: library.source, digest: library.digest },
    reps,
    minutes: Number(((now() - started) / 60_000).toFixed(1)),
  };
  const out = flags.out ?? 'topologies';
  const dir = join(import.meta.dirname, 'results');
  await writeFormatted(join(dir, `${out}.md`), markdown(meta, rows, kinds, workloads));
  await writeFormatted(join(dir, `${out}.json`), JSON.stringify({ meta, rows, runs }, null, 1) + '\n');
  console.log(`\nwrote bench/results/${out}.md, ${out}.json in ${meta.minutes} min`);
}

/** One row per topology, workload and library: medians on one Redis and on the topology, and their ratio. */
function summarize(runs) {
  const rows = [];
  const keys = new Set(runs.map((run) => `${run.topology}|${run.workload}|${run.variant}`));
  for (const key of keys) {
    const [topology, workload, variant] = key.split('|');
    const own = runs.filter((run) => run.topology === topology && run.workload === workload && run.variant === variant);
    const on = (kind) => own.filter((run) => run.on === kind).map((run) => run.metrics);
    const [single, other] = [on('single'), on(topology)];
    const rates = (list) => list.map((metrics) => metrics.rate);
    rows.push({
      topology,
      workload,
      variant,
      label: VARIANTS.find((candidate) => candidate.id === variant).label,
      single: describe(single),
      other: describe(other),
      ratio: median(rates(other)) / median(rates(single)),
      safe: [...single, ...other].every((metrics) =>
        workload === 'W3' ? metrics.counterExact && metrics.overlaps === 0 : metrics.maxInside <= metrics.limit,
      ),
    });
  }
  return rows;
}

function describe(list) {
  const rates = list.map((metrics) => metrics.rate);
  return {
    rate: median(rates),
    min: Math.min(...rates),
    max: Math.max(...rates),
    waitP99: median(list.map((metrics) => metrics.waitP99)),
    fairness: median(list.map((metrics) => metrics.fairness)),
    overlaps: list.reduce((sum, metrics) => sum + (metrics.overlaps ?? 0), 0),
    counterExact: list.every((metrics) => metrics.counterExact !== false),
    maxInside: Math.max(...list.map((metrics) => metrics.maxInside)),
    errors: list.reduce((sum, metrics) => sum + (metrics.errors?.count ?? 0), 0),
  };
}

function markdown(meta, rows, kinds, workloads) {
  const lines = [
    '# nest-lock bench on Redis topologies',
    '',
    `${meta.date} · ${meta.reps} repetition(s) · ${meta.machine} · Node ${meta.node} · nest-lock from \`${meta.library.source}\` (JS digest ${meta.library.digest}) · ${meta.minutes} min`,
    '',
    'Each workload ran on the topology and on one redis-server in the same run, in turns (`npm run bench -- --topology ' +
      kinds.join(',') +
      '`). Only the ratios mean anything on a shared machine. Every server of a topology runs on this one machine (2 cores here): the cost of the topology is the extra work of its nodes and client hops, not a network.',
    '',
  ];
  for (const kind of kinds) {
    for (const id of ['W3', 'W4']) {
      const own = rows.filter((row) => row.topology === kind && row.workload === id);
      if (own.length === 0) continue;
      const workload = workloads[id];
      lines.push(`## ${TITLES[kind]}: ${workload.title}`, '', workload.describe(workload) + '.', '');
      lines.push(
        `| library | one Redis: sections/s (min–max) | ${TITLES[kind]}: sections/s (min–max) | topology ÷ one Redis | wait p99 one Redis / topology | fairness on the topology | ${id === 'W3' ? 'counter · overlaps' : 'most inside'} | errors |`,
        '| --- | --- | --- | --- | --- | --- | --- | --- |',
      );
      for (const row of own) {
        const { single, other } = row;
        const safety =
          id === 'W3'
            ? `${single.counterExact && other.counterExact ? 'exact' : 'WRONG'} · ${single.overlaps + other.overlaps}`
            : `${Math.max(single.maxInside, other.maxInside)} of ${workload.limit}`;
        lines.push(
          `| ${row.label} | ${range(single)} | ${range(other)} | ${row.ratio.toFixed(2)}× | ${ms(single.waitP99)} / ${ms(other.waitP99)} | ${Math.round(other.fairness).toLocaleString('en-US')} | ${safety} | ${single.errors + other.errors} |`,
        );
      }
      lines.push('');
    }
  }
  return lines.join('\n');
}

function range({ rate, min, max }) {
  const n = (value) => Math.round(value).toLocaleString('en-US');
  return `**${n(rate)}** (${n(min)}–${n(max)})`;
}

function ms(value) {
  return value >= 1_000 ? `${(value / 1_000).toFixed(1)} s` : `${value < 10 ? value.toFixed(1) : Math.round(value)} ms`;
}

function line(id, metrics) {
  const safety =
    id === 'W3'
      ? `counter ${metrics.counterExact ? 'exact' : 'WRONG'}, ${metrics.overlaps} overlaps`
      : `max inside ${metrics.maxInside}`;
  const errors = metrics.errors.count ? `, ${metrics.errors.count} errors (${metrics.errors.first})` : '';
  return `${Math.round(metrics.rate)} sections/s, wait p99 ${metrics.waitP99.toFixed(1)} ms, ${safety}${errors}`;
}

function rotate(list, by) {
  const shift = by % list.length;
  return [...list.slice(shift), ...list.slice(0, shift)];
}
