import type { Inspection } from '../store.js';
import { keysHeader, type RedisScript } from './script.js';

/**
 * How one kind of lease lives on Redis: its keys and its scripts. `RedisStore` runs them and knows
 * nothing else of the kind. Every key of one lease shares its hash tag (one cluster slot):
 * `<keyPrefix><namespace>{<id>}` is the lease itself, `…:<companion>` the others, `…:wake` its
 * wake-up channel. Every script of a kind takes the first `numberOfKeys` of its keys (`leaseKeysOf`,
 * as the kind's `lineKeys` names them) and the ARGV of its operation's builder below — `acquireArgv`,
 * `releaseArgv`, `extendArgv`, `fenceArgv`, `forceReleaseArgv`, `acquireAllIfFreeArgv`; none for
 * `count` and `inspect` — whose Lua header, beside it, binds them to the same names. The replies are
 * the same for every kind too, so that the store reads them once: each builder says its script's.
 */
export interface RedisLayout<Request> {
  /** Between the key prefix and the hash tag: `''` for locks, `'sem:'` for semaphores. */
  readonly namespace: string;
  /** The companion keys' suffixes, KEYS[2…] of every script: the kind's `lineKeys(…).companions`. */
  readonly companions: readonly string[];
  readonly acquire: RedisScript;
  /**
   * Whether a lease asked with `request` is a string holding its owner's token, with the lease as its
   * expiry: a free one is then taken by `SET <lease> <token> NX PX <ttl>` alone (an uncontended
   * attempt's one command).
   */
  takenBySetNx(request: Request): boolean;
  /**
   * Several free leases taken by `SET NX` (`takenBySetNx`), all or none, in one step (see
   * `acquireAllIfFreeArgv`). Absent for a kind that has no such step.
   */
  readonly acquireAllIfFree?: RedisScript;
  /**
   * The kind's request as the acquire script reads it after the common arguments (`request` in
   * `ACQUIRE_ARGV`), and a release its successor's (`successorRequest` in `RELEASE_ARGV`): a lock's
   * mode, a semaphore's limit.
   */
  requestArgs(request: Request): readonly (string | number)[];
  readonly release: RedisScript;
  readonly extend: RedisScript;
  readonly fence: RedisScript;
  /** Returns how many hold the lease now. No ARGV. */
  readonly count: RedisScript;
  /** Returns what `readInspection` reads. No ARGV. */
  readonly inspect: RedisScript;
  readInspection(reply: unknown): Inspection;
  /** An operator's release, whoever holds it; absent for a kind that offers none. */
  readonly forceRelease?: RedisScript;
}

/** One argument of a script: Redis reads both as strings. */
export type ScriptArg = string | number;

// ---- KEYS ----

/** The keys of a lease its scripts read by name: the names its Lua binds, and the companions' suffixes. */
export interface LeaseKeys {
  /** KEYS[2…]'s suffixes, in order (`RedisLayout.companions`). */
  readonly companions: readonly string[];
  /** The Lua header binding KEYS[1] to `lease` and each companion to its name. */
  readonly lua: string;
}

/**
 * The keys of a kind whose scripts keep a line of waiters (see `waiterLine` in lua.ts), named as its Lua
 * reads them: KEYS[1] `lease`, the lease itself; KEYS[2] `counter`, its fence counter (`:fence`);
 * KEYS[3] `line`, KEYS[4] `alive`, KEYS[5] `waiters`; then the kind's own, `{ name: suffix }` in order
 * (a lock's `readers`). The Lua header and the companions come from this one list, so they agree.
 */
export function lineKeys(own: Readonly<Record<string, string>>): LeaseKeys {
  const named: Record<string, string> = { counter: 'fence', line: 'line', alive: 'alive', waiters: 'waiters', ...own };
  return { companions: Object.values(named), lua: keysHeader(['lease', ...Object.keys(named)]) };
}

/** The wake-up channel of a lease, in the slot of its keys; a waiter's process listens on `<channel>:<process>`. */
export function wakeChannelOf(lease: string): string {
  return `${lease}:wake`;
}

/** The KEYS of a lease's script: `lease`, then the first `count - 1` companions, each `<lease>:<suffix>`. */
export function leaseKeysOf(lease: string, companions: readonly string[], count: number): string[] {
  const keys = [lease];
  for (let i = 0; i < count - 1; i++) keys.push(`${lease}:${companions[i]}`);
  return keys;
}

// ---- ARGV: each builder beside the Lua header that reads what it writes ----

/**
 * One attempt, for the kind's `acquire` script. Reply: 1 when the token holds the lease now (no fence is
 * drawn); else {ms the holder's lease still runs, the last fence issued}, with a third element 1 when it
 * stayed out of an empty line (`joinOnlyBehindOthers`; a lock's). Holding it already counts as granted (a retry after a lost reply, or a waiter that missed its handover message).
 */
export interface AcquireArgs {
  readonly token: string;
  /** Whole ms. */
  readonly ttl: number;
  /** Waits in the line in order of arrival; else unordered, woken to try (`<token> 0 0`). */
  readonly fair: boolean;
  /** When not granted, it waits (stays alive) this many whole ms; 0: a last attempt, it does not wait. */
  readonly liveness: number;
  /** It joined the line before: a grant takes it out. */
  readonly inLine: boolean;
  /** The lease of a handover this attempt makes to waiters ahead of it, whole ms. */
  readonly handoverMs: number;
  /** The lease's wake-up channel; a waiter is told on `<channel>:<its process>`. */
  readonly channel: string;
  /** How long the fence counter outlives its last fence, ms. */
  readonly fenceCounterTtl: number;
  /** The caller's process: the suffix of the channel it listens on. */
  readonly process: string;
  /** Not granted: join the line only if a fair waiter stands in it already (`AttemptOptions.joinOnlyBehindOthers`). */
  readonly joinOnlyBehindOthers: boolean;
  /** The kind's request (`RedisLayout.requestArgs`). */
  readonly request: readonly ScriptArg[];
}

