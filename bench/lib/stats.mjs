// From what the workers recorded to the metrics of one run, and from runs to medians.
import { serverDelta } from './server-stats.mjs';

/** The `p`-quantile (0–1) of sorted numbers, nearest rank. */
export function quantile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil(p * sorted.length) - 1;
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank))];
}

export function median(values) {
  const finite = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (finite.length === 0) return NaN;
  const middle = finite.length >> 1;
  return finite.length % 2 ? finite[middle] : (finite[middle - 1] + finite[middle]) / 2;
}

const ascending = (a, b) => a - b;

/**
 * Per-operation costs over the window each worker actually sampled (its timers may fire late on
 * a busy event loop): client CPU, commands and socket writes of the lock clients, divided by the
 * operations that ended inside that worker's own window.
 */
function clientCosts(reports, endsOf) {
  let operations = 0;
  let cpuMicros = 0;
  let commands = 0;
  let writes = 0;
  let excluded = 0;
  for (const report of reports) {
    const [first, last] = report.samples;
    operations += endsOf(report).filter((end) => end >= first.at && end <= last.at).length;
    cpuMicros += last.cpuMicros - first.cpuMicros;
    commands += last.commands - first.commands;
    writes += last.writes - first.writes;
    excluded += last.excludedCommands - first.excludedCommands;
  }
  return {
    cpuMicros: cpuMicros / operations,
    commands: commands / operations,
    roundTrips: writes / operations,
    excludedPerOperation: excluded / operations,
  };
}

/**
 * Server-side counts (`delta`: by command name, and CPU seconds): every command Redis ran, those a
 * script ran included, less the bench's own (the workers' counter GET and SET), per operation.
 */
function serverCosts(delta, operations, excludedPerOperation) {
  const breakdown = {};
  let total = 0;
  let scripts = 0;
  for (const [name, calls] of Object.entries(delta.commands)) {
    breakdown[name] = calls / operations;
    total += calls;
    if (/^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/.test(name)) scripts += calls;
  }
  // The counter GET and SET of W3 sections are the bench's, not the lock's.
  for (const name of ['get', 'set']) {
    if (breakdown[name] === undefined || excludedPerOperation === 0) continue;
    breakdown[name] = Math.max(0, breakdown[name] - excludedPerOperation / 2);
    if (breakdown[name] < 0.005) delete breakdown[name];
  }
  return {
    serverCommands: total / operations - excludedPerOperation,
    scripts: scripts / operations,
    serverCpuMicros: (delta.cpuSeconds * 1e6) / operations,
    breakdown,
  };
}

/** W1 / W2, one variant's slices: pairs per second and the latency of one acquire + release. */
export function measurePairs(result) {
  const latencies = result.latencies.sort(ascending);
  const operations = result.pairs;
  return {
    rate: operations / (result.elapsed / 1000),
    operations,
    latencyP50: quantile(latencies, 0.5),
    latencyP99: quantile(latencies, 0.99),
    latencyMax: latencies.at(-1) ?? NaN,
    cpuMicros: result.cpuMicros / operations,
    commands: result.commands / operations,
    roundTrips: result.writes / operations,
    ...serverCosts(result.server, operations, 0),
    errors: result.errors,
  };
}

/**
 * W3 / W4: sections per second, waits (request to section start) of the sections requested in
 * the window, how the lock was shared, and the safety checks over every section of the run.
 */
