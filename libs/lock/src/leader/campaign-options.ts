import { InvalidArgumentError, type LockLostError } from '../lock.errors.js';
import { duration } from '../options/durations.js';
import { keysOf, optionNames } from '../options/option-names.js';
import { isPlainObject, rejectUnknownNames } from '../options/validation.js';

/** How a process campaigns for a name (`LeaderService.campaign`). All durations in milliseconds. */
export interface CampaignOptions {
  /**
   * The leader's lease, renewed every `ttl / 3` while it leads. A leader that dies (or freezes, or
   * loses Redis) leads for at most this long by its own clock; another process leads within `ttl`
   * and one wait step (at most 500 ms) after the last renewal Redis saw. Default 5 000; at least 100.
   */
  ttl?: number;
  /**
   * How long one attempt waits in the name's line before it starts again (a process that is not the
   * leader waits in line all the time, woken when the leader resigns). Default: `ttl`; at least 100.
   */
  timeout?: number;
  /** After the store failed an attempt (Redis away): how long until the next one. Default 1 000; at least 100. */
  retryDelay?: number;
  /**
   * This process leads from now on, under `term` (strictly above every earlier leader's) until
   * `signal` aborts. What it returns is not waited for; a throw or a rejection is logged.
   */
  onElected?: (term: number, signal: AbortSignal) => unknown;
  /**
   * This process stopped leading: `reason.reason` is `'expired'` (its lease ran out before it could
   * be renewed), `'taken'` (found held by another) or `'released'` (it resigned). Same rules as `onElected`.
   */
  onRevoked?: (reason: LockLostError) => unknown;
}

export interface ResolvedCampaignOptions {
  readonly ttl: number;
  readonly timeout: number;
  readonly retryDelay: number;
  readonly onElected?: CampaignOptions['onElected'];
  readonly onRevoked?: CampaignOptions['onRevoked'];
}

export const DEFAULT_LEADER_TTL = 5_000;
const DEFAULT_RETRY_DELAY = 1_000;
/**
 * The shortest `ttl`, `timeout` and `retryDelay`: shorter, a campaign would ask the store every few ms
 * (renewals, attempts started again, retries during an outage) — a busy loop, not a lease.
 */
const SHORTEST = 100;

function atLeastShortest(argument: string, ms: number): number {
  if (ms < SHORTEST) throw new InvalidArgumentError(argument, `must be ≥ ${SHORTEST} ms, got ${ms}`);
  return ms;
}

const CAMPAIGN_OPTION_NAMES = optionNames(
  keysOf<CampaignOptions>()({ ttl: true, timeout: true, retryDelay: true, onElected: true, onRevoked: true }),
);

/** `options` checked (names, ranges, callbacks) and every default filled in. */
export function resolveCampaignOptions(options: unknown): ResolvedCampaignOptions {
  if (!isPlainObject(options)) throw new InvalidArgumentError('options', 'must be an object');
  rejectUnknownNames('', options as object, CAMPAIGN_OPTION_NAMES);
  const given = options as CampaignOptions;
  const ttl = given.ttl === undefined ? DEFAULT_LEADER_TTL : duration('ttl', given.ttl);
  atLeastShortest('ttl', ttl);
  const timeout = given.timeout === undefined ? ttl : atLeastShortest('timeout', duration('timeout', given.timeout));
  const retryDelay =
    given.retryDelay === undefined
      ? DEFAULT_RETRY_DELAY
      : atLeastShortest('retryDelay', duration('retryDelay', given.retryDelay));
  for (const name of ['onElected', 'onRevoked'] as const) {
    if (given[name] !== undefined && typeof given[name] !== 'function') {
      throw new InvalidArgumentError(name, `must be a function, got ${typeof given[name]}`);
    }
  }
  return { ttl, timeout, retryDelay, onElected: given.onElected, onRevoked: given.onRevoked };
}
