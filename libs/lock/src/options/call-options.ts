import type { LoggerService } from '@nestjs/common';
import { InvalidArgumentError } from '../lock.errors.js';
import { duration } from './durations.js';
import { keysOf, optionNames } from './option-names.js';
import { describe, isPlainObject, isWellFormed, rejectUnknownNames, validateBoolean } from './validation.js';

/** How long a lease lasts and how a caller waits for one. All durations in milliseconds. */
export interface LeaseDefaults {
  /** Lease of a lock or permit; a holder that neither releases nor renews loses it after `ttl`. */
  ttl: number;
  /** Longest wait for a lock or permit; `0` = one attempt, no wait. */
  timeout: number;
  /** First wait between attempts. */
  step: number;
  /** Growth of the wait after each failed attempt (≥ 1). */
  ratio: number;
  /** Cap of the wait between attempts. */
  maxStep: number;
}

/** Per-call options shared by locks and semaphores. */
export interface LeaseOptions extends Partial<LeaseDefaults> {
  /** Aborting it ends the wait; the call rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Renew the lease every `ttl / 3` while it is held. Default: the module's `defaults.autoExtend`
   * (`true`) for `withLock`, `withPermit` and the decorators; `false` for a bare `lock()` /
   * `acquire()`, which nobody may ever release.
   */
  autoExtend?: boolean;
  /**
   * In which order waiters get the lease (docs/API.md, "Fairness"): `true` (the module's default),
   * first come first served across processes, where a process serves the waiters it already had (a
   * bounded cohort) before one of another process; `'strict'`, first come first served across
   * processes, no cohort; `false`, unordered (a release wakes one waiter, and a newcomer may take it first).
   */
  fair?: Fairness;
}

/** How waiters are served: see `LeaseOptions.fair`. */
export type Fairness = boolean | 'strict';

/** `fair` and `defaults.fair`: `true`, `false` or `'strict'`. */
export function validateFairness(value: unknown, argument: string): Fairness | undefined {
  if (value !== undefined && typeof value !== 'boolean' && value !== 'strict') {
    throw new InvalidArgumentError(argument, `must be true, false or 'strict', got ${describe(value)}`);
  }
  return value;
}

export type SemaphoreOptions = LeaseOptions;

export interface LockOptions extends LeaseOptions {
  /** Owner token to use instead of a fresh random one (e.g. to release from another process). */
  token?: string;
  /**
   * `'write'` (the default): the lock alone, as a plain `lock()`; `'read'`: beside any number of other
   * readers of the key, never beside a writer (docs/API.md, "Read-write locks").
   */
  mode?: LockMode;
}

/** Options of a call that holds a lease around a routine: `withLock`, `withPermit`, the decorators. */
export interface HoldOptions {
  /**
   * Keep the lease after the routine returned until this many ms have passed since it started (at
   * most `ttl`), so that a second process firing the same schedule a little later finds it held and
   * skips. The release is put off, not skipped: an application shutdown releases at once.
   */
  holdAtLeast?: number;
}

/** `options` without `holdAtLeast`, and `holdAtLeast` checked (a duration ≥ 0, or absent). */
export function splitHoldOptions<O extends object>(options: O & HoldOptions): [O, number | undefined] {
  if (!isPlainObject(options)) throw new InvalidArgumentError('options', 'must be an object');
  if (!('holdAtLeast' in options)) return [options, undefined]; // no copy on the common path
  const { holdAtLeast, ...rest } = options;
  return [rest as O, holdAtLeast === undefined ? undefined : duration('holdAtLeast', holdAtLeast, 0)];
}

/** How a lock holds its key: alone (`'write'`) or beside other readers (`'read'`). */
export type LockMode = 'write' | 'read';

/** `mode`: `'write'` or `'read'`; `undefined` for the default. */
function validateLockMode(value: unknown): LockMode | undefined {
  if (value !== undefined && value !== 'write' && value !== 'read') {
    throw new InvalidArgumentError('mode', `must be 'write' or 'read', got ${describe(value)}`);
  }
  return value;
}

export const DEFAULT_LEASE: Readonly<LeaseDefaults> = Object.freeze({
  ttl: 30_000,
  timeout: 5_000,
  step: 1,
  ratio: 2,
  maxStep: 500,
});

/** What a decorator's options may hold of a call's: everything but what belongs to one call. */
export type DecoratorCallOptions<Options extends LeaseOptions> = Omit<Options, 'signal' | 'token'>;

/** The options of an in-process semaphore (`acquireLocal`, `scope: 'local'`): it only waits. */
export type LocalSemaphoreOptions = Pick<SemaphoreOptions, 'timeout'>;

