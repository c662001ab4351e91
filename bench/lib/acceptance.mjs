// The acceptance points of issue 31, checked on the nest-lock rows against the best anchor of the
// same run (the best one for each metric; `against`: one named row instead): the primary row unless
// a point names another (`variant`).
// Throughput, waits, fairness and sharing are judged on medians over the repetitions; the safety
// points on every run.

const RELATIVE = [
  { workload: 'W3', metric: 'rate', what: 'sections/s', higher: true, target: 1.15 },
  { workload: 'W3', metric: 'waitP99', what: 'wait p99', higher: false, target: 0.2 },
  { workload: 'W3', variant: 'nest-lock-strict', metric: 'rate', what: 'sections/s', higher: true, target: 0.9 },
  { workload: 'W3', variant: 'nest-lock-unfair', metric: 'rate', what: 'sections/s', higher: true, target: 1.2 },
  { workload: 'W4', metric: 'rate', what: 'sections/s', higher: true, target: 1.1 },
  { workload: 'W4', metric: 'waitP99', what: 'wait p99', higher: false, target: 0.3 },
  { workload: 'W1', metric: 'rate', what: 'pairs/s', higher: true, target: 1.0 },
  { workload: 'W1', metric: 'cpuMicros', what: 'client CPU / pair', higher: false, target: 1.1, against: 'setnx' },
  { workload: 'W2', metric: 'rate', what: 'pairs/s', higher: true, target: 1.3 },
];

const ABSOLUTE = [
  { workload: 'W3', metric: 'fairness', what: 'fairness (max / median wait)', limit: 3 },
  { workload: 'W3', metric: 'sameWorker', what: 'same worker again', limit: 0.1, percent: true },
  { workload: 'W4', metric: 'fairness', what: 'fairness (max / median wait)', limit: 3 },
];

const SAFETY = [
  { workload: 'W3', what: 'counter exact, every run', ok: (run) => run.counterExact === true },
  { workload: 'W3', what: 'no two holds overlap, every run', ok: (run) => run.overlaps === 0 },
  { workload: 'W4', what: 'never more than 4 inside, every run', ok: (run) => run.maxInside <= 4 },
];

/**
 * `rows`: `{ workload, variant, role, primary, runs: [metrics…], summary: { metric: { median, min, max } } }`.
 * Returns one check per acceptance point whose workload ran.
 */
export function checkAcceptance(rows) {
  const checks = [];
  const find = (workload, variant) => ({
    subject: rows.find((row) => row.workload === workload && (variant ? row.variant === variant : row.primary)),
    anchors: rows.filter((row) => row.workload === workload && row.role === 'anchor'),
  });
  const anchorsOf = (point, anchors) =>
    point.against ? anchors.filter((row) => row.variant === point.against) : anchors;
  const labelOf = (point, subject) => (point.variant ? `${subject.label}: ` : '');
  const orderOf = (workload) => ['W3', 'W4', 'W1', 'W2'].indexOf(workload);

  for (const point of RELATIVE) {
    const { subject, anchors } = find(point.workload, point.variant);
    if (!subject) continue;
    const value = subject.summary[point.metric]?.median;
    const candidates = anchorsOf(point, anchors)
      .map((row) => ({ label: row.label, value: row.summary[point.metric]?.median }))
      .filter((candidate) => Number.isFinite(candidate.value));
    const best = candidates.sort((a, b) => (point.higher ? b.value - a.value : a.value - b.value))[0];
    const ratio = best ? value / best.value : NaN;
    checks.push({
      workload: point.workload,
      metric: point.metric,
      point: `${labelOf(point, subject)}${point.what} ${point.higher ? '≥' : '≤'} ${point.target}× ${point.against ? 'the hand-written pair' : 'best anchor'}`,
      value,
      anchor: best?.label,
      anchorValue: best?.value,
      ratio,
      target: `${point.higher ? '≥' : '≤'} ${point.target}×`,
      pass: Number.isFinite(ratio) && (point.higher ? ratio >= point.target : ratio <= point.target),
    });
  }
  for (const point of ABSOLUTE) {
    const { subject } = find(point.workload, point.variant);
    if (!subject) continue;
    const value = subject.summary[point.metric]?.median;
    checks.push({
      workload: point.workload,
      metric: point.metric,
      point: `${labelOf(point, subject)}${point.what} ≤ ${point.percent ? `${point.limit * 100} %` : point.limit}`,
      value,
      percent: point.percent,
      target: `≤ ${point.percent ? `${point.limit * 100} %` : point.limit}`,
      pass: Number.isFinite(value) && value <= point.limit,
    });
  }
  for (const point of SAFETY) {
    const { subject, anchors } = find(point.workload);
    if (!subject) continue;
    const failed = subject.runs.filter((run) => !point.ok(run)).length;
    const anchorFailures = anchors.filter((row) => row.runs.some((run) => !point.ok(run))).map((row) => row.label);
    checks.push({
      workload: point.workload,
      point: point.what,
      value: `${subject.runs.length - failed}/${subject.runs.length} runs`,
      target: 'all runs',
      note: anchorFailures.length ? `anchors failing it: ${anchorFailures.join(', ')}` : undefined,
      pass: failed === 0,
    });
  }
  return checks.sort((a, b) => orderOf(a.workload) - orderOf(b.workload));
}
