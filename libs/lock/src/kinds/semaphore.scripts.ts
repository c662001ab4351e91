import { FENCE_RULE, SERVER_TIME, waiterLine } from '../store/redis/lua.js';
import { ACQUIRE_ARGV, EXTEND_ARGV, FENCE_ARGV, lineKeys, RELEASE_ARGV } from '../store/redis/redis-layout.js';
import { type PublishCommand, script } from '../store/redis/script.js';

/**
 * The scripts of a semaphore on one Redis. Each reads its KEYS and ARGV by name, as `SEMAPHORE_KEYS` and
 * its operation's builder (`redis-layout.ts`) write them. `lease` is the sorted set of its permits
 * (member = permit token, score = lease deadline in ms of the **server's** clock, so that clients with
 * skewed clocks agree on who has expired), which expires with its last lease, so an abandoned
 * semaphore leaves nothing behind.
 */

/** A semaphore's keys: the line's (`lineKeys`), and `limits`, the limit each waiter asked for. */
export const SEMAPHORE_KEYS = lineKeys({ limits: 'limits' });

/**
 * A semaphore's request (`RedisLayout.requestArgs`): the caller's limit. The Lua reads it as
 * `tonumber(request)` (an attempt's); a release's successor fits under the limit it recorded in line.
 */
export function semaphoreRequestArgs(limit: number): readonly number[] {
  return [limit];
}

/** The permits' set lasts as long as its last lease (needs `lease`). */
const LAST_LEASE = `
local function expireWithLastLease()
  local last = redis.call('ZRANGE', lease, -1, -1, 'WITHSCORES')
  if last[2] then redis.call('PEXPIREAT', lease, last[2]) end
end
`;

/**
 * Gives permits to the fair waiters in line (for a handover lease each extends once told). Every
 * caller's own limit holds for it: a waiter is granted a permit only while, with it, no more permits
 * are held than the limit it asked for (kept in `limits` while it waits). The line is served in order:
 * a first waiter that does not fit holds back those behind it, so that a lowered limit takes effect
 * (the count drains down to it) rather than starving its callers.
 */
function servingTheLine(publish: PublishCommand): string {
  return `${waiterLine(publish)}${LAST_LEASE}
asked = limits

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
 * waiter that missed its handover message). A caller that waits records its limit. KEYS
 * `SEMAPHORE_KEYS`, ARGV `acquireArgv` (its `request` the limit); the reply is `acquireArgv`'s, the ms
 * until the first permit runs out when refused. No fence is drawn: `fencePermitScript` draws one when
 * the holder asks. Permits handed to waiters ahead move the set's expiry to the last deadline.
 */
export const acquirePermitScript = script(
  'acquirePermit',
  6,
  (publish) => `${SEMAPHORE_KEYS.lua}${ACQUIRE_ARGV}${servingTheLine(publish)}
local limit = tonumber(request)
local nowMs, nowMicros = serverTime()
redis.call('ZREMRANGEBYSCORE', lease, '-inf', nowMs)
local granted = redis.call('ZSCORE', lease, token)
local held = redis.call('ZCARD', lease)
local heldBack, handed = false, 0
if not granted and fair and redis.call('EXISTS', alive) == 1 then
  dropGoneWaiters(nowMs)
  held, heldBack, handed = serveLine(held, nowMs, handoverMs, channel, token)
end
if granted or (held < limit and not heldBack) then
  redis.call('ZADD', lease, nowMs + ttl, token)
  if inLine or granted then leaveLine(token) end
  expireWithLastLease()
  return 1
end
if handed > 0 then expireWithLastLease() end
if liveness > 0 then
  join(token, fair, nowMs, nowMicros, liveness, ttl, process)
  redis.call('HSET', asked, token, limit)
  outlive(asked, liveness * 2)
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
 * if a release had woken it to try, passes that on (serves the line, or wakes another waiter). KEYS
 * `SEMAPHORE_KEYS`, ARGV `releaseArgv`; the reply is `releaseArgv`'s.
 */
export const releasePermitScript = script(
  'releasePermit',
  6,
  (publish) => `${SEMAPHORE_KEYS.lua}${RELEASE_ARGV}${servingTheLine(publish)}
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
    local _, _, handed = serveLine(redis.call('ZCARD', lease), nowMs, handoverMs, channel)
    if handed == 0 then wake(channel) end
    expireWithLastLease()
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
if successor and not redis.call('ZSCORE', lease, successor) and successorFirst(successor, jump)
    and held < (limitOf(successor) or 0) then
  passedMs = handoverFor(successor, handoverMs, successorTtl)
  redis.call('ZADD', lease, nowMs + passedMs, successor)
  leaveLine(successor)
  held = held + 1
end
if redis.call('EXISTS', alive) == 1 then
  dropGoneWaiters(nowMs)
  local _, _, handed = serveLine(held, nowMs, handoverMs, channel)
  if handed == 0 and not passedMs then wake(channel) end
end
expireWithLastLease()
-- Passed to the successor, without a fence (PASSED_WITHOUT_FENCE): the caller tells it.
if passedMs then return {released, -1, passedMs} end
return released
`,
);

/**
 * Draws the fence of the unexpired permit the token holds (the fence rule, `FENCE_RULE`), from the
 * semaphore's one counter: fences increase in the order they are drawn. KEYS `SEMAPHORE_KEYS` (`lease`,
 * `counter`: two), ARGV `fenceArgv`; the reply is `fenceArgv`'s.
 */
export const fencePermitScript = script(
  'fencePermit',
  2,
  `${SEMAPHORE_KEYS.lua}${FENCE_ARGV}${SERVER_TIME}${FENCE_RULE}
local deadline = redis.call('ZSCORE', lease, token)
if not deadline or tonumber(deadline) <= serverTime() then return 0 end
return drawFence(counter, fenceCounterTtl)
`,
);

/**
 * Resets the lease of an unexpired permit. KEYS `SEMAPHORE_KEYS` (`lease`: one), ARGV `extendArgv`;
 * the reply is `extendArgv`'s.
 */
export const extendPermitScript = script(
  'extendPermit',
  1,
  `${SEMAPHORE_KEYS.lua}${EXTEND_ARGV}${SERVER_TIME}${LAST_LEASE}
local nowMs = serverTime()
local deadline = redis.call('ZSCORE', lease, token)
if not deadline or tonumber(deadline) <= nowMs then
  return 0
end
redis.call('ZADD', lease, 'XX', nowMs + tonumber(ttl), token)
expireWithLastLease()
return 1
`,
);

/** Counts the unexpired permits. KEYS `SEMAPHORE_KEYS` (`lease`: one); no ARGV. */
export const countPermitsScript = script(
  'countPermits',
  1,
  `${SEMAPHORE_KEYS.lua}${SERVER_TIME}
return redis.call('ZCOUNT', lease, '(' .. serverTime(), '+inf')
`,
);

/**
 * Lists the unexpired permits: the ms each permit's lease still runs, by the server's clock, soonest
 * first (ZRANGEBYSCORE orders by deadline). KEYS `SEMAPHORE_KEYS` (`lease`: one); no ARGV.
 */
export const listPermitsScript = script(
  'listPermits',
  1,
  `${SEMAPHORE_KEYS.lua}${SERVER_TIME}
local nowMs = serverTime()
local permits = redis.call('ZRANGEBYSCORE', lease, '(' .. nowMs, '+inf', 'WITHSCORES')
local remaining = {}
for i = 2, #permits, 2 do
  remaining[#remaining + 1] = tonumber(permits[i]) - nowMs
end
return remaining
`,
);
