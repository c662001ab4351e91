import { InvalidArgumentError } from '../lock.errors.js';
import { DEFAULT_LEASE, validateSignal } from '../options/call-options.js';
import { duration } from '../options/durations.js';
import { keysOf, optionNames } from '../options/option-names.js';
import { isPlainObject, rejectUnknownNames } from '../options/validation.js';

/** How a caller of `SingleFlightService.load` waits, and how the value travels. All durations in ms. */
export interface SingleFlightOptions<T = unknown> {
  /**
   * How long this caller waits for the value, whoever loads it; then it rejects with
   * `LoadTimeoutError` — the load goes on for the others. Default: the module's `defaults.timeout`
   * (5 000 ms when that is 0, one attempt, which has no meaning for a wait for a value).
   */
  timeout?: number;
  /** Aborting it ends this caller's wait only (it rejects with the signal's reason); the load goes on. */
  signal?: AbortSignal;
  /**
   * The lease of the key's lock while the loader runs, renewed until it returns: a loader longer
   * than `lockTtl` is never run twice; a loader whose process dies is taken over within `lockTtl`.
   * Default: the module's `defaults.ttl`.
   */
  lockTtl?: number;
  /** Turns the loader's value into the text other processes receive. Default `JSON.stringify`. */
  serialize?: (value: T) => string;
  /** Turns that text back into a value, in the processes that waited. Default `JSON.parse`. */
  deserialize?: (text: string) => T;
  /**
   * The largest serialized value, in bytes (UTF-8), sent to the other processes: the loader's own
   * process still gets a larger one; the others reject with `InvalidArgumentError`. Default 4 MiB.
   */
  maxValueBytes?: number;
  /**
   * How long a loader's error is kept: callers within that time reject with it without loading.
   * Default 0: the next call loads again.
   */
  cacheErrorsFor?: number;
}

export interface ResolvedSingleFlightOptions<T> {
  readonly timeout: number;
  readonly signal?: AbortSignal;
  readonly lockTtl: number;
  readonly serialize: (value: T) => string;
  readonly deserialize: (text: string) => T;
  readonly maxValueBytes: number;
  readonly cacheErrorsFor: number;
}

export const DEFAULT_MAX_VALUE_BYTES = 4 * 1024 * 1024;

/** The names of `SingleFlightOptions`, which `CacheOptions` extends. */
export const SINGLE_FLIGHT_OPTION_KEYS = keysOf<SingleFlightOptions>()({
  timeout: true,
  signal: true,
  lockTtl: true,
  serialize: true,
  deserialize: true,
  maxValueBytes: true,
  cacheErrorsFor: true,
});

const SINGLE_FLIGHT_OPTION_NAMES = optionNames(SINGLE_FLIGHT_OPTION_KEYS);

/** `options` checked (names, ranges, functions), with the module's `ttl` (as `lockTtl`) and `timeout` where none is given. */
export function resolveSingleFlightOptions<T>(
  options: unknown,
  defaults: { ttl: number; timeout: number },
): ResolvedSingleFlightOptions<T> {
  if (!isPlainObject(options)) throw new InvalidArgumentError('options', 'must be an object');
  rejectUnknownNames('', options as object, SINGLE_FLIGHT_OPTION_NAMES);
  const given = options as SingleFlightOptions<T>;
  for (const name of ['serialize', 'deserialize'] as const) {
    if (given[name] !== undefined && typeof given[name] !== 'function') {
      throw new InvalidArgumentError(name, `must be a function, got ${typeof given[name]}`);
    }
  }
  const maxValueBytes = given.maxValueBytes ?? DEFAULT_MAX_VALUE_BYTES;
  if (!Number.isInteger(maxValueBytes) || maxValueBytes < 1) {
    throw new InvalidArgumentError('maxValueBytes', `must be a whole number ≥ 1, got ${String(maxValueBytes)}`);
  }
  const signal = validateSignal(given.signal);
  return {
    // A module whose default is one attempt (`timeout: 0`) gives single-flight callers the usual wait.
    timeout:
      given.timeout === undefined
        ? defaults.timeout > 0
          ? defaults.timeout
          : DEFAULT_LEASE.timeout
        : duration('timeout', given.timeout),
    ...(signal ? { signal } : {}),
    lockTtl: given.lockTtl === undefined ? defaults.ttl : duration('lockTtl', given.lockTtl),
    serialize: given.serialize ?? ((value: T) => JSON.stringify(value)),
    deserialize: given.deserialize ?? ((text: string) => JSON.parse(text) as T),
    maxValueBytes,
    cacheErrorsFor: given.cacheErrorsFor === undefined ? 0 : duration('cacheErrorsFor', given.cacheErrorsFor, 0),
  };
}
