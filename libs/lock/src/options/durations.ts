import { InvalidArgumentError } from '../lock.errors.js';
import { describe } from './validation.js';

/**
 * The longest duration any option takes: Node's timers overflow above it (and fire at once),
 * so a longer lease on the memory store would be freed after ~1 ms.
 */
export const LONGEST_DURATION = 2 ** 31 - 1;

/** A duration in ms: > 0 (or ≥ `min`) and at most `LONGEST_DURATION`. */
export function duration(argument: string, value: unknown, min?: 0): number {
  const inRange = typeof value === 'number' && (min === 0 ? value >= 0 : value > 0) && value <= LONGEST_DURATION;
  if (!inRange) {
    const lower = min === 0 ? '≥ 0' : '> 0';
    throw new InvalidArgumentError(
      argument,
      `must be a number of ms ${lower} and ≤ ${LONGEST_DURATION}, got ${describe(value)}`,
    );
  }
  return value;
}

/** Redlock's default drift factor (antirez's reference: 0.01), and the drift of every other store. */
export const DEFAULT_DRIFT_FACTOR = 0.01;

/**
 * Redis and a holder's clock tick at slightly different rates: the holder counts a lease of `ttl`
 * as valid for `ttl` minus this margin (redlock's drift rule, the 2 ms: Redis's own expiry
 * precision), so it never believes in a lease that the server already let go.
 */
export function driftMargin(ttl: number, driftFactor = DEFAULT_DRIFT_FACTOR): number {
  return ttl * driftFactor + 2;
}
