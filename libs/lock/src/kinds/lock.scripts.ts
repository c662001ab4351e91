import { FENCE_RULE, SERVER_TIME, waiterLine } from '../store/redis/lua.js';
import { type PublishCommand, script } from '../store/redis/script.js';

/**
 * The scripts of a lock on one Redis: KEYS[1] is the lock itself, a string holding the owner's
 * token with the lease as its expiry; KEYS[2] its fence counter, KEYS[3] the line, KEYS[4] alive,
 * KEYS[5] what each waiter asked for (see `waiterLine`). ARGV as `RedisLayout` lists them; the lock
 * takes no request arguments.
 */

/**
 * What follows a lock's release (by its holder or an operator): the lock goes to the first fair
 * waiter in line, set to its token for a handover lease (no longer than its ttl) it extends once
 * told, or is freed and one unordered waiter is woken.
 */
function passOn(publish: PublishCommand): string {
  return `${waiterLine(publish)}
local function passOn(handoverMs, channel)
  dropGoneWaiters(serverTime())
  local first = redis.call('ZRANGE', line, 0, 0)[1]
  if first then
    redis.call('SET', lease, first, 'PX', handoverFor(first, handoverMs))
    handTo(channel, first)
  else
    redis.call('DEL', lease)
    wake(channel)
  end
end
`;
}

/**
 * One attempt to take the lock; with the line of waiters (fair) or without. Returns 1 when the token
 * holds the lock now; else {ms the holder's lease still runs, the last fence issued}. No fence is
 * drawn: `fenceLockScript` draws one when the holder asks.
 * - The fast path is one SET NX PX (unless fair waiters are in line: they come first).
 * - "Held by this token already" counts as granted: a retry after a lost reply, or a waiter that
 *   missed the message telling it the lock was handed to it.
 * - A free lock with a fair waiter ahead of the caller (its holder's lease ran out, or a handover
 *   to a waiter that was gone expired) is handed to that waiter now, and the caller joins the line.
 */
export const acquireLockScript = script(
  'acquireLock',
  5,
  (publish) => `${waiterLine(publish)}
local token, ttl, fair = ARGV[1], ARGV[2], ARGV[3] == '1'
local waitMs, inLine = tonumber(ARGV[4]), ARGV[5] == '1'
counterTtl = ARGV[8]
if not fair or redis.call('EXISTS', line) == 0 then
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
if not holder then
  local ahead = fair and redis.call('ZRANGE', line, 0, 0)[1]
  if not ahead or ahead == token then
    redis.call('SET', lease, token, 'PX', ttl)
    leaveLine(token)
    return 1
  end
  redis.call('SET', lease, ahead, 'PX', handoverFor(ahead, ARGV[6]))
  handTo(ARGV[7], ahead)
end
if waitMs > 0 then join(token, fair, nowMs, nowMicros, waitMs, ttl, ARGV[9]) end
return {redis.call('PTTL', lease), lastFence()}
`,
);

/**
 * Draws the fence of the lock the token holds (the fence rule, `FENCE_RULE`): only while it holds
 * it, so that fences increase in the order the lock was held. KEYS[1] the lock, KEYS[2] its fence
 * counter; ARGV[1] owner token, ARGV[2] fence counter ttl ms. Returns the fence, or 0 when the token
 * does not hold the lock (nothing is drawn).
 */
export const fenceLockScript = script(
  'fenceLock',
  2,
  `${SERVER_TIME}${FENCE_RULE}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return drawFence(KEYS[2], ARGV[2])
`,
);

/**
 * Releases the lock if the token holds it: hands it to a successor the caller names (a waiter of the
 * same process, whose turn is open: see `Successor`) — if it may go ahead of the line, or is first
 * in it, or nobody is in line — without a message and without a fence (the caller tells it; its
 * holder draws a fence when it asks: {1, -1}); else straight to the
 * first fair waiter in line (the lock is set to that waiter's token for a short handover lease, which
 * the waiter extends to its own ttl once told), or frees it and wakes the other waiters. A token
 * that does not hold the lock leaves the line (a waiter giving up).
 */
export const releaseLockScript = script(
  'releaseLock',
  5,
  (publish) => `
-- The common case first, before the shared functions below are made (each call makes them anew):
-- the token holds the lock, no successor is named and nobody waits. Compare and delete.
if not ARGV[5] and redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[4]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
${passOn(publish)}
local token, successor = ARGV[1], ARGV[5]
counterTtl = ARGV[4]
if redis.call('GET', lease) ~= token then
  leaveLine(token)
  return 0
end
if successor and successorFirst(successor, ARGV[6] == '1') then
  redis.call('SET', lease, successor, 'PX', handoverFor(successor, ARGV[2], ARGV[7]))
  leaveLine(successor)
  -- Passed without a fence (PASSED_WITHOUT_FENCE): the caller tells its successor.
  return {1, -1}
end
if redis.call('EXISTS', alive) == 0 then
  redis.call('DEL', lease)
  return 1
end
passOn(ARGV[2], ARGV[3])
return 1
`,
);

/** Compare-and-pexpire: resets the lease only for its owner. */
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

/** Whether the lock is held: 1 or 0 (EXISTS, one read). */
export const countLockScript = script(
  'countLock',
  1,
  `
return redis.call('EXISTS', KEYS[1])
`,
);

/**
 * Reads a lock without touching it: its remaining lease and its fence counter.
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
 * An operator's release of a lock, whoever holds it: the same as `releaseLockScript` for the
 * holder's token — the lock goes to the first fair waiter in line (for a handover lease), or is
 * freed and the waiters are woken — without knowing the token. The holder finds it gone at its
 * next renewal (a lost lease).
 */
export const forceReleaseLockScript = script(
  'forceReleaseLock',
  5,
  (publish) => `${passOn(publish)}
counterTtl = ARGV[3]
if not redis.call('GET', lease) then
  return 0
end
passOn(ARGV[1], ARGV[2])
return 1
`,
);
