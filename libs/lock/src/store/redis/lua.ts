import type { PublishCommand } from './script.js';

/**
 * Lua shared by the scripts of every kind of lease, on one Redis and on every Redlock master: the
 * server's clock, the fence rule, and the line of waiters. Each is a named part a script includes,
 * after its KEYS and ARGV headers (the parts read the locals they bind: `redis-layout.ts`).
 */

/** The server's clock (TIME): clients with skewed clocks agree on it. Returns ms and µs. */
export const SERVER_TIME = `
local function serverTime()
  local time = redis.call('TIME')
  local micros = tonumber(time[1]) * 1000000 + tonumber(time[2])
  return math.floor(micros / 1000), micros
end
`;

/**
 * The fence rule (needs `SERVER_TIME`): the next fence of the counter at key `counter` is the server
 * clock in microseconds, or one more than the last fence when that is ahead. It increases even when
 * the counter was lost (a restart without persistence, a FLUSHALL) or restored from an older
 * snapshot, as long as the server clock does not go back. The counter only matters while fences are
 * drawn faster than the clock ticks: it expires `counterTtl` ms after the last fence, when the clock
 * is that far past it (docs/API.md, "Fences"). SET … GET reads the last fence and writes the next in
 * one command; drawn before a lease is written, a counter of the wrong type fails the script before
 * it takes anything. '%.0f': Lua would write a number this large in exponent notation, rounded.
 */
export const FENCE_RULE = `
local function drawFence(counter, counterTtl)
  local _, micros = serverTime()
  local last = tonumber(redis.call('SET', counter, string.format('%.0f', micros), 'GET', 'PX', counterTtl)) or 0
  if last < micros then return micros end
  redis.call('SET', counter, string.format('%.0f', last + 1), 'PX', counterTtl)
  return last + 1
end
`;

/**
 * Who stands in the line of a lease, on one Redis (needs `SERVER_TIME` and the keys of `lineKeys`):
 * `line`, the fair waiters in order of arrival (token → server clock in µs); `alive`, every waiter,
 * fair or not (token → deadline in ms), which a waiter pushes back with each attempt; `waiters`, what
 * each waiter asked for (token → `<ttl> <process>`: its ttl, which bounds a lease handed to it, and the
 * wake-up channel suffix of its process; a kind may add a word of its own: a lock marks its readers).
 * A waiter that stops attempting (it died, or gave up without being able to say so) drops out once its
 * deadline passes, so it never blocks the line. A kind may keep what else each waiter asked for in a
 * hash by token of its own, `asked` (a semaphore's limits), which leaves and drops out with the waiter.
 */
const LINE_MEMBERSHIP = `
-- Set by a kind that keeps what else each waiter asked for (a hash by token), after the line's parts.
local asked

local function leaveLine(token)
  redis.call('ZREM', line, token)
  redis.call('ZREM', alive, token)
  redis.call('HDEL', waiters, token)
  if asked then redis.call('HDEL', asked, token) end
end

local function dropGoneWaiters(nowMs)
  local gone = redis.call('ZRANGEBYSCORE', alive, '-inf', nowMs)
  if #gone > 0 then
    redis.call('ZREM', line, unpack(gone))
    redis.call('ZREM', alive, unpack(gone))
    redis.call('HDEL', waiters, unpack(gone))
    if asked then redis.call('HDEL', asked, unpack(gone)) end
  end
end

-- The sets expire only once every waiter in them is gone: a waiter may lengthen their life, never
-- shorten it (one that may wait less than another would drop the other out of line, unwoken).
-- PTTL rather than PEXPIRE's GT option, which needs Redis 7.
local function outlive(set, ms)
  if redis.call('PTTL', set) < ms then redis.call('PEXPIRE', set, ms) end
end

-- A fair waiter's place in line; every waiter's liveness, and its ttl and process, then what else the
-- kind records of it (\`process\` may go on: '<process> <more>').
local function join(token, fair, nowMs, nowMicros, liveMs, ttl, process)
  if fair then
    redis.call('ZADD', line, 'NX', nowMicros, token)
    outlive(line, liveMs * 2)
  end
  redis.call('ZADD', alive, nowMs + liveMs, token)
  outlive(alive, liveMs * 2)
  redis.call('HSET', waiters, token, ttl .. ' ' .. process)
  outlive(waiters, liveMs * 2)
end
`;

/**
 * The fences a line hands out and tells of (needs `FENCE_RULE`, `counter`, and `fenceCounterTtl` from
 * the script's ARGV header: every script that hands leases over binds it).
 */
