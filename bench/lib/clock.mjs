// One clock for every process of a run: wall-clock milliseconds with sub-microsecond resolution,
// monotonic within a process. `performance.timeOrigin` is taken once, at process start, so hold
// intervals recorded by different processes can be compared (to within a few microseconds).
export const now = () => performance.timeOrigin + performance.now();

/** Resolves at `at` on the shared clock (at once if it has passed). */
export function sleepUntil(at) {
  const ms = at - now();
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}