export function measureSections({ reports, server, t0, tEnd, limit, counter, parentOffset = 0 }) {
  const seconds = (tEnd - t0) / 1000;
  // Each process's times moved onto the parent's clock, through the offsets all measured to Redis's.
  const holds = reports
    .flatMap((report, process) => {
      const shift = (report.clockOffset ?? parentOffset) - parentOffset;
      return report.holds.map(([worker, requested, start, end]) => ({
        who: `${process}:${worker}`,
        requested: requested + shift,
        start: start + shift,
        end: end + shift,
      }));
    })
    .sort((a, b) => a.start - b.start);
  const operations = holds.filter((hold) => hold.end >= t0 && hold.end <= tEnd).length;
  const inWindow = holds.filter((hold) => hold.requested >= t0 && hold.requested < tEnd);
  const waits = inWindow.map((hold) => hold.start - hold.requested).sort(ascending);
  const waitP50 = quantile(waits, 0.5);
  const waitMax = waits.at(-1) ?? NaN;

  // The worker that released last before a section started: is it the one starting it again?
  const byEnd = [...holds].sort((a, b) => a.end - b.end);
  // The gap between two holders (the previous one's release to the next one's grant), kept apart for
  // a handover within one process and one between processes.
  let handovers = 0;
  let sameWorker = 0;
  let sameProcess = 0;
  const gapsWithin = [];
  const gapsBetween = [];
  for (const hold of inWindow) {
    const previous = lastEndingBefore(byEnd, hold.start);
    if (!previous) continue;
    handovers++;
    if (previous.who === hold.who) sameWorker++;
    const within = previous.who.split(':')[0] === hold.who.split(':')[0];
    if (within) sameProcess++;
    (within ? gapsWithin : gapsBetween).push(hold.start - previous.end);
  }

  const client = clientCosts(reports, (report) => report.holds.map((hold) => hold[3]));
  const excluded = client.excludedPerOperation;
  return {
    rate: operations / seconds,
    operations,
    sections: holds.length,
    waitP50,
    waitP99: quantile(waits, 0.99),
    waitMax,
    fairness: waitMax / waitP50,
    sameWorker: handovers ? sameWorker / handovers : NaN,
    sameProcess: handovers ? sameProcess / handovers : NaN,
    gapWithin: quantile(gapsWithin.sort(ascending), 0.5),
    gapBetween: quantile(gapsBetween.sort(ascending), 0.5),
    busy: occupied(holds, t0, tEnd) / (tEnd - t0) / limit,
    maxInside: maxInside(holds),
    ...overlaps(holds, limit),
    counter,
    counterExact: counter === undefined ? undefined : counter === holds.length,
    ...client,
    ...serverCosts(serverDelta(server.before, server.after), operations, excluded),
    waits,
    errors: sumErrors(reports),
  };
}

function lastEndingBefore(byEnd, time) {
  let low = 0;
  let high = byEnd.length - 1;
  let found;
  while (low <= high) {
    const middle = (low + high) >> 1;
    if (byEnd[middle].end <= time) {
      found = byEnd[middle];
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  return found;
}

/** Time held, summed over holders, inside the window (ms): the union of holds for a mutex. */
function occupied(holds, t0, tEnd) {
  let total = 0;
  for (const hold of holds) total += Math.max(0, Math.min(hold.end, tEnd) - Math.max(hold.start, t0));
  return total;
}

/** The most sections in progress at one instant (an end at the same instant as a start goes first). */
function maxInside(holds) {
  const events = holds.flatMap((hold) => [
    [hold.start, 1],
    [hold.end, -1],
  ]);
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let inside = 0;
  let most = 0;
  for (const [, change] of events) {
    inside += change;
    most = Math.max(most, inside);
  }
  return most;
}

/** Sections that started while `limit` others were still in progress, and by how much at most (ms). */
function overlaps(holds, limit) {
  let count = 0;
  let worst = 0;
  const open = []; // ends of the sections in progress, ascending
  for (const hold of holds) {
    while (open.length && open[0] <= hold.start) open.shift();
    if (open.length >= limit) {
      count++;
      worst = Math.max(worst, Math.min(open[open.length - limit], hold.end) - hold.start);
    }
    const at = open.findIndex((end) => end > hold.end);
    open.splice(at < 0 ? open.length : at, 0, hold.end);
  }
  return { overlaps: count, worstOverlap: worst };
}

function sumErrors(reports) {
  const count = reports.reduce((sum, report) => sum + report.errors.count, 0);
  return { count, first: reports.find((report) => report.errors.first)?.errors.first };
}

/** Median, min and max over repetitions of every numeric metric. */
export function aggregate(runs) {
  const names = new Set(runs.flatMap((run) => Object.keys(run)));
  const result = {};
  for (const name of names) {
    const values = runs.map((run) => run[name]).filter((value) => typeof value === 'number' && !Number.isNaN(value));
    if (values.length === 0) continue;
    result[name] = { median: median(values), min: Math.min(...values), max: Math.max(...values) };
  }
  return result;
}