const LINE_FENCES = `
local function nextFence()
  return drawFence(counter, fenceCounterTtl)
end

-- A bound of every fence this key issued so far: a waiter told to wait compares it with the fence of
-- a handover message, which is above it only if the handover came after this attempt. The counter, or
-- the server clock in µs when that is ahead: a counter expires only once the clock is past its last
-- fence (FENCE_RULE), and a fence drawn later is at least the clock then. Without the clock, an expired
-- counter would read 0, and a message of any earlier handover would pass for a fresh one.
local function lastFence()
  local _, micros = serverTime()
  local counted = tonumber(redis.call('GET', counter)) or 0
  return string.format('%.0f', math.max(counted, micros))
end
`;

/**
 * Handing the lease to a waiter (needs `LINE_MEMBERSHIP` and `LINE_FENCES`). A release publishes to the
 * waiter's own process only, on `<wake-up channel>:<process>` (the lease's channel, `…:wake`, with the
 * suffix its process subscribes to): `<token> <fence> <lease ms>` tells one waiter the lease was handed
 * to it and for how long it was written — by a releaser whose settings may differ from the waiter's,
 * so the message says it. The other waiting processes hear nothing.
 */
function handingOver(publish: PublishCommand): string {
  return `
-- How long a lease handed to \`waiter\` lasts until it extends it to its own ttl: the handover lease, or
-- that ttl when it is shorter (\`ttl\`, or as the waiter asked when it joined the line), so that a
-- waiter that dies at once never blocks the others for longer than its own ttl.
local function handoverFor(waiter, handoverMs, ttl)
  local wanted = tonumber(ttl) or tonumber(string.match(redis.call('HGET', waiters, waiter) or '', '^%d+'))
  if wanted and wanted < tonumber(handoverMs) then return wanted end
  return tonumber(handoverMs)
end

-- The channel \`waiter\`'s process listens on (recorded with its place in line), read before the waiter
-- leaves the line; nil when nothing is recorded: such a waiter finds the lease at its next attempt.
local function channelOf(channel, waiter)
  local process = string.match(redis.call('HGET', waiters, waiter) or '', '^%S+ (%S+)')
  return process and (channel .. ':' .. process)
end

-- Tells one waiter, which leaves the line, that the lease is its own now, with the fence of its lease
-- and the \`ms\` it was written for (the waiter's own settings may make another handover lease).
local function handTo(channel, waiter, ms)
  local to = channelOf(channel, waiter)
  leaveLine(waiter)
  if to then redis.call('${publish}', to, waiter .. ' ' .. string.format('%.0f', nextFence()) .. ' ' .. ms) end
end

-- Whether a release may hand its lease to the successor its caller names (a waiter of the releasing
-- process): when the successor may go ahead of the line, is first in it, or nobody is in line.
local function successorFirst(successor, jump)
  if jump then return true end
  local first = redis.call('ZRANGE', line, 0, 0)[1]
  return not first or first == successor
end
`;
}

/**
 * Waking an unordered waiter (needs `handingOver`'s `channelOf`): `<token> 0 0` on its process's
 * channel wakes it to try for the lease.
 */
function waking(publish: PublishCommand): string {
  return `
-- Wakes one unordered waiter (not in the line), the one whose last attempt is the oldest, to try for
-- the lease: '<token> 0 0'. One release, one attempt — not one per process, nor a stampede. The waiter
-- leaves alive, and joins again if its attempt is refused: the next release wakes another (an attempt
-- on its way keeps the old place until it runs), and a waiter that died is not woken twice. Looks at
-- the first few of alive only: a release never walks a long set (the others attempt within their step).
local function wake(channel)
  for _, waiter in ipairs(redis.call('ZRANGE', alive, 0, 15)) do
    if not redis.call('ZSCORE', line, waiter) then
      local to = channelOf(channel, waiter)
      leaveLine(waiter)
      if to then redis.call('${publish}', to, waiter .. ' 0 0') end
      return
    end
  end
end
`;
}

/**
 * The line of waiters, on one Redis: its named parts together, after the script's KEYS header (the keys
 * of `lineKeys`) and its ARGV header (`fenceCounterTtl`).
 */
export function waiterLine(publish: PublishCommand): string {
  return `${SERVER_TIME}${FENCE_RULE}${LINE_MEMBERSHIP}${LINE_FENCES}${handingOver(publish)}${waking(publish)}`;
}
