import type { LockMode } from '../options/call-options.js';
import { FENCE_RULE, SERVER_TIME, waiterLine } from '../store/redis/lua.js';
import {
  ACQUIRE_ALL_IF_FREE_ARGV,
  ACQUIRE_ARGV,
  EXTEND_ARGV,
  FENCE_ARGV,
  FORCE_RELEASE_ARGV,
  lineKeys,
  RELEASE_ARGV,
} from '../store/redis/redis-layout.js';
import { type PublishCommand, script } from '../store/redis/script.js';

/**
 * The scripts of a lock on one Redis, a read-write lock: one writer or any number of readers. Each
 * reads its KEYS and ARGV by name, as `LOCK_KEYS` and its operation's builder (`redis-layout.ts`) write
 * them. `lease` is the lock itself, a string holding its writer's token — or `''` while readers hold it
 * (a token is never empty) — with the lease as its expiry: the writer's, or the last reader's.
 *
 * The line is served by phase: its head readers are admitted together, up to the first writer,
 * which gets the lock once it is free and holds back every reader that arrived after it.
 */

/**
 * A lock's keys: the line's (`lineKeys`; a waiter that asked to read is marked ` r` in `waiters`), and
 * `readers`: a sorted set of reader tokens by lease deadline (ms of the server's clock, so that clients
 * with skewed clocks agree on who has expired), which expires with its last reader.
 */
export const LOCK_KEYS = lineKeys({ readers: 'readers' });

const READ_ARGS: readonly string[] = ['r'];
const WRITE_ARGS: readonly string[] = ['w'];

/**
 * A lock's request (`RedisLayout.requestArgs`): its mode, `r` (read) or `w` (write). The Lua reads it as
 * `request == 'r'` (an attempt's) and `successorRequest == 'r'` (a release's successor's).
 */
export function lockRequestArgs(mode: LockMode): readonly string[] {
  return mode === 'read' ? READ_ARGS : WRITE_ARGS;
}

/** The readers of a lock (needs the keys of `LOCK_KEYS`). */
const READERS = `
-- Whether the waiter asked to read, as it joined the line.
local function readsOf(waiter)
  return string.find(redis.call('HGET', waiters, waiter) or '', ' r$') ~= nil
end

-- The lock (held by readers) and the readers' set last as long as the last reader's lease.
local function expireWithLastReader()
  local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')[2]
  if last then
    redis.call('PEXPIREAT', readers, last)
    redis.call('PEXPIREAT', lease, last)
  end
end

-- A reader for \`ms\` more, on a lock that is free or held by readers.
local function addReader(token, nowMs, ms)
  redis.call('ZADD', readers, nowMs + ms, token)
  redis.call('SET', lease, '')
  expireWithLastReader()
end

-- Drops the readers whose lease ran out; how many still read.
local function liveReaders(nowMs)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', nowMs)
  return redis.call('ZCARD', readers)
end
`;

/** Serving a lock's line by phase (needs `waiterLine` and `READERS`). */
const SERVING_BY_PHASE = `
-- With the lock free or held by readers: admits the readers at the head of the line together (each
-- for a handover lease it extends once told), up to the first writer, which gets the lock if it is
-- free; a writer that must wait for readers holds back everybody behind it. Stops at \`stopAt\` (the
-- caller, which takes the lock itself).
local function serveLine(nowMs, handoverMs, channel, stopAt)
  while true do
    local first = redis.call('ZRANGE', line, 0, 0)[1]
    if not first or first == stopAt then return end
    local ms = handoverFor(first, handoverMs)
    if readsOf(first) then
      addReader(first, nowMs, ms)
      handTo(channel, first, ms)
    else
      if not redis.call('GET', lease) then
        redis.call('SET', lease, first, 'PX', ms)
        handTo(channel, first, ms)
      end
      return
    end
  end
end

-- After the lock was freed (by its holder's release, its last reader's, or an operator's): to the
-- line, or one unordered waiter is woken to try for it.
local function passOn(handoverMs, channel)
  local nowMs = serverTime()
  dropGoneWaiters(nowMs)
  serveLine(nowMs, handoverMs, channel)
  if not redis.call('GET', lease) then wake(channel) end
end
`;

