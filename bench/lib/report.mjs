// The markdown table, the console summary and the JSON of a bench run.
import { formatMs } from './chart.mjs';
import { WORKLOADS } from './workloads.mjs';

const int = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

const num = (value, digits = 0) =>
  Number.isFinite(value)
    ? value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : '–';
const pct = (value) => (Number.isFinite(value) ? `${Math.round(value * 100)} %` : '–');
const med = (row, metric) => row.summary[metric]?.median;
const range = (row, metric) => {
  const stat = row.summary[metric];
  if (!stat) return '–';
  return `**${int.format(stat.median)}** (${int.format(stat.min)}–${int.format(stat.max)})`;
};
const fairness = (value) => (Number.isFinite(value) ? (value >= 100 ? int.format(value) : value.toFixed(1)) : '–');

/** The markdown page of one run: environment, acceptance, one table per workload, command breakdowns. */
export function markdown({ meta, rows, checks, chartFile }) {
  const lines = [
    `# nest-lock bench — ${meta.date}`,
    '',
    `${meta.machine}; Node ${meta.node}; redis-server ${meta.redis} (private, no persistence); nest-lock built from \`${meta.library.source}\` at ${meta.commit} (JS digest ${meta.library.digest}); CPUs: ${meta.placement.note} (\`--pin ${meta.placement.pin}\`).`,
    `${meta.reps} repetition${meta.reps === 1 ? '' : 's'}${meta.quick ? ' (--quick: short runs, a smoke check, not a measurement)' : ''}; within each repetition the libraries run one after another, in an order rotated every repetition.`,
    'Each cell is the median over the repetitions; throughput also shows min–max. This machine is noisy: compare ratios within this run, not numbers across runs.',
    '',
  ];

  if (checks.length) {
    lines.push('## Acceptance (issue 31): nest-lock against the best anchor of this run', '');
    lines.push(
      '| workload | point | nest-lock | best anchor | ratio | target | result |',
      '| --- | --- | --- | --- | --- | --- | --- |',
    );
    for (const check of checks)
      lines.push(
        `| ${check.workload} | ${check.point} | ${checkValue(check)} | ${anchorCell(check)} | ${ratioCell(check)} | ${check.target} | ${check.pass ? 'pass' : '**FAIL**'} |`,
      );
    lines.push('');
  }

  for (const id of ['W3', 'W4', 'W1', 'W2']) {
    const workloadRows = rows.filter((row) => row.workload === id);
    if (workloadRows.length === 0) continue;
    const workload = meta.workloads[id];
    lines.push(`## ${WORKLOADS[id].title}`, '', `${WORKLOADS[id].describe(workload)}.`, '');
    if (id === 'W3' || id === 'W4') lines.push(...sectionTable(id, workloadRows));
    else lines.push(...pairTable(workloadRows));
    lines.push('');
  }

  if (chartFile && rows.some((row) => row.workload === 'W3' || row.workload === 'W4')) {
    lines.push('## Wait-time distribution', '', `![wait time by percentile, per library](${chartFile})`, '');
  }

  lines.push('## Server commands per operation, by command (median run)', '');
  lines.push(
    "Every command Redis ran for the lock, scripts and the commands they call included; the bench's own counter GET/SET left out.",
    '',
  );
  lines.push('| workload | library | commands |', '| --- | --- | --- |');
  for (const row of rows) {
    if (!row.breakdown) continue;
    const parts = Object.entries(row.breakdown)
      .sort((a, b) => b[1] - a[1])
      .map(([name, count]) => `${name} ${count.toFixed(2)}`);
    lines.push(`| ${row.workload} | ${row.label} | ${parts.join(', ') || '–'} |`);
  }
  lines.push('');

  const errors = rows.filter((row) => row.errors > 0);
  if (errors.length) {
    lines.push('## Errors', '');
    for (const row of errors)
      lines.push(`- ${row.workload} ${row.label}: ${row.errors} failed operations, e.g. \`${row.firstError}\``);
    lines.push('');
  }
  return lines.join('\n');
}

