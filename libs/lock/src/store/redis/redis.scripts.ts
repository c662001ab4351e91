import { createHash } from 'node:crypto';

/** A Lua script declared once; `RedisStore` calls it by SHA and falls back to EVAL after NOSCRIPT. */
export interface RedisScript {
  readonly name: string;
  readonly numberOfKeys: number;
  readonly source: string;
  readonly sha: string;
}

function script(name: string, numberOfKeys: number, source: string): RedisScript {
  return { name, numberOfKeys, source, sha: createHash('sha1').update(source).digest('hex') };
}

const shardedVariants = new Map<RedisScript, RedisScript>();

/**
 * The same script publishing its wake-ups with SPUBLISH, for sharded pub/sub on a Redis Cluster: the
 * channel shares the hash tag of the script's keys, so it is served by the primary that runs it.
 */
export function publishingSharded(original: RedisScript): RedisScript {
  let variant = shardedVariants.get(original);
  if (variant === undefined) {
    const source = original.source.replaceAll("redis.call('PUBLISH'", "redis.call('SPUBLISH'");
    variant = source === original.source ? original : script(original.name, original.numberOfKeys, source);
    shardedVariants.set(original, variant);
  }
  return variant;
}

/**
 * A PTTL reply as the ms a lease still runs. 0 means it ends within the current millisecond (the
 * key is still there): 1, since 0 reads as "free" in an inspection and as "expiry unknown" in
 * `Attempt.retryIn` (a waiter would sleep a whole step). -1 (no expiry) and -2 (no key) pass through.
 */
export function leaseRunsOutIn(pttl: number | string): number {
  const ms = Number(pttl);
  return ms === 0 ? 1 : ms;
}

/**
 * What the lock and semaphore scripts share. Every lock or semaphore has, in its hash slot:
 * KEYS[1] the lease (lock string, or the sorted set of permits), KEYS[2] its fence counter,
 * KEYS[3] the **line**: fair waiters in order of arrival (token → server clock in µs), and
 * KEYS[4] the **alive** set: every waiter, fair or not (token → deadline in ms), which a waiter
 * pushes back with each attempt. A waiter that stops attempting (it died, or gave up without
 * being able to say so) drops out once its deadline passes, so it never blocks the line.
 * A semaphore has KEYS[5] too, the **limits** of its waiters (token → the limit it asked for):
 * a permit handed to a waiter must fit under that waiter's own limit.
 * Releases publish on the wake-up channel: a bare message wakes waiters (one per process), `<token> <fence>`
 * tells one waiter that the lease was handed to it.
 */
const prelude = `
local lease, counter, line, alive, limits = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- How long (ms) a fence counter outlives the last fence drawn from it: set by each script that draws fences.
local counterTtl

local function serverTime()
  local time = redis.call('TIME')
  local micros = tonumber(time[1]) * 1000000 + tonumber(time[2])
  return math.floor(micros / 1000), micros
end

-- The next fence: the server clock in microseconds, or one more than the last fence when that is
-- ahead. It increases even when the counter was lost (a restart without persistence, a FLUSHALL)
-- or restored from an older snapshot, as long as the server clock does not go back. The counter
-- only matters while fences are drawn faster than the clock ticks: it expires counterTtl after the
-- last fence, when the clock is that far past it (docs/API.md, "Fences"). SET ... GET reads the last
-- fence and writes the next in one command; drawn before a lease is written, a counter of the wrong
-- type fails the script before it takes anything.
local function nextFence()
  local _, micros = serverTime()
  -- '%.0f': Lua would write a number this large in exponent notation, rounded.
  local last = tonumber(redis.call('SET', counter, string.format('%.0f', micros), 'GET', 'PX', counterTtl)) or 0
  if last < micros then return micros end
  redis.call('SET', counter, string.format('%.0f', last + 1), 'PX', counterTtl)
  return last + 1
end

-- The last fence this key issued: a waiter told to wait compares it with the fence of a handover
-- message, which is above it only if the handover came after this attempt.
local function lastFence()
  return redis.call('GET', counter) or '0'
end

local function leaveLine(token)
  redis.call('ZREM', line, token)
  redis.call('ZREM', alive, token)
  if limits then redis.call('HDEL', limits, token) end
end

local function dropGoneWaiters(nowMs)
  local gone = redis.call('ZRANGEBYSCORE', alive, '-inf', nowMs)
  if #gone > 0 then
    redis.call('ZREM', line, unpack(gone))
    redis.call('ZREM', alive, unpack(gone))
    if limits then redis.call('HDEL', limits, unpack(gone)) end
  end
end

-- The sets expire only once every waiter in them is gone: a waiter may lengthen their life, never
-- shorten it (one that may wait less than another would drop the other out of line, unwoken).
-- PTTL rather than PEXPIRE's GT option, which needs Redis 7.
local function outlive(set, ms)
  if redis.call('PTTL', set) < ms then redis.call('PEXPIRE', set, ms) end
end

local function join(token, fair, nowMs, nowMicros, liveMs)
  if fair then
    redis.call('ZADD', line, 'NX', nowMicros, token)
    outlive(line, liveMs * 2)
  end
  redis.call('ZADD', alive, nowMs + liveMs, token)
  outlive(alive, liveMs * 2)
end

-- Tells one waiter that the lease is its own now, with the fence of its lease.
local function tell(channel, waiter)
  redis.call('PUBLISH', channel, waiter .. ' ' .. string.format('%.0f', nextFence()))
end
`;

