import { FENCE_RULE, SERVER_TIME } from '../redis/lua.js';
import { script } from '../redis/script.js';

/**
 * What the per-node scripts of `RedlockStore` share. On each master a lock has KEYS[1] its lease
 * (a string: the owner's token, with PX), KEYS[2] its fence counter (expires a while after its last fence), and the node
 * has KEYS[3], its **birth marker** (`<prefix>redlock:born`): `<run_id>:<ms>`, the server process's
 * run_id (new at every start) and the server's clock when nest-lock first saw that process. A master
 * that restarted has forgotten the leases it granted since its last snapshot, whether it came back
 * empty (no marker), flushed, or from an older RDB/AOF file (a marker of an earlier run_id): it is
 * born again, and stays **young** for the quarantine. A young node's answers do not count towards a
 * quorum, since the leases it forgot may still be valid elsewhere.
 */
const birth = `
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

const prelude = `${SERVER_TIME}${FENCE_RULE}
local lease, counter, marker = KEYS[1], KEYS[2], KEYS[3]
local nowMs = serverTime()
${birth}
-- 1 if this run of the node has been known for at least the quarantine (ms), else 0.
local function mature(quarantineMs)
  if nowMs - bornAt(marker, nowMs) >= tonumber(quarantineMs) then return 1 end
  return 0
end
`;

/**
 * One node's share of an attempt: takes the lock for the token if it is free (SET PX), or restarts
 * the lease if the token holds it already (a retry after a lost reply). A young node takes it too,
 * but says it is young: the caller does not count it. No fence is drawn (`redlockFenceScript`).
 * KEYS[1] lock, KEYS[2] fence counter (unused), KEYS[3] birth marker.
 * ARGV[1] owner token, ARGV[2] ttl ms, ARGV[3] quarantine ms.
 * Returns {1, 0, mature, run_id} when the token holds the lock on this node now; {0, PTTL of the
 * holder's lease, mature, run_id} when another token holds it. The run_id lets the caller count one
 * server once, however many of its nodes name it.
 */
export const redlockAcquireScript = script(
  'redlockAcquire',
  3,
  `${prelude}
local token, ttl = ARGV[1], ARGV[2]
local isMature = mature(ARGV[3])
local holder = redis.call('GET', lease)
if holder and holder ~= token then
  return {0, redis.call('PTTL', lease), isMature, runId}
end
redis.call('SET', lease, token, 'PX', ttl)
return {1, 0, isMature, runId}
`,
);

/**
 * One node's share of drawing a fence: draws one from the node's counter (the single store's rule)
 * only if the token holds the lock here. KEYS[1] lock, KEYS[2] fence counter, KEYS[3] birth marker.
 * ARGV[1] owner token, ARGV[2] fence counter ttl ms, ARGV[3] quarantine ms.
 * Returns {fence (decimal string) or '0' when the token does not hold the lock here, PTTL of its
 * lease, mature, run_id}.
 */
export const redlockFenceScript = script(
  'redlockFence',
  3,
  `${prelude}
local isMature = mature(ARGV[3])
if redis.call('GET', lease) ~= ARGV[1] then return {'0', 0, isMature, runId} end
return {string.format('%.0f', drawFence(counter, ARGV[2])), redis.call('PTTL', lease), isMature, runId}
`,
);

/**
 * The max rule's write-back: raises the node's fence counter to the lease's fence (the largest
 * fence among the nodes that granted it), so that any later quorum, which shares a node with this
 * one, draws a larger fence. Never lowers it. A counter already at or above it keeps the expiry of
 * the fence that put it there, drawn no later than now.
 * KEYS[1] fence counter. ARGV[1] the lease's fence (decimal string), ARGV[2] fence counter ttl ms.
 * Returns 1.
 */
export const redlockRaiseFenceScript = script(
  'redlockRaiseFence',
  1,
  `
local last = tonumber(redis.call('GET', KEYS[1])) or 0
if last < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return 1
`,
);

/**
 * One node's share of a release: deletes the lock only if the token holds it.
 * KEYS[1] lock. ARGV[1] owner token.
 * Returns 1 if it held it here, else 0.
 */
export const redlockReleaseScript = script(
  'redlockRelease',
  1,
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`,
);

/**
 * One node's share of a renewal: compare-and-PEXPIRE. Says whether the lock is free here, so that the
 * caller can re-seed it once a quorum renewed (`redlockSeedScript`), and whether the node is mature:
 * a young node's renewal does not count.
 * KEYS[1] lock, KEYS[2] fence counter (unused), KEYS[3] birth marker.
 * ARGV[1] owner token, ARGV[2] ttl ms, ARGV[3] quarantine ms.
 * Returns {1 renewed | 0 free | -1 held by another token, mature, run_id}.
 */
export const redlockExtendScript = script(
  'redlockExtend',
  3,
  `${prelude}
local isMature = mature(ARGV[3])
local holder = redis.call('GET', lease)
if holder == ARGV[1] then
  redis.call('PEXPIRE', lease, ARGV[2])
  return {1, isMature, runId}
end
if holder then return {-1, isMature, runId} end
return {0, isMature, runId}
`,
);

/**
 * Re-seeds a node that lost a lock its owner still holds on a quorum (it restarted empty, or its
 * lease ran out while it was unreachable): SET NX PX, so it never overwrites another owner.
 * KEYS[1] lock. ARGV[1] owner token, ARGV[2] ttl ms.
 * Returns 1 if seeded, else 0.
 */
export const redlockSeedScript = script(
  'redlockSeed',
  1,
  `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
`,
);

/**
 * Reads one node's view of a lock, for `inspectLock` and `isLocked`.
 * KEYS[1] lock, KEYS[2] fence counter.
 * Returns {holder token or '', PTTL, last fence or ''}.
 */
export const redlockInspectScript = script(
  'redlockInspect',
  2,
  `
return {redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
`,
);

/**
 * An operator's release of one node's lock, whoever holds it.
 * KEYS[1] lock. Returns the holder's token, or '' when it was free here.
 */
export const redlockForceReleaseScript = script(
  'redlockForceRelease',
  1,
  `
local holder = redis.call('GET', KEYS[1])
if holder then redis.call('DEL', KEYS[1]) end
return holder or ''
`,
);

/**
 * Marks this run of the node born now (server clock, ms) unless it is marked: sent whenever a client
 * connects, so that a restarted master's quarantine starts when it is back rather than at the next lock.
 * KEYS[1] birth marker. Returns 1.
 */
export const redlockMarkScript = script(
  'redlockMark',
  1,
  `${SERVER_TIME}${birth}
bornAt(KEYS[1], serverTime())
return 1
`,
);
