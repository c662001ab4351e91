import { FENCE_RULE, SERVER_TIME, waiterLine } from '../store/redis/lua.js';
import { type PublishCommand, script } from '../store/redis/script.js';

/**
 * The scripts of a semaphore on one Redis: KEYS[1] is the sorted set of its permits (member =
 * permit token, score = lease deadline in ms of the **server's** clock, so that clients with skewed
 * clocks agree on who has expired), which expires with its last lease, so an abandoned semaphore
 * leaves nothing behind; KEYS[2] its fence counter, KEYS[3] the line, KEYS[4] alive, KEYS[5] what
 * each waiter asked for (see `waiterLine`), KEYS[6] the limit each waiter asked for. ARGV as
 * `RedisLayout` lists them; the acquire script takes one request argument, ARGV[10] the caller's limit.
 */

const expireWithLastLease = `
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], last[2]) end
`;

/**
 * Gives permits to the fair waiters in line (for a handover lease each extends once told). Every
 * caller's own limit holds for it: a waiter is granted a permit only while, with it, no more permits
 * are held than the limit it asked for (kept in KEYS[6] while it waits). The line is served in order:
 * a first waiter that does not fit holds back those behind it, so that a lowered limit takes effect
 * (the count drains down to it) rather than starving its callers.
 */
