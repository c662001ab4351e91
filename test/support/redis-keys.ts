import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { eventually, until } from './timing.js';

/*
 * The Redis keys the library writes, as docs/API.md ("Storage on Redis") describes them: for tests that
 * look at (or tamper with) a lease beside the library, with a plain client.
 */

/** The key of lock `key`: `<prefix>{<key>}`. */
export function lockKeyOf(key: string, prefix = 'lock:'): string {
  return `${prefix}{${key}}`;
}

/** The sorted set of semaphore `name`: `<prefix>sem:{<name>}`. */
export function semaphoreKeyOf(name: string, prefix = 'lock:'): string {
  return `${prefix}sem:{${name}}`;
}

/**
 * Resolves once `waiters` callers wait for the lock or semaphore whose key is `lease` (`lockKeyOf`,
 * `semaphoreKeyOf`) on the server — each registered in its liveness set `:alive`, whether it stands in
 * the line or waits unordered — and `processes` processes listen on its wake-up channels
 * (`:wake:<process>`), so that a release wakes them. Not seen here: the waiters a process keeps in its
 * own line behind one of its own (`fair: true`, the cohort), and anything on the memory store.
 */
export function untilWaiting(
  redis: Redis,
  lease: string,
  { waiters = 1, processes = 1, withinMs = 5_000 }: { waiters?: number; processes?: number; withinMs?: number } = {},
): Promise<void> {
  return until(
    `${waiters} waiter(s) of ${lease} on the server, ${processes} process(es) subscribed to its wake-ups`,
    async () =>
      (await redis.zcard(`${lease}:alive`)) >= waiters &&
      (await redis.pubsub('CHANNELS', `${lease.replace(/[*?[\]\\]/g, '\\$&')}:wake:*`)).length >= processes,
    withinMs,
  );
}

/**
 * `untilWaiting` on the server at `url`, through a client of its own. Without a server — the memory
 * store, where a waiter shows nowhere outside the library — `orAfterMs`, the time that always sufficed.
 */
export async function untilWaitingAt(
  url: string | undefined,
  lease: string,
  { orAfterMs, ...options }: { orAfterMs: number; waiters?: number; processes?: number },
): Promise<void> {
  if (url === undefined) return delay(orAfterMs);
  const redis = new Redis(url);
  try {
    await untilWaiting(redis, lease, options);
  } finally {
    redis.disconnect();
  }
}

/** The PTTL of `key` once it is gone (-2), or as it stands after `withinMs`. */
export function pttlOnceGone(redis: Redis, key: string, withinMs: number): Promise<number> {
  return eventually(
    () => redis.pttl(key),
    (pttl) => pttl === -2,
    withinMs,
  );
}
