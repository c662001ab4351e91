import type { Redis } from 'ioredis';
import { eventually } from './timing.js';

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

/** The PTTL of `key` once it is gone (-2), or as it stands after `withinMs`. */
export function pttlOnceGone(redis: Redis, key: string, withinMs: number): Promise<number> {
  return eventually(
    () => redis.pttl(key),
    (pttl) => pttl === -2,
    withinMs,
  );
}