function servingTheLine(publish: PublishCommand): string {
  return `${waiterLine(publish)}
asked = KEYS[6]

-- The limit a waiter asked for when it joined; nil when it did not join (or nest-lock did not record it).
local function limitOf(waiter)
  return tonumber(redis.call('HGET', asked, waiter))
end

local function handPermit(waiter, nowMs, handoverMs, channel)
  local ms = handoverFor(waiter, handoverMs)
  redis.call('ZADD', lease, nowMs + ms, waiter)
  handTo(channel, waiter, ms)
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
}

/**
 * One attempt to take a permit: drops expired permits, serves the fair waiters in line ahead of the
 * caller, then grants one to the caller if, with it, no more than its limit are held and no waiter
 * ahead is held back — or renews the one the token holds already (a retry after a lost reply, or a
 * waiter that missed its handover message). A caller that waits records its limit. Returns 1 when
 * granted (no fence is drawn: `fencePermitScript` draws one when the holder asks); else {ms until the
 * first permit runs out, the last fence issued}. Permits handed to waiters ahead move the set's
 * expiry to the last deadline.
 */
export const acquirePermitScript = script(
  'acquirePermit',
  6,
  (publish) => `${servingTheLine(publish)}
local token, ttl, fair = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local waitMs, inLine = tonumber(ARGV[4]), ARGV[5] == '1'
counterTtl = ARGV[8]
local limit = tonumber(ARGV[10])
local nowMs, nowMicros = serverTime()
redis.call('ZREMRANGEBYSCORE', lease, '-inf', nowMs)
local granted = redis.call('ZSCORE', lease, token)
local held = redis.call('ZCARD', lease)
local heldBack, handed = false, 0
if not granted and fair and redis.call('EXISTS', alive) == 1 then
  dropGoneWaiters(nowMs)
  held, heldBack, handed = serveLine(held, nowMs, tonumber(ARGV[6]), ARGV[7], token)
end
if granted or (held < limit and not heldBack) then
  redis.call('ZADD', lease, nowMs + ttl, token)
  if inLine or granted then leaveLine(token) end
  local last = redis.call('ZRANGE', lease, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', lease, last[2])
  return 1
end
if handed > 0 then
  local last = redis.call('ZRANGE', lease, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', lease, last[2])
end
if waitMs > 0 then
  join(token, fair, nowMs, nowMicros, waitMs, ttl, ARGV[9])
  redis.call('HSET', asked, token, limit)
  outlive(asked, waitMs * 2)
end
local first = redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')
return {first[2] and (tonumber(first[2]) - nowMs) or 0, lastFence()}
`,
);

/**
 * Gives a permit back (a permit whose lease already ran out is dropped but reported as not ours),
 * then hands the freed permit to the successor the caller names (as `releaseLockScript` does) if it
 * fits under the successor's own limit, and serves the fair waiters in line; when nobody was handed
 * one, wakes the other waiters. A token that holds no permit leaves the line (a waiter giving up), and
if a release had woken it to try, passes that on (serves the line, or wakes another waiter).
 */
export const releasePermitScript = script(
  'releasePermit',
  6,
  (publish) => `${servingTheLine(publish)}
local token, successor = ARGV[1], ARGV[5]
counterTtl = ARGV[4]
local deadline = redis.call('ZSCORE', lease, token)
local nowMs = serverTime()
if not deadline then
  -- A waiter that gives up after a release woke it (fair: false; a woken waiter is out of alive): the
  -- wake goes on to another waiter, or permits would stay free while they sleep.
  local woken = not redis.call('ZSCORE', alive, token)
  leaveLine(token)
  if woken and redis.call('EXISTS', alive) == 1 then
    redis.call('ZREMRANGEBYSCORE', lease, '-inf', nowMs)
    dropGoneWaiters(nowMs)
    local _, _, handed = serveLine(redis.call('ZCARD', lease), nowMs, tonumber(ARGV[2]), ARGV[3])
    if handed == 0 then wake(ARGV[3]) end
    ${expireWithLastLease.trim()}
  end
  return 0
end
redis.call('ZREM', lease, token)
redis.call('ZREMRANGEBYSCORE', lease, '-inf', nowMs)
local released = tonumber(deadline) > nowMs and 1 or 0
local held = redis.call('ZCARD', lease)
-- The lease handed to the successor, in ms; nil when it was not.
local passedMs
-- A successor whose own attempt took a permit meanwhile gets no second one, nor one beyond its own limit.
if successor and not redis.call('ZSCORE', lease, successor) and successorFirst(successor, ARGV[6] == '1')
    and held < (limitOf(successor) or 0) then
  passedMs = handoverFor(successor, ARGV[2], ARGV[7])
  redis.call('ZADD', lease, nowMs + passedMs, successor)
  leaveLine(successor)
  held = held + 1
end
if redis.call('EXISTS', alive) == 1 then
  dropGoneWaiters(nowMs)
  local _, _, handed = serveLine(held, nowMs, tonumber(ARGV[2]), ARGV[3])
  if handed == 0 and not passedMs then wake(ARGV[3]) end
end
${expireWithLastLease}
-- Passed to the successor, without a fence (PASSED_WITHOUT_FENCE): the caller tells it.
if passedMs then return {released, -1, passedMs} end
return released
`,
);

/**
 * Draws the fence of the unexpired permit the token holds (the fence rule, `FENCE_RULE`), from the
 * semaphore's one counter: fences increase in the order they are drawn. KEYS[1] the permits, KEYS[2]
 * the fence counter; ARGV[1] owner token, ARGV[2] fence counter ttl ms. Returns the fence, or 0 when
 * the token holds no permit (nothing is drawn).
 */
export const fencePermitScript = script(
  'fencePermit',
  2,
  `${SERVER_TIME}${FENCE_RULE}
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not deadline or tonumber(deadline) <= serverTime() then return 0 end
return drawFence(KEYS[2], ARGV[2])
`,
);

/** Resets the lease of an unexpired permit. */
export const extendPermitScript = script(
  'extendPermit',
  1,
  `${SERVER_TIME}
local nowMs = serverTime()
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not deadline or tonumber(deadline) <= nowMs then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', nowMs + tonumber(ARGV[2]), ARGV[1])
${expireWithLastLease}
return 1
`,
);

/** Counts the unexpired permits. */
export const countPermitsScript = script(
  'countPermits',
  1,
  `${SERVER_TIME}
return redis.call('ZCOUNT', KEYS[1], '(' .. serverTime(), '+inf')
`,
);

/**
 * Lists the unexpired permits: the ms each permit's lease still runs, by the server's clock, soonest
 * first (ZRANGEBYSCORE orders by deadline).
 */
export const listPermitsScript = script(
  'listPermits',
  1,
  `${SERVER_TIME}
local nowMs = serverTime()
local permits = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. nowMs, '+inf', 'WITHSCORES')
local remaining = {}
for i = 2, #permits, 2 do
  remaining[#remaining + 1] = tonumber(permits[i]) - nowMs
end
return remaining
`,
);
