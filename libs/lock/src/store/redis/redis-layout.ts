import type { Inspection } from '../store.js';
import type { RedisScript } from './script.js';

/**
 * How one kind of lease lives on Redis: its keys and its scripts. `RedisStore` runs them and knows
 * nothing else of the kind. Every key of one lease shares its hash tag (one cluster slot):
 * `<keyPrefix><namespace>{<id>}` is the lease itself, `…:<companion>` the others, `…:wake` its
 * wake-up channel. A script takes the first `numberOfKeys` of KEYS[1] the lease and KEYS[2…] the
 * companions, in their order, and these ARGV (a kind's own request arguments after the acquire's):
 *
 * - `acquire`: ARGV[1] owner token, ARGV[2] ttl ms, ARGV[3] '1' fair / '0' not, ARGV[4] when not
 *   granted, wait in line for this many ms ('0': a last attempt, it does not wait), ARGV[5] '1' if
 *   it joined the line before, ARGV[6] lease ms of a handover, ARGV[7] wake-up channel, ARGV[8] fence
 *   counter ttl ms, ARGV[9] the caller's process (the suffix of the channel it listens on), then
 *   `requestArgs`. Returns 1 when the token holds the lease now (no fence is
 *   drawn); else {ms the holder's lease still runs, the last fence issued}. Holding it already counts
 *   as granted (a retry after a lost reply, or a waiter that missed its handover message).
 * - `release`: ARGV[1] owner token, ARGV[2] lease ms of a handover, ARGV[3] channel, ARGV[4] fence
 *   counter ttl ms; with a successor, ARGV[5] its token, ARGV[6] '1' if it may go ahead of the
 *   line, ARGV[7] its ttl ms, then its `requestArgs`. A lease handed to a waiter lasts the handover lease, or the waiter's ttl
 *   when that is shorter (the successor's, or as a fair waiter asked when it joined: see `waiterLine`).
 *   Returns 1 if the token held the lease, else 0 (and the token leaves the line: a waiter giving up); {that, -1, ms} when the lease went to the successor for ms (no fence is drawn for it:
 *   `PASSED_WITHOUT_FENCE`).
 * - `extend`: ARGV[1] owner token, ARGV[2] ttl ms. Returns 1 if extended, else 0.
 * - `fence` (KEYS[1] the lease, KEYS[2] its fence counter): ARGV[1] owner token, ARGV[2] fence counter
 *   ttl ms. Draws the next fence (the fence rule) only if the token holds the lease: returns it, else 0.
 * - `forceRelease`: ARGV[1] lease ms of a handover, ARGV[2] channel, ARGV[3] fence counter ttl ms.
 *   Returns 1 if the lease was held, else 0.
 * - `count`, `inspect`: no ARGV; read-only.
 */
export interface RedisLayout<Request> {
  /** Between the key prefix and the hash tag: `''` for locks, `'sem:'` for semaphores. */
  readonly namespace: string;
  /** The companion keys' suffixes, KEYS[2…] of every script: the fence counter first. */
  readonly companions: readonly string[];
  readonly acquire: RedisScript;
  /**
   * Whether a lease asked with `request` is a string holding its owner's token, with the lease as its
   * expiry: a free one is then taken by `SET <lease> <token> NX PX <ttl>` alone (an uncontended
   * attempt's one command).
   */
  takenBySetNx(request: Request): boolean;
  /**
   * Several free leases taken by `SET NX` (`takenBySetNx`), all or none, in one step: KEYS are the
   * first `numberOfKeys` keys of each lease in turn, ARGV[1] the owner token, ARGV[2] ttl ms. Returns
   * 1 when all were taken, 0 when none was. Absent for a kind that has no such step.
   */
  readonly acquireAllIfFree?: RedisScript;
  /** The acquire script's arguments after the common ones (a semaphore's limit). */
  requestArgs(request: Request): readonly (string | number)[];
  readonly release: RedisScript;
  readonly extend: RedisScript;
  readonly fence: RedisScript;
  /** Returns how many hold the lease now. */
  readonly count: RedisScript;
  /** Returns what `readInspection` reads. */
  readonly inspect: RedisScript;
  readInspection(reply: unknown): Inspection;
  /** An operator's release, whoever holds it; absent for a kind that offers none. */
  readonly forceRelease?: RedisScript;
}