function sectionTable(id, rows) {
  const head =
    '| library | sections/s (min–max) | wait p50 | wait p99 | wait max | fairness | same worker | busy | within a process | gap within · between |' +
    (id === 'W4' ? ' most inside |' : ' counter · overlap |') +
    ' server cmds / section | round trips / section | client CPU µs / section |';
  const lines = [head, `|${' --- |'.repeat(head.split('|').length - 2)}`];
  for (const row of rows) {
    const safety =
      id === 'W4'
        ? `${Math.max(...row.runs.map((run) => run.maxInside))}`
        : `${row.runs.every((run) => run.counterExact) ? 'exact' : '**WRONG**'} · ${row.runs.reduce((sum, run) => sum + run.overlaps, 0) === 0 ? 'none' : '**OVERLAP**'}`;
    lines.push(
      `| ${name(row)} | ${range(row, 'rate')} | ${formatMs(med(row, 'waitP50'))} | ${formatMs(med(row, 'waitP99'))} | ${formatMs(med(row, 'waitMax'))} | ${fairness(med(row, 'fairness'))} | ${pct(med(row, 'sameWorker'))} | ${pct(med(row, 'busy'))} | ${pct(med(row, 'sameProcess'))} | ${formatMs(med(row, 'gapWithin'))} · ${formatMs(med(row, 'gapBetween'))} | ${safety} | ${num(med(row, 'serverCommands'), 1)} | ${num(med(row, 'roundTrips'), 1)} | ${int.format(med(row, 'cpuMicros'))} |`,
    );
  }
  return lines;
}

function pairTable(rows) {
  const head =
    '| library | pairs/s (min–max) | pair p50 | pair p99 | server cmds / pair | round trips / pair | client CPU µs / pair | server CPU µs / pair |';
  const lines = [head, `|${' --- |'.repeat(head.split('|').length - 2)}`];
  for (const row of rows) {
    const isRedisBenchmark = row.variant === 'redis-benchmark';
    lines.push(
      `| ${name(row)} | ${range(row, 'rate')} | ${formatMs(med(row, 'latencyP50'))} | ${formatMs(med(row, 'latencyP99'))} | ${isRedisBenchmark ? '2 (PING)' : num(med(row, 'serverCommands'), 1)} | ${isRedisBenchmark ? '2' : num(med(row, 'roundTrips'), 1)} | ${isRedisBenchmark ? '–' : int.format(med(row, 'cpuMicros'))} | ${isRedisBenchmark ? '–' : num(med(row, 'serverCpuMicros'), 0)} |`,
    );
  }
  return lines;
}

function name(row) {
  if (row.role === 'subject') return `**${row.label}**`;
  if (row.role === 'floor') return `_${row.label}_`;
  return row.label;
}

function checkValue(check) {
  if (typeof check.value === 'string') return check.value;
  return formatMetric(check.metric, check.value, check.percent);
}

function anchorCell(check) {
  if (!check.anchor) return check.note ?? '–';
  return `${check.anchor}: ${formatMetric(check.metric, check.anchorValue)}`;
}

function ratioCell(check) {
  return Number.isFinite(check.ratio) ? `${check.ratio.toFixed(2)}×` : '–';
}

function formatMetric(metric, value, percent) {
  if (percent) return pct(value);
  if (metric === 'rate') return int.format(value);
  if (metric?.startsWith('wait')) return formatMs(value);
  if (metric === 'fairness') return fairness(value);
  if (metric === 'cpuMicros') return `${num(value, 0)} µs`;
  return num(value, 1);
}

/**
 * The headline for bench/README.md: when, on what, the W3 table and the acceptance points.
 * Replaces what stands between the README's `headline` markers.
 */
export function headline({ meta, rows, checks }, readme) {
  const w3 = rows.filter((row) => row.workload === 'W3');
  const failed = checks.filter((check) => !check.pass).length;
  const block = [
    HEADLINE_START,
    '',
    `Last full run: ${meta.date}, ${meta.reps} repetitions, nest-lock built from \`${meta.library.source}\` at ${meta.commit} (JS digest ${meta.library.digest}); ${checks.length - failed} of ${checks.length} acceptance points pass. W3 (${WORKLOADS.W3.describe(meta.workloads.W3)}):`,
    '',
    ...(w3.length ? sectionTable('W3', w3) : ['(W3 did not run)']),
    '',
    HEADLINE_END,
  ].join('\n');
  const start = readme.indexOf(HEADLINE_START);
  const end = readme.indexOf(HEADLINE_END);
  if (start < 0 || end < start) return readme;
  return readme.slice(0, start) + block + readme.slice(end + HEADLINE_END.length);
}

const HEADLINE_START = '<!-- headline: written by npm run bench (full runs) -->';
const HEADLINE_END = '<!-- /headline -->';

/** A few lines for the terminal: the acceptance points, pass or fail. */
export function consoleSummary(checks) {
  const lines = ['', 'nest-lock against the best anchor of this run (issue 31 acceptance):'];
  for (const check of checks) {
    const ratio = Number.isFinite(check.ratio)
      ? ` = ${check.ratio.toFixed(2)}× (${check.anchor} ${formatMetric(check.metric, check.anchorValue)})`
      : '';
    lines.push(`  ${check.pass ? 'pass' : 'FAIL'}  ${check.workload}  ${check.point}: ${checkValue(check)}${ratio}`);
  }
  const passed = checks.filter((check) => check.pass).length;
  lines.push(`  ${passed} of ${checks.length} points pass`);
  return lines.join('\n');
}