/**
 * One attempt to take the lock; with the line of waiters (fair) or without.
 * KEYS[1] lock, KEYS[2] fence counter, KEYS[3] line, KEYS[4] alive.
 * ARGV[1] owner token, ARGV[2] ttl ms, ARGV[3] '1' fair / '0' not, ARGV[4] when not granted, wait
 * in line for this many ms ('0': a last attempt, it does not wait), ARGV[5] '1' if it joined the
 * line before, ARGV[6] lease ms of a handover, ARGV[7] channel, ARGV[8] fence counter ttl ms.
 * Returns the fence (an integer) when the token holds the lock now; else {ms the holder's lease
 * still runs, the last fence issued}. A bare integer, and few arguments, because the uncontended
 * call is the one that counts: every argument and every element of a reply is parsed twice, by the
 * client and by the server.
 *
 * - The fast path is one SET NX PX with its fence (unless fair waiters are in line: they come
 *   first). Its fence is drawn before the lease is written, and is lost when the lock is taken.
 * - "Held by this token already" counts as granted: a retry after a lost reply, or a waiter that
 *   missed the message telling it the lock was handed to it.
 * - A free lock with a fair waiter ahead of the caller (its holder's lease ran out, or a handover
 *   to a waiter that was gone expired) is handed to that waiter now, and the caller joins the line.
 */
export const acquireLockScript = script(
  'acquireLock',
  4,
  `${prelude}
local token, ttl, fair = ARGV[1], ARGV[2], ARGV[3] == '1'
local waitMs, inLine = tonumber(ARGV[4]), ARGV[5] == '1'
counterTtl = ARGV[8]
if not fair or redis.call('EXISTS', line) == 0 then
  local fence = nextFence()
  if redis.call('SET', lease, token, 'NX', 'PX', ttl) then
    if inLine then leaveLine(token) end
    return fence
  end
end
local holder = redis.call('GET', lease)
if holder == token then
  redis.call('PEXPIRE', lease, ttl)
  leaveLine(token)
  return nextFence()
end
local nowMs, nowMicros = serverTime()
dropGoneWaiters(nowMs)
if not holder then
  local ahead = fair and redis.call('ZRANGE', line, 0, 0)[1]
  if not ahead or ahead == token then
    redis.call('SET', lease, token, 'PX', ttl)
    leaveLine(token)
    return nextFence()
  end
  redis.call('SET', lease, ahead, 'PX', ARGV[6])
  leaveLine(ahead)
  tell(ARGV[7], ahead)
end
if waitMs > 0 then join(token, fair, nowMs, nowMicros, waitMs) end
return {redis.call('PTTL', lease), lastFence()}
`,
);

/**
 * Whether a release may hand its lease to the successor its caller names: when the successor may go
 * ahead of the line, is first in it, or nobody is in line. Needs `prelude`.
 */
