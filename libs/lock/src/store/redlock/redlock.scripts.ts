import { FENCE_RULE, SERVER_TIME } from '../redis/lua.js';
import { script, type ScriptCall } from '../redis/script.js';

/**
 * The per-node scripts of `RedlockStore`. Each is called through its builder (`redlockAcquire`, …),
 * which writes its KEYS and ARGV from named fields, beside the Lua header that binds them to the same
 * names. On each master a lock has its `lease` (a string: the owner's token, with PX) and its fence
 * `counter` (expires a while after its last fence), and the node has its **birth marker** (`marker`,
 * `<prefix>redlock:born`): `<run_id>:<ms>`, the server process's run_id (new at every start) and the
 * server's clock when nest-lock first saw that process. A master that restarted has forgotten the
 * leases it granted since its last snapshot, whether it came back empty (no marker), flushed, or from
 * an older RDB/AOF file (a marker of an earlier run_id): it is born again, and stays **young** for the
 * quarantine. A young node's answers do not count towards a quorum, since the leases it forgot may
 * still be valid elsewhere.
 */
export interface RedlockKeys {
  readonly lease: string;
  readonly counter: string;
  readonly marker: string;
}

/** The KEYS of the scripts that take all three, in this order. */
const NODE_KEYS = `
local lease, counter, marker = KEYS[1], KEYS[2], KEYS[3]
`;

/** The run of the server, and when nest-lock first saw it (needs `marker` where it marks). */
const BIRTH = `
-- This run of the server: new at every start (and what tells two nodes apart that are one server).
local runId = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')

-- When nest-lock first saw this run of the server (ms); marks it born at nowMs when the marker is
-- missing or names another run (a restart, whatever data it reloaded).
local function bornAt(marker, nowMs)
  local born = tonumber(string.match(redis.call('GET', marker) or '', '^' .. runId .. ':(%d+)$'))
  if born then return born end
  redis.call('SET', marker, runId .. ':' .. string.format('%.0f', nowMs))
  return nowMs
end
`;

/** What the scripts that say whether the node is mature share (after `NODE_KEYS` and their ARGV). */
const PRELUDE = `${SERVER_TIME}${FENCE_RULE}
local nowMs = serverTime()
${BIRTH}
-- 1 if this run of the node has been known for at least the quarantine (ms), else 0.
local function mature(quarantineMs)
  if nowMs - bornAt(marker, nowMs) >= tonumber(quarantineMs) then return 1 end
  return 0
end
`;

/** A lease on one node: its token, its ttl (whole ms), and the quarantine (ms) a node must be older than. */
export interface RedlockLeaseArgs {
  readonly token: string;
  readonly ttl: number;
  readonly quarantine: number;
}

const ACQUIRE_ARGV = `
local token, ttl, quarantine = ARGV[1], ARGV[2], ARGV[3]
`;

/** One node's share of an attempt (`redlockAcquireScript`): KEYS lease, counter (unused), marker. */
export function redlockAcquire(keys: RedlockKeys, args: RedlockLeaseArgs): ScriptCall {
  return {
    script: redlockAcquireScript,
    keys: [keys.lease, keys.counter, keys.marker],
    argv: [args.token, args.ttl, args.quarantine],
  };
}

/**
 * Takes the lock for the token if it is free (SET PX), or restarts the lease if the token holds it
 * already (a retry after a lost reply). A young node takes it too, but says it is young: the caller
 * does not count it. No fence is drawn (`redlockFenceScript`). Returns {1, 0, mature, run_id} when the
 * token holds the lock on this node now; {0, PTTL of the holder's lease, mature, run_id} when another
 * token holds it. The run_id lets the caller count one server once, however many of its nodes name it.
 */
export const redlockAcquireScript = script(
  'redlockAcquire',
  3,
  `${NODE_KEYS}${ACQUIRE_ARGV}${PRELUDE}
local isMature = mature(quarantine)
local holder = redis.call('GET', lease)
if holder and holder ~= token then
  return {0, redis.call('PTTL', lease), isMature, runId}
end
redis.call('SET', lease, token, 'PX', ttl)
return {1, 0, isMature, runId}
`,
);