// The key object of each options interface (options/option-names.ts): the names its checks know,
// in the order their errors list them.
export const LEASE_DEFAULTS_KEYS = keysOf<LeaseDefaults>()({
  ttl: true,
  timeout: true,
  step: true,
  ratio: true,
  maxStep: true,
});
const LEASE_OPTIONS_KEYS = keysOf<LeaseOptions>()({
  ...LEASE_DEFAULTS_KEYS,
  autoExtend: true,
  fair: true,
  signal: true,
});
const SEMAPHORE_OPTIONS_KEYS = keysOf<SemaphoreOptions>()({ ...LEASE_OPTIONS_KEYS });
const LOCK_OPTIONS_KEYS = keysOf<LockOptions>()({ ...LEASE_OPTIONS_KEYS, token: true, mode: true });
export const HOLD_OPTIONS_KEYS = keysOf<HoldOptions>()({ holdAtLeast: true });
/**
 * A decorator's options hold for every call of its method: a `signal` or an owner `token` of one
 * call has no place there.
 */
export const LOCK_DECORATOR_CALL_KEYS = keysOf<DecoratorCallOptions<LockOptions>>()({
  ...LEASE_DEFAULTS_KEYS,
  autoExtend: true,
  fair: true,
  mode: true,
});
export const SEMAPHORE_DECORATOR_CALL_KEYS = keysOf<DecoratorCallOptions<SemaphoreOptions>>()({
  ...LEASE_DEFAULTS_KEYS,
  autoExtend: true,
  fair: true,
});
export const LOCAL_SEMAPHORE_OPTIONS_KEYS = keysOf<LocalSemaphoreOptions>()({ timeout: true });

/** The option names each kind of call accepts; anything else is a misspelling and refused. */
const CALL_OPTION_NAMES = {
  lock: optionNames(LOCK_OPTIONS_KEYS),
  semaphore: optionNames(SEMAPHORE_OPTIONS_KEYS),
} as const;
const LOCAL_SEMAPHORE_OPTION_NAMES = optionNames(LOCAL_SEMAPHORE_OPTIONS_KEYS);

/**
 * Checks the options of a decorator, when its class is defined: no names but `known` (those of its
 * options interface, from its key object), and every value in range.
 */
export function validateCallOptions(known: ReadonlySet<string>, options: unknown): void {
  validateOptionsBesideDurations(known, options);
  resolveLease(DEFAULT_LEASE, options as LeaseOptions);
}