/** A lock's line of waiters: the shared line, its readers, and its serving by phase. */
function readWriteLine(publish: PublishCommand): string {
  return `${waiterLine(publish)}${READERS}${SERVING_BY_PHASE}`;
}

/**
 * One attempt to take the lock, to write or to read; with the line of waiters (fair) or without.
 * KEYS `LOCK_KEYS`, ARGV `acquireArgv` (its `request` the mode); the reply is `acquireArgv`'s. No fence
 * is drawn: `fenceLockScript` draws one when the holder asks.
 * - A writer's fast path is one SET NX PX (unless fair waiters are in line: they come first).
 * - "Held by this token already" counts as granted: a retry after a lost reply, or a waiter that
 *   missed the message telling it the lock was handed to it.
 * - A lock that is free or held by readers while waiters stand in line (a holder's lease ran out, or
 *   a handover to a waiter that was gone expired) serves the line first, and the caller joins it.
 * - A reader is admitted beside the readers holding the lock only while nobody waits in line ahead of
 *   it (fair or not): a waiting writer holds back every reader that arrives after it. A writer refused
 *   by readers joins the line even when it is unordered (`fair: false`), so that it does too.
 */
export const acquireLockScript = script(
  'acquireLock',
  6,
  (publish) => `${LOCK_KEYS.lua}${ACQUIRE_ARGV}${readWriteLine(publish)}
local reads = request == 'r'
if not reads and (not fair or redis.call('EXISTS', line) == 0) then
  if redis.call('SET', lease, token, 'NX', 'PX', ttl) then
    if inLine then leaveLine(token) end
    return 1
  end
end
local holder = redis.call('GET', lease)
if holder == token then
  redis.call('PEXPIRE', lease, ttl)
  leaveLine(token)
  return 1
end
local nowMs, nowMicros = serverTime()
dropGoneWaiters(nowMs)
if holder == '' and liveReaders(nowMs) == 0 then
  -- The last reader's lease ends this very ms.
  redis.call('DEL', lease)
  holder = false
end
if reads and holder == '' and redis.call('ZSCORE', readers, token) then
  addReader(token, nowMs, ttl)
  leaveLine(token)
  return 1
end
if not holder or holder == '' then
  serveLine(nowMs, handoverMs, channel, token)
  holder = redis.call('GET', lease)
end
local first = redis.call('ZRANGE', line, 0, 0)[1]
if not first or first == token then
  if reads and (not holder or holder == '') then
    addReader(token, nowMs, ttl)
    leaveLine(token)
    -- The readers right behind it come in with it.
    serveLine(nowMs, handoverMs, channel)
    return 1
  end
  if not reads and not holder then
    redis.call('SET', lease, token, 'PX', ttl)
    leaveLine(token)
    return 1
  end
end
-- A writer refused by readers stands in the line whatever its fairness: the readers that come after it
-- wait behind it, so that a stream of readers never starves a writer (an unordered one included).
local inOrder = fair or (not reads and holder == '')
if liveness > 0 then
  -- A waiter whose own process holds the lock stays out of an empty line: that holder passes it the
  -- lock, and nobody of another process waits for it to go first (see joinOnlyBehindOthers).
  if joinOnlyBehindOthers and redis.call('EXISTS', line) == 0 then
    return {redis.call('PTTL', lease), lastFence(), 1}
  end
  join(token, inOrder, nowMs, nowMicros, liveness, ttl, reads and (process .. ' r') or process)
end
return {redis.call('PTTL', lease), lastFence()}
`,
);

/**
 * Draws the fence of the lock the token holds, to write or to read (the fence rule, `FENCE_RULE`):
 * only while it holds it, so that fences increase in the order the lock was held. KEYS `LOCK_KEYS`
 * (`lease`, `counter`, `readers`), ARGV `fenceArgv`; the reply is `fenceArgv`'s.
 */