const successorFirst = `
local function successorFirst(successor, jump)
  if jump then return true end
  local first = redis.call('ZRANGE', line, 0, 0)[1]
  return not first or first == successor
end
`;

/**
 * What follows a lock's release (by its holder or an operator); needs `prelude`: the lock goes to the
 * first fair waiter in line, set to its token for a handover lease it extends once told, or is freed
 * and the other waiters are woken.
 */
const lockPassOn = `
local function passOn(handoverMs, channel)
  dropGoneWaiters(serverTime())
  local first = redis.call('ZRANGE', line, 0, 0)[1]
  if first then
    redis.call('SET', lease, first, 'PX', handoverMs)
    leaveLine(first)
    tell(channel, first)
  else
    redis.call('DEL', lease)
    redis.call('PUBLISH', channel, '')
  end
end
`;

/**
 * Releases the lock if the token holds it: hands it to a successor the caller names (a waiter of the
 * same process, whose turn is open: see `Successor`) — if it may go ahead of the line, or is first
 * in it, or nobody is in line — without a message, since the caller tells it; else straight to the
 * first fair waiter in line (the lock is set to that waiter's token for a short handover lease, which
 * the waiter extends to its own ttl once told), or frees it and wakes the other waiters. A token
 * that does not hold the lock leaves the line (a waiter giving up).
 * KEYS[1] lock, KEYS[2] fence counter, KEYS[3] line, KEYS[4] alive.
 * ARGV[1] owner token, ARGV[2] lease ms of a handover, ARGV[3] channel, ARGV[4] fence counter ttl ms;
 * with a successor, ARGV[5] its token and ARGV[6] '1' if it may go ahead of the line.
 * Returns 1 if the token held the lock, else 0; {1, its fence} when the lock went to the successor.
 */
export const releaseLockScript = script(
  'releaseLock',
  4,
  `${prelude}${lockPassOn}${successorFirst}
local token, successor = ARGV[1], ARGV[5]
counterTtl = ARGV[4]
if redis.call('GET', lease) ~= token then
  leaveLine(token)
  return 0
end
if successor and successorFirst(successor, ARGV[6] == '1') then
  redis.call('SET', lease, successor, 'PX', ARGV[2])
  leaveLine(successor)
  return {1, nextFence()}
end
if redis.call('EXISTS', alive) == 0 then
  redis.call('DEL', lease)
  return 1
end
passOn(ARGV[2], ARGV[3])
return 1
`,
);

/**
 * Compare-and-pexpire: resets the lease only for its owner.
 * KEYS[1] lock key; ARGV[1] owner token, ARGV[2] ttl in ms. Returns 1 if extended, else 0.
 */