/** Everything but the durations: an object of known names, a signal, a token, booleans. */
function validateOptionsBesideDurations(known: ReadonlySet<string>, options: unknown): void {
  if (!isPlainObject(options)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  rejectUnknownNames('', options as object, known);
  const { signal, token, autoExtend, fair, mode } = options as LockOptions;
  validateSignal(signal);
  if (token !== undefined) validateKey('token', token);
  validateLockMode(mode);
  validateBoolean(autoExtend, 'autoExtend');
  validateFairness(fair, 'fair');
}

/** The defaults of every call, from the module options (`defaults`), resolved. */
export type ModuleDefaults = Readonly<LeaseDefaults & { autoExtend: boolean; fair: Fairness }>;

/** What the services read of the module options: the defaults of every call, and where to log. */
export interface ServiceOptions {
  readonly defaults: ModuleDefaults;
  readonly logger?: LoggerService | false;
}

/** How one acquisition goes, every option checked and every default filled in: what the lease core takes. */
export interface AcquirePolicy extends LeaseDefaults {
  fair: Fairness;
  /** The caller's own owner token; a fresh one when absent. */
  token?: string;
  signal?: AbortSignal;
}

/**
 * The policy of one call: `options` checked (names, ranges, the `ttl` against its drift `margin`,
 * the store's rule) and merged over the module's `defaults`. What a public method does first, before
 * anything else happens; the core then trusts it.
 */
export function resolveAcquirePolicy(
  call: keyof typeof CALL_OPTION_NAMES,
  defaults: Readonly<LeaseDefaults & { fair: Fairness }>,
  options: LockOptions,
  margin: (ttl: number) => number,
): AcquirePolicy {
  validateOptionsBesideDurations(CALL_OPTION_NAMES[call], options);
  const policy: AcquirePolicy = resolveLease(defaults, options) as AcquirePolicy;
  validateLeaseTtl(policy.ttl, margin, options.ttl === undefined ? 'defaults.ttl' : 'ttl');
  policy.fair = options.fair ?? defaults.fair;
  if (options.token !== undefined) policy.token = options.token;
  if (options.signal !== undefined) policy.signal = options.signal;
  return policy;
}

/** Merges per-call options over the module defaults, validating what the caller passed. */
export function resolveLease(
  defaults: Readonly<LeaseDefaults>,
  options: Partial<LeaseDefaults> = {},
  namePrefix = '',
): LeaseDefaults {
  if (!isPlainObject(options)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  // Only `undefined` means "the default": a `null` is a mistake, and refused like any other non-number.
  const pick = <K extends keyof LeaseDefaults>(name: K) =>
    options[name] === undefined ? defaults[name] : options[name];
  return {
    ttl: duration(`${namePrefix}ttl`, pick('ttl')),
    timeout: duration(`${namePrefix}timeout`, pick('timeout'), 0),
    step: duration(`${namePrefix}step`, pick('step')),
    ratio: atLeastOne(`${namePrefix}ratio`, pick('ratio')),
    maxStep: duration(`${namePrefix}maxStep`, pick('maxStep')),
  };
}

/**
 * The shortest lease (ms): below it, its clock-drift margin and one round trip leave the holder next
 * to nothing, and on a busy machine the grant comes back after its lease ran out (it is given back).
 */
const SHORTEST_TTL = 20;

/** What a lease must leave its holder beyond its drift margin (ms): binds only with a large `driftFactor`. */
const SHORTEST_VALIDITY = 10;

/**
 * A lease's `ttl`: a duration of at least `SHORTEST_TTL` that leaves `SHORTEST_VALIDITY` beyond its
 * drift `margin` (the store's drift rule), since a holder never counts on that margin.
 */
export function validateLeaseTtl(ttl: unknown, margin: (ttl: number) => number, argument = 'ttl'): number {
  const lease = duration(argument, ttl);
  if (lease < SHORTEST_TTL) {
    throw new InvalidArgumentError(
      argument,
      `must be at least ${SHORTEST_TTL} ms: a shorter lease leaves its holder next to nothing once its clock-drift margin and a round trip are taken off; got ${lease}`,
    );
  }
  const drift = margin(lease);
  if (lease - drift < SHORTEST_VALIDITY) {
    throw new InvalidArgumentError(
      argument,
      `must leave at least ${SHORTEST_VALIDITY} ms beyond its clock-drift margin (${+drift.toFixed(2)} ms), the part of a lease a holder never counts on; got ${lease}`,
    );
  }
  return lease;
}

/** A key, semaphore name or owner token: a non-empty, well-formed Unicode string. */
export function validateKey(argument: string, key: unknown): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new InvalidArgumentError(argument, `must be a non-empty string, got ${describe(key)}`);
  }
  if (!isWellFormed(key)) {
    throw new InvalidArgumentError(argument, 'must be well-formed Unicode (it holds a lone surrogate)');
  }
  return key;
}

/**
 * A key, or several (`lock(['account:1', 'account:2'])`): each checked as `validateKey` does, an
 * empty array refused; several keys come back without repeats, in the order first given.
 */
export function validateKeys(argument: string, keys: unknown): string[] {
  if (!Array.isArray(keys)) return [validateKey(argument, keys)];
  if (keys.length === 0) throw new InvalidArgumentError(argument, 'must name at least one key, got an empty array');
  // Array.from: a hole in a sparse array is checked too (map would skip it).
  return [...new Set(Array.from(keys as unknown[], (key, i) => validateKey(`${argument}[${i}]`, key)))];
}

export function validateSignal(signal: unknown): AbortSignal | undefined {
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal', `must be an AbortSignal, got ${describe(signal)}`);
  }
  return signal;
}

export function validateLimit(limit: unknown): number {
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1) {
    throw new InvalidArgumentError('limit', `must be a whole number ≥ 1, got ${describe(limit)}`);
  }
  return limit;
}

/** The routine of `withLock` / `withPermit`: checked before anything is taken. */
export function validateRoutine(fn: unknown): void {
  if (typeof fn !== 'function') {
    throw new InvalidArgumentError('fn', `must be a function, got ${describe(fn)}`);
  }
}

/**
 * A `LocalSemaphore` only waits: `timeout` is all it can honour. `known`: the names of a caller
 * that takes more (`@Semaphore` with `scope: 'local'`), `timeout` among them.
 */
export function validateLocalOptions(
  options: unknown,
  known: ReadonlySet<string> = LOCAL_SEMAPHORE_OPTION_NAMES,
): void {
  if (!isPlainObject(options)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  rejectUnknownNames('', options as object, known);
  resolveLease(DEFAULT_LEASE, options as LeaseOptions);
}

function atLeastOne(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 1) {
    throw new InvalidArgumentError(argument, `must be a finite number ≥ 1, got ${describe(value)}`);
  }
  return value;
}
