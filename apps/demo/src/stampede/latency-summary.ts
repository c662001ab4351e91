/** Percentiles and a histogram of request latencies, in whole milliseconds. */
export interface LatencySummary {
  p50: number;
  p99: number;
  max: number;
}

/** `counts[i]` requests took from `i * binMs` to `(i + 1) * binMs` milliseconds. */
export interface Histogram {
  binMs: number;
  counts: number[];
}

export function summarize(latenciesMs: readonly number[]): LatencySummary {
  const sorted = [...latenciesMs].sort((a, b) => a - b);
  const at = (fraction: number) =>
    Math.round(sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))]);
  return { p50: at(0.5), p99: at(0.99), max: Math.round(sorted[sorted.length - 1]) };
}

/** About `bins` bars of a round width (1, 2 or 5 × a power of ten) that reach `maxMs`. */
export function binWidthFor(maxMs: number, bins = 20): number {
  const rough = Math.max(1, maxMs / bins);
  const power = 10 ** Math.floor(Math.log10(rough));
  return [1, 2, 5, 10].map((step) => step * power).find((width) => width >= rough)!;
}

export function histogram(latenciesMs: readonly number[], binMs: number): Histogram {
  const counts: number[] = [];
  for (const ms of latenciesMs) {
    const bin = Math.floor(ms / binMs);
    while (counts.length <= bin) counts.push(0);
    counts[bin]++;
  }
  return { binMs, counts };
}