export interface RedlockFenceArgs {
  readonly token: string;
  /** How long the counter outlives its last fence, ms. */
  readonly fenceCounterTtl: number;
  readonly quarantine: number;
}

const FENCE_ARGV = `
local token, fenceCounterTtl, quarantine = ARGV[1], ARGV[2], ARGV[3]
`;

/** One node's share of drawing a fence (`redlockFenceScript`): KEYS lease, counter, marker. */
export function redlockFence(keys: RedlockKeys, args: RedlockFenceArgs): ScriptCall {
  return {
    script: redlockFenceScript,
    keys: [keys.lease, keys.counter, keys.marker],
    argv: [args.token, args.fenceCounterTtl, args.quarantine],
  };
}

/**
 * Draws a fence from the node's counter (the single store's rule) only if the token holds the lock
 * here. Returns {fence (decimal string) or '0' when the token does not hold the lock here, PTTL of its
 * lease, mature, run_id}.
 */
export const redlockFenceScript = script(
  'redlockFence',
  3,
  `${NODE_KEYS}${FENCE_ARGV}${PRELUDE}
local isMature = mature(quarantine)
if redis.call('GET', lease) ~= token then return {'0', 0, isMature, runId} end
return {string.format('%.0f', drawFence(counter, fenceCounterTtl)), redis.call('PTTL', lease), isMature, runId}
`,
);

export interface RedlockRaiseFenceArgs {
  /** The lease's fence, a decimal string (it may be beyond a double's integers). */
  readonly fence: string;
  readonly fenceCounterTtl: number;
}

const RAISE_FENCE_HEADER = `
local counter = KEYS[1]
local fence, fenceCounterTtl = ARGV[1], ARGV[2]
`;

/** The max rule's write-back on one node (`redlockRaiseFenceScript`): KEYS counter. */
export function redlockRaiseFence(keys: Pick<RedlockKeys, 'counter'>, args: RedlockRaiseFenceArgs): ScriptCall {
  return { script: redlockRaiseFenceScript, keys: [keys.counter], argv: [args.fence, args.fenceCounterTtl] };
}

/**
 * Raises the node's fence counter to the lease's fence (the largest fence among the nodes that granted
 * it), so that any later quorum, which shares a node with this one, draws a larger fence. Never lowers
 * it. A counter already at or above it keeps the expiry of the fence that put it there, drawn no later
 * than now. Returns 1.
 */
export const redlockRaiseFenceScript = script(
  'redlockRaiseFence',
  1,
  `${RAISE_FENCE_HEADER}
local last = tonumber(redis.call('GET', counter)) or 0
if last < tonumber(fence) then redis.call('SET', counter, fence, 'PX', fenceCounterTtl) end
return 1
`,
);

const RELEASE_HEADER = `
local lease = KEYS[1]
local token = ARGV[1]
`;

/** One node's share of a release (`redlockReleaseScript`): KEYS lease. */
export function redlockRelease(keys: Pick<RedlockKeys, 'lease'>, args: { readonly token: string }): ScriptCall {
  return { script: redlockReleaseScript, keys: [keys.lease], argv: [args.token] };
}

/** Deletes the lock only if the token holds it. Returns 1 if it held it here, else 0. */
export const redlockReleaseScript = script(
  'redlockRelease',
  1,
  `${RELEASE_HEADER}
if redis.call('GET', lease) == token then
  redis.call('DEL', lease)
  return 1
end
return 0
`,
);

/** One node's share of a renewal (`redlockExtendScript`): KEYS lease, counter (unused), marker. */
export function redlockExtend(keys: RedlockKeys, args: RedlockLeaseArgs): ScriptCall {
  return {
    script: redlockExtendScript,
    keys: [keys.lease, keys.counter, keys.marker],
    argv: [args.token, args.ttl, args.quarantine],
  };
}