export const fenceLockScript = script(
  'fenceLock',
  6,
  `${LOCK_KEYS.lua}${FENCE_ARGV}${SERVER_TIME}${FENCE_RULE}
local holder = redis.call('GET', lease)
if holder ~= token then
  local deadline = holder == '' and redis.call('ZSCORE', readers, token)
  if not deadline or tonumber(deadline) <= serverTime() then return 0 end
end
return drawFence(counter, fenceCounterTtl)
`,
);

/**
 * Releases the lock if the token holds it, to write or to read. KEYS `LOCK_KEYS`, ARGV `releaseArgv`
 * (the successor's `request` its mode); the reply is `releaseArgv`'s. A reader leaves the readers; the
 * lock is free only once the last of them left. A free lock goes to a successor the caller names (a
 * waiter of the same process, whose turn is open: see `Successor`) — if it may go ahead of the line (a
 * writer only), or is first in it, or nobody is in line — without a message and without a fence (the
 * caller tells it; its holder draws a fence when it asks); else to the line (see `serveLine`), or it is
 * freed and one unordered waiter is woken. A reader whose lease had run out is dropped all the same,
 * with 0. A token that does not hold the lock leaves the line (a waiter giving up); if the lock is free
 * then, the line is served or one unordered waiter woken, as after a release (it may have been the
 * waiter a release just woke).
 */
export const releaseLockScript = script(
  'releaseLock',
  6,
  (publish) => `${LOCK_KEYS.lua}${RELEASE_ARGV}
-- The common case first, before the shared functions below are made (each call makes them anew):
-- the token holds the lock to write, no successor is named and nobody waits. Compare and delete.
if not successor and redis.call('GET', lease) == token and redis.call('EXISTS', alive) == 0 then
  redis.call('DEL', lease)
  return 1
end
${readWriteLine(publish)}
local successorReads = successorRequest == 'r'
local holder = redis.call('GET', lease)
local nowMs = serverTime()
local released = 1
local readUntil = holder == '' and redis.call('ZSCORE', readers, token)
if readUntil then
  redis.call('ZREM', readers, token)
  if tonumber(readUntil) <= nowMs then released = 0 end
  if liveReaders(nowMs) > 0 then
    expireWithLastReader()
    return released
  end
elseif holder ~= token then
  leaveLine(token)
  -- A waiter that gives up while the lock is free may have been the one a release woke (fair: false)
  -- as it gave up: the wake goes on to another waiter, or the lock would stay free while they sleep.
  if not holder and redis.call('EXISTS', alive) == 1 then passOn(handoverMs, channel) end
  return 0
end
redis.call('DEL', lease)
-- A reader never goes ahead of the line (the cohort's jump): a writer waiting there holds it back.
if successor and successorFirst(successor, jump and not successorReads) then
  local ms = handoverFor(successor, handoverMs, successorTtl)
  if successorReads then
    addReader(successor, nowMs, ms)
    leaveLine(successor)
    -- The readers of other processes right behind it in line come in with it.
    serveLine(nowMs, handoverMs, channel)
  else
    redis.call('SET', lease, successor, 'PX', ms)
    leaveLine(successor)
  end
  -- Passed without a fence (PASSED_WITHOUT_FENCE), for \`ms\`: the caller tells its successor, and
  -- whether anybody else still waits in line (1: nobody).
  return {released, -1, ms, redis.call('EXISTS', line) == 0 and 1 or 0}
end
if redis.call('EXISTS', alive) == 1 then passOn(handoverMs, channel) end
return released
`,
);

/**
 * Resets the lease of the token's hold: compare-and-pexpire for its writer; for a reader whose lease
 * still runs, its own deadline (a reader another process lost is never revived), and the lock's
 * expiry follows the last reader's. KEYS `LOCK_KEYS` (`lease`, `readers`), ARGV `extendArgv`; the
 * reply is `extendArgv`'s.
 */
