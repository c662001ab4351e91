// The four workloads and their sizes. Durations in ms; `--quick` and `--scale` change them.

export const WORKLOADS = {
  W1: {
    id: 'W1',
    title: 'W1 uncontended, serial',
    describe: (w) => `one loop: lock + unlock of one free key; ${slices(w)}`,
    unit: 'pairs/s',
    keys: 1,
    slices: 10,
    sliceMs: 200,
    warmup: 1_000,
  },
  W2: {
    id: 'W2',
    title: 'W2 uncontended, 64 concurrent keys',
    describe: (w) => `${w.keys} concurrent loops in one process, each lock + unlock of its own key; ${slices(w)}`,
    unit: 'pairs/s',
    keys: 64,
    slices: 10,
    sliceMs: 200,
    warmup: 1_000,
  },
  W3: {
    id: 'W3',
    title: 'W3 contended mutex',
    describe: (w) =>
      `${w.processes} processes × ${w.workers} workers on one key; section: GET counter, ${w.holdMs} ms, SET counter + 1; ${seconds(w.duration)} per run`,
    unit: 'sections/s',
    processes: 4,
    workers: 8,
    holdMs: 1,
    limit: 1,
    duration: 4_000,
    warmup: 500,
  },
  W4: {
    id: 'W4',
    title: 'W4 semaphore, limit 4',
    describe: (w) =>
      `${w.processes} processes × ${w.workers} workers, semaphore of ${w.limit}; section: ${w.holdMs} ms; ${seconds(w.duration)} per run`,
    unit: 'sections/s',
    processes: 4,
    workers: 8,
    holdMs: 2,
    limit: 4,
    duration: 3_000,
    warmup: 500,
  },
};

export const QUICK = {
  W1: { slices: 3, sliceMs: 150, warmup: 300 },
  W2: { slices: 3, sliceMs: 150, warmup: 300 },
  W3: { duration: 1_500, warmup: 300 },
  W4: { duration: 1_000, warmup: 300 },
};

export const contended = (id) => id === 'W3' || id === 'W4';

/** Workload `id` as a run measures it: `--quick` sizes, every duration × `scale`. */
export function sizedWorkload(id, { quick = false, scale = 1 } = {}) {
  const sized = { ...WORKLOADS[id], ...(quick ? QUICK[id] : {}) };
  const scaled = (ms) => (ms === undefined ? undefined : Math.round(ms * scale));
  return { ...sized, duration: scaled(sized.duration), sliceMs: scaled(sized.sliceMs), warmup: scaled(sized.warmup) };
}

function slices(w) {
  return `every library in one process, measured in ${w.slices} slices of ${w.sliceMs} ms taken in turn (order rotated each round) after a ${w.warmup} ms warm-up each`;
}

function seconds(ms) {
  return `${ms / 1000} s`;
}