/**
 * Compare-and-PEXPIRE. Says whether the lock is free here, so that the caller can re-seed it once a
 * quorum renewed (`redlockSeedScript`), and whether the node is mature: a young node's renewal does not
 * count. ARGV as `redlockAcquire`'s. Returns {1 renewed | 0 free | -1 held by another token, mature, run_id}.
 */
export const redlockExtendScript = script(
  'redlockExtend',
  3,
  `${NODE_KEYS}${ACQUIRE_ARGV}${PRELUDE}
local isMature = mature(quarantine)
local holder = redis.call('GET', lease)
if holder == token then
  redis.call('PEXPIRE', lease, ttl)
  return {1, isMature, runId}
end
if holder then return {-1, isMature, runId} end
return {0, isMature, runId}
`,
);

const SEED_HEADER = `
local lease = KEYS[1]
local token, ttl = ARGV[1], ARGV[2]
`;

/** Re-seeds one node (`redlockSeedScript`): KEYS lease; the token's ttl in whole ms. */
export function redlockSeed(
  keys: Pick<RedlockKeys, 'lease'>,
  args: { readonly token: string; readonly ttl: number },
): ScriptCall {
  return { script: redlockSeedScript, keys: [keys.lease], argv: [args.token, args.ttl] };
}

/**
 * Re-seeds a node that lost a lock its owner still holds on a quorum (it restarted empty, or its
 * lease ran out while it was unreachable): SET NX PX, so it never overwrites another owner.
 * Returns 1 if seeded, else 0.
 */
export const redlockSeedScript = script(
  'redlockSeed',
  1,
  `${SEED_HEADER}
if redis.call('SET', lease, token, 'NX', 'PX', ttl) then return 1 end
return 0
`,
);

const INSPECT_KEYS = `
local lease, counter = KEYS[1], KEYS[2]
`;

/** Reads one node's view of a lock (`redlockInspectScript`): KEYS lease, counter; no ARGV. */
export function redlockInspect(keys: Pick<RedlockKeys, 'lease' | 'counter'>): ScriptCall {
  return { script: redlockInspectScript, keys: [keys.lease, keys.counter], argv: [] };
}

/** One node's view of a lock, for `inspectLock` and `isLocked`. Returns {holder token or '', PTTL, last fence or ''}. */
export const redlockInspectScript = script(
  'redlockInspect',
  2,
  `${INSPECT_KEYS}
return {redis.call('GET', lease) or '', redis.call('PTTL', lease), redis.call('GET', counter) or ''}
`,
);

const FORCE_RELEASE_KEYS = `
local lease = KEYS[1]
`;

/** An operator's release on one node (`redlockForceReleaseScript`): KEYS lease; no ARGV. */
export function redlockForceRelease(keys: Pick<RedlockKeys, 'lease'>): ScriptCall {
  return { script: redlockForceReleaseScript, keys: [keys.lease], argv: [] };
}

/** Deletes one node's lock, whoever holds it. Returns the holder's token, or '' when it was free here. */
export const redlockForceReleaseScript = script(
  'redlockForceRelease',
  1,
  `${FORCE_RELEASE_KEYS}
local holder = redis.call('GET', lease)
if holder then redis.call('DEL', lease) end
return holder or ''
`,
);

const MARK_KEYS = `
local marker = KEYS[1]
`;

/** Marks one node's run born (`redlockMarkScript`): KEYS marker; no ARGV. */
export function redlockMark(keys: Pick<RedlockKeys, 'marker'>): ScriptCall {
  return { script: redlockMarkScript, keys: [keys.marker], argv: [] };
}

/**
 * Marks this run of the node born now (server clock, ms) unless it is marked: sent whenever a client
 * connects, so that a restarted master's quarantine starts when it is back rather than at the next lock.
 * Returns 1.
 */
export const redlockMarkScript = script(
  'redlockMark',
  1,
  `${MARK_KEYS}${SERVER_TIME}${BIRTH}
bornAt(marker, serverTime())
return 1
`,
);