export function acquireArgv(args: AcquireArgs): ScriptArg[] {
  const argv: ScriptArg[] = [
    args.token,
    args.ttl,
    flag(args.fair),
    args.liveness,
    flag(args.inLine),
    args.handoverMs,
    args.channel,
    args.fenceCounterTtl,
    args.process,
    flag(args.joinOnlyBehindOthers),
  ];
  for (const arg of args.request) argv.push(arg);
  return argv;
}

export const ACQUIRE_ARGV = `
local token, ttl, fair, liveness = ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local inLine, handoverMs, channel = ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]
local fenceCounterTtl, process, joinOnlyBehindOthers, request = ARGV[8], ARGV[9], ARGV[10] == '1', ARGV[11]
`;

/**
 * A release, for the kind's `release` script. Reply: 1 if the token held the lease, else 0 (and the token
 * leaves the line: a waiter giving up); {that, -1, ms} when the lease went to the successor for ms (no
 * fence is drawn for it: `PASSED_WITHOUT_FENCE`), with a fourth element for a lock: 1 when nobody else
 * waits in its line then (`Successor.passed`'s `nobodyElseInLine`). A lease handed to a waiter lasts the handover lease,
 * or the waiter's ttl when that is shorter (the successor's, or as a fair waiter asked when it joined).
 */
export interface ReleaseArgs {
  readonly token: string;
  /** The lease of a handover, whole ms. */
  readonly handoverMs: number;
  /** The lease's wake-up channel. */
  readonly channel: string;
  readonly fenceCounterTtl: number;
  /** A waiter of the releasing process to hand the lease to (`Successor`), if any. */
  readonly successor?: SuccessorArgs | undefined;
}

export interface SuccessorArgs {
  readonly token: string;
  /** It may go ahead of the line. */
  readonly jump: boolean;
  /** Whole ms. */
  readonly ttl: number;
  /** The kind's request (`RedisLayout.requestArgs`). */
  readonly request: readonly ScriptArg[];
}

export function releaseArgv(args: ReleaseArgs): ScriptArg[] {
  const argv: ScriptArg[] = [args.token, args.handoverMs, args.channel, args.fenceCounterTtl];
  const { successor } = args;
  if (successor === undefined) return argv;
  argv.push(successor.token, flag(successor.jump), successor.ttl);
  for (const arg of successor.request) argv.push(arg);
  return argv;
}

export const RELEASE_ARGV = `
local token, handoverMs, channel, fenceCounterTtl = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local successor, jump, successorTtl, successorRequest = ARGV[5], ARGV[6] == '1', ARGV[7], ARGV[8]
`;

/** A renewal, for the kind's `extend` script: the token's lease reset to `ttl`. Reply: 1 if extended, else 0. */
export interface ExtendArgs {
  readonly token: string;
  /** Whole ms. */
  readonly ttl: number;
}

export function extendArgv(args: ExtendArgs): ScriptArg[] {
  return [args.token, args.ttl];
}

export const EXTEND_ARGV = `
local token, ttl = ARGV[1], ARGV[2]
`;

/**
 * A fence, for the kind's `fence` script: drawn (the fence rule) only if the token holds the lease.
 * Reply: the fence, else 0 (nothing is drawn).
 */
export interface FenceArgs {
  readonly token: string;
  readonly fenceCounterTtl: number;
}

export function fenceArgv(args: FenceArgs): ScriptArg[] {
  return [args.token, args.fenceCounterTtl];
}

export const FENCE_ARGV = `
local token, fenceCounterTtl = ARGV[1], ARGV[2]
`;

/** An operator's release, for the kind's `forceRelease` script. Reply: 1 if the lease was held, else 0. */
export interface ForceReleaseArgs {
  readonly handoverMs: number;
  readonly channel: string;
  readonly fenceCounterTtl: number;
}

export function forceReleaseArgv(args: ForceReleaseArgs): ScriptArg[] {
  return [args.handoverMs, args.channel, args.fenceCounterTtl];
}

export const FORCE_RELEASE_ARGV = `
local handoverMs, channel, fenceCounterTtl = tonumber(ARGV[1]), ARGV[2], ARGV[3]
`;

/**
 * Several free leases for one token, for the kind's `acquireAllIfFree` script. Its KEYS are the first
 * `numberOfKeys` keys (`leaseKeysOf`) of each lease in turn. Reply: 1 when all were taken, 0 when none was.
 */
export interface AcquireAllIfFreeArgs {
  readonly token: string;
  /** Whole ms. */
  readonly ttl: number;
}

export function acquireAllIfFreeArgv(args: AcquireAllIfFreeArgs): ScriptArg[] {
  return [args.token, args.ttl];
}

export const ACQUIRE_ALL_IF_FREE_ARGV = `
local token, ttl = ARGV[1], ARGV[2]
`;

/** The ARGV of `count` and `inspect`: none. */
export const NO_ARGV: readonly ScriptArg[] = [];

function flag(on: boolean): '1' | '0' {
  return on ? '1' : '0';
}
