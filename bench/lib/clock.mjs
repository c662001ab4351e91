// One clock for every process of a run: wall-clock milliseconds with sub-microsecond resolution,
// monotonic within a process. `performance.timeOrigin` is taken once, at process start, from the
// wall clock: processes that started while the system clock was being stepped or slewed can
// disagree by milliseconds, so hold intervals from several processes are compared only after each
// process measured its offset to one reference clock (`offsetTo`, Redis's TIME).
export const now = () => performance.timeOrigin + performance.now();

/**
 * Milliseconds to add to `now()` to read the clock of the Redis server `redis` answers from: the
 * sample with the shortest round trip of a few TIME calls, taken at the middle of that round trip.
 */
export async function offsetTo(redis) {
  let best = { roundTrip: Infinity, offset: 0 };
  for (let i = 0; i < 20; i++) {
    const sent = now();
    const [seconds, micros] = await redis.time();
    const received = now();
    if (received - sent < best.roundTrip) {
      const server = Number(seconds) * 1000 + Number(micros) / 1000;
      best = { roundTrip: received - sent, offset: server - (sent + received) / 2 };
    }
  }
  return best.offset;
}

/** Resolves at `at` on the shared clock (at once if it has passed). */
export function sleepUntil(at) {
  const ms = at - now();
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}