export const extendLockScript = script(
  'extendLock',
  6,
  `${LOCK_KEYS.lua}${EXTEND_ARGV}${SERVER_TIME}
local holder = redis.call('GET', lease)
if holder == token then
  return redis.call('PEXPIRE', lease, ttl)
end
if holder ~= '' then return 0 end
local nowMs = serverTime()
local deadline = redis.call('ZSCORE', readers, token)
if not deadline or tonumber(deadline) <= nowMs then return 0 end
redis.call('ZADD', readers, 'XX', nowMs + tonumber(ttl), token)
local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', readers, last)
redis.call('PEXPIREAT', lease, last)
return 1
`,
);

/**
 * Several free locks of one hash slot taken to write in one step, all or none (a lock on several
 * keys: `LockStore.acquireAllIfFree`). KEYS: for each lock its first three keys (`leaseKeysOf`), the
 * lock, its fence counter (unused) and its line, so that KEYS[i] is a lock and KEYS[i + 2] its line;
 * ARGV `acquireAllIfFreeArgv`, and its reply: 1 when every lock was free with nobody in its line and is
 * now the token's (no fence is drawn, as with SET NX); 0, with nothing taken, when one was held or had
 * waiters. Why one script: the caller must never hold some of the keys of a slot it took at once.
 */
export const acquireFreeLocksScript = script(
  'acquireFreeLocks',
  3, // per lock
  `${ACQUIRE_ALL_IF_FREE_ARGV}
for i = 1, #KEYS, 3 do
  if redis.call('EXISTS', KEYS[i], KEYS[i + 2]) > 0 then return 0 end
end
for i = 1, #KEYS, 3 do
  redis.call('SET', KEYS[i], token, 'PX', ttl)
end
return 1
`,
);

/**
 * How many hold the lock: 1 for a writer, the number of readers whose lease still runs, or 0. KEYS
 * `LOCK_KEYS` (`lease`, `readers`); no ARGV.
 */
export const countLockScript = script(
  'countLock',
  6,
  `${LOCK_KEYS.lua}${SERVER_TIME}
local holder = redis.call('GET', lease)
if not holder then return 0 end
if holder ~= '' then return 1 end
return redis.call('ZCOUNT', readers, '(' .. serverTime(), '+inf')
`,
);

/**
 * Reads a lock without touching it. KEYS `LOCK_KEYS` (`lease`, `counter`, `readers`); no ARGV. Returns
 * {PTTL of the lock (-2: not held), the last fence issued as a string ('' if none), the number of
 * readers whose lease still runs (0: held to write, or free)}: the fence as a string, because it is
 * near 2^51 and Lua would hand a number back in exponent notation. One script rather than several
 * commands, so that the values are of the same instant.
 */
export const inspectLockScript = script(
  'inspectLock',
  6,
  `${LOCK_KEYS.lua}${SERVER_TIME}
local pttl = redis.call('PTTL', lease)
local readerCount = 0
if redis.call('GET', lease) == '' then
  readerCount = redis.call('ZCOUNT', readers, '(' .. serverTime(), '+inf')
  -- The last reader's lease ends this very ms: free.
  if readerCount == 0 then pttl = -2 end
end
return {pttl, redis.call('GET', counter) or '', readerCount}
`,
);

/**
 * An operator's release of a lock, whoever holds it, writer or readers: the lock is freed and goes to
 * the line as after its holder's release (`passOn`), without knowing any token. The holders find it
 * gone at their next renewal (a lost lease). KEYS `LOCK_KEYS`, ARGV `forceReleaseArgv`; the reply is
 * `forceReleaseArgv`'s.
 */
export const forceReleaseLockScript = script(
  'forceReleaseLock',
  6,
  (publish) => `${LOCK_KEYS.lua}${FORCE_RELEASE_ARGV}${readWriteLine(publish)}
if not redis.call('GET', lease) then
  return 0
end
redis.call('DEL', lease, readers)
passOn(handoverMs, channel)
return 1
`,
);