export const extendLockScript = script(
  'extendLock',
  1,
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`,
);

// Semaphores: one sorted set per name, member = permit token, score = lease deadline in ms of
// the server's clock (TIME), so that clients with skewed clocks agree on who has expired.
// The set itself expires with its last lease, so an abandoned semaphore leaves nothing behind.
const serverNowMs = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
`;
const expireWithLastLease = `
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], last[2]) end
`;

/**
 * Gives permits to the fair waiters in line (for a handover lease each extends once told); needs
 * `prelude`. Every caller's own limit holds for it: a waiter is granted a permit only while, with it,
 * no more permits are held than the limit it asked for (kept in KEYS[5] while it waits). The line is
 * served in order: a first waiter that does not fit holds back those behind it, so that a lowered
 * limit takes effect (the count drains down to it) rather than starving its callers.
 */
const permitHandover = `
-- The limit a waiter asked for when it joined; nil when it did not join (or nest-lock did not record it).
local function limitOf(waiter)
  return tonumber(redis.call('HGET', limits, waiter))
end

local function handPermit(waiter, nowMs, handoverMs, channel)
  redis.call('ZADD', lease, nowMs + handoverMs, waiter)
  leaveLine(waiter)
  tell(channel, waiter)
end

-- Hands permits to the waiters in line, first come first served, while the first fits under its own
-- limit with \`held\` permits held; stops at \`stopAt\` (the caller, which takes its own). Returns the
-- permits held then, whether a waiter that does not fit is first in line (holding back those behind
-- it), and how many permits were handed.
local function serveLine(held, nowMs, handoverMs, channel, stopAt)
  local handed = 0
  while true do
    local first = redis.call('ZRANGE', line, 0, 0)[1]
    if not first or first == stopAt then return held, false, handed end
    if redis.call('ZSCORE', lease, first) then
      -- It holds one already (its own attempt took it, and the reply that said so was lost).
      leaveLine(first)
    else
      local limit = limitOf(first)
      if not limit or held >= limit then return held, true, handed end
      handPermit(first, nowMs, handoverMs, channel)
      held = held + 1
      handed = handed + 1
    end
  end
end
`;

/**
 * One attempt to take a permit: drops expired permits, serves the fair waiters in line ahead of the
 * caller (see `permitHandover`), then grants one to the caller if, with it, no more than its `limit`
 * are held and no waiter ahead is held back — or renews the one the token holds already (a retry after
 * a lost reply, or a waiter that missed its handover message). A caller that waits records its limit.
 * KEYS[1] permits, KEYS[2] fence counter, KEYS[3] line, KEYS[4] alive, KEYS[5] limits.
 * ARGV[1] token, ARGV[2] limit, ARGV[3] ttl ms, ARGV[4] '1' fair, ARGV[5] when not granted, wait in
 * line for this many ms ('0': a last attempt, it does not wait), ARGV[6] '1' if it joined the line
 * before, ARGV[7] lease ms of a handover, ARGV[8] channel, ARGV[9] fence counter ttl ms.
 * Returns the fence (an integer) if the token holds a permit now, else {ms until the first permit
 * runs out, the last fence issued} (the shape of `acquireLockScript`'s reply, for the same reason).
 * Permits handed to waiters ahead move the set's expiry to the last deadline.
 */
export const acquirePermitScript = script(
  'acquirePermit',
  5,
  `${prelude}${permitHandover}
local token, limit, ttl, fair = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local waitMs, inLine = tonumber(ARGV[5]), ARGV[6] == '1'
counterTtl = ARGV[9]
local nowMs, nowMicros = serverTime()
redis.call('ZREMRANGEBYSCORE', lease, '-inf', nowMs)
local granted = redis.call('ZSCORE', lease, token)
local held = redis.call('ZCARD', lease)
local heldBack, handed = false, 0
if not granted and fair and redis.call('EXISTS', alive) == 1 then
  dropGoneWaiters(nowMs)
  held, heldBack, handed = serveLine(held, nowMs, tonumber(ARGV[7]), ARGV[8], token)
end
if granted or (held < limit and not heldBack) then
  local fence = nextFence()
  redis.call('ZADD', lease, nowMs + ttl, token)
  if inLine or granted then leaveLine(token) end
  local last = redis.call('ZRANGE', lease, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', lease, last[2])
  return fence
end
if handed > 0 then
  local last = redis.call('ZRANGE', lease, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', lease, last[2])
end
if waitMs > 0 then
  join(token, fair, nowMs, nowMicros, waitMs)
  redis.call('HSET', limits, token, limit)
  outlive(limits, waitMs * 2)
end
local first = redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')
return {first[2] and (tonumber(first[2]) - nowMs) or 0, lastFence()}
`,
);

/**
 * Gives a permit back (a permit whose lease already ran out is dropped but reported as not ours),
 * then hands the freed permit to the successor the caller names (as `releaseLockScript` does) if it
 * fits under the successor's own limit, and serves the fair waiters in line (see `permitHandover`);
 * when nobody was handed one, wakes the other waiters. A token that holds no permit leaves the line
 * (a waiter giving up).
 * KEYS[1] permits, KEYS[2] fence counter, KEYS[3] line, KEYS[4] alive, KEYS[5] limits.
 * ARGV[1] token, ARGV[2] lease ms of a handover, ARGV[3] channel, ARGV[4] fence counter ttl ms; with a
 * successor, ARGV[5] its token and ARGV[6] '1' if it may go ahead of the line.
 * Returns 1 if an unexpired permit was released, else 0; {that, its fence} when the freed permit
 * went to the successor.
 */
export const releasePermitScript = script(
  'releasePermit',
  5,
  `${prelude}${permitHandover}${successorFirst}
local token, successor = ARGV[1], ARGV[5]
counterTtl = ARGV[4]
local deadline = redis.call('ZSCORE', lease, token)
if not deadline then
  leaveLine(token)
  return 0
end
redis.call('ZREM', lease, token)
local nowMs = serverTime()
redis.call('ZREMRANGEBYSCORE', lease, '-inf', nowMs)
local released = tonumber(deadline) > nowMs and 1 or 0
local held = redis.call('ZCARD', lease)
local handedFence = 0
-- A successor whose own attempt took a permit meanwhile gets no second one, nor one beyond its own limit.
if successor and not redis.call('ZSCORE', lease, successor) and successorFirst(successor, ARGV[6] == '1')
    and held < (limitOf(successor) or 0) then
  redis.call('ZADD', lease, nowMs + tonumber(ARGV[2]), successor)
  leaveLine(successor)
  handedFence = nextFence()
  held = held + 1
end
if redis.call('EXISTS', alive) == 1 then
  dropGoneWaiters(nowMs)
  local _, _, handed = serveLine(held, nowMs, tonumber(ARGV[2]), ARGV[3])
  if handed == 0 and handedFence == 0 then redis.call('PUBLISH', ARGV[3], '') end
end
${expireWithLastLease}
if handedFence > 0 then return {released, handedFence} end
return released
`,
);

/**
 * Resets the lease of an unexpired permit.
 * KEYS[1] semaphore set; ARGV[1] permit token, ARGV[2] ttl in ms. Returns 1 if extended, else 0.
 */
export const extendPermitScript = script(
  'extendPermit',
  1,
  `${serverNowMs}
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not deadline or tonumber(deadline) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
${expireWithLastLease}
return 1
`,
);

/**
 * Counts unexpired permits (read-only).
 * KEYS[1] semaphore set. Returns the count.
 */
export const countPermitsScript = script(
  'countPermits',
  1,
  `${serverNowMs}
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
`,
);

// Inspection and operators' tools, for LockService.inspect / forceUnlock and SemaphoreService.holders.

/**
 * Reads a lock without touching it: its remaining lease and its fence counter.
 * KEYS[1] lock, KEYS[2] fence counter. No ARGV.
 * Returns {PTTL of the lock (-2: not held), the last fence issued as a string ('' if none)}: the
 * fence as a string, because it is near 2^51 and Lua would hand a number back in exponent notation.
 * One script rather than two commands, so that both values are of the same instant.
 */
export const inspectLockScript = script(
  'inspectLock',
  2,
  `
return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
`,
);

/**
 * Lists the unexpired permits of a semaphore (read-only): what `countPermits` counts.
 * KEYS[1] semaphore set. No ARGV.
 * Returns the ms each permit's lease still runs, by the server's clock, soonest first (ZRANGEBYSCORE
 * orders by deadline).
 */
export const listPermitsScript = script(
  'listPermits',
  1,
  `${serverNowMs}
local permits = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
local remaining = {}
for i = 2, #permits, 2 do
  remaining[#remaining + 1] = tonumber(permits[i]) - now
end
return remaining
`,
);

/**
 * An operator's release of a lock, whoever holds it: the same as `releaseLockScript` for the
 * holder's token — the lock goes to the first fair waiter in line (for a handover lease), or is
 * freed and the waiters are woken — without knowing the token. The holder finds it gone at its
 * next renewal (a lost lease).
 * KEYS[1] lock, KEYS[2] fence counter, KEYS[3] line, KEYS[4] alive.
 * ARGV[1] lease ms of a handover, ARGV[2] channel, ARGV[3] fence counter ttl ms.
 * Returns 1 if the lock was held, else 0.
 */
export const forceReleaseLockScript = script(
  'forceReleaseLock',
  4,
  `${prelude}${lockPassOn}
counterTtl = ARGV[3]
if not redis.call('GET', lease) then
  return 0
end
passOn(ARGV[1], ARGV[2])
return 1
`,
);
