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

/**
 * The next fence of a lock or semaphore: INCR of its counter, which never expires. A counter that
 * is missing (first use, or lost to a restart without persistence or a FLUSHALL) starts from the
 * server's clock in microseconds, above any fence it can have handed out before (that would take
 * more than one acquisition per microsecond since), so fences keep increasing even then.
 * Expects the counter's key in `counter`.
 */
const nextFence = `
if redis.call('EXISTS', counter) == 0 then
  local time = redis.call('TIME')
  redis.call('SET', counter, time[1] .. string.format('%06d', tonumber(time[2])))
end
return redis.call('INCR', counter)
`;

/**
 * Takes the lock, or confirms that `token` already holds it, and hands out its fence.
 * KEYS[1] lock key, KEYS[2] its fence counter; ARGV[1] owner token, ARGV[2] ttl in ms.
 * Returns the fence (≥ 1) if held by the token now, else 0.
 * The second branch makes a retry idempotent: an attempt whose reply was lost (command timeout)
 * may have taken the lock, and the same token must not then wait for its own lease to run out
 * (it gets a new fence: the lost reply's fence was never seen by anyone).
 */
export const acquireLockScript = script(
  'acquireLock',
  2,
  `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local counter = KEYS[2]
${nextFence}`,
);

/**
 * Compare-and-delete: frees the lock only for its owner, so that a holder whose lease ran out
 * never deletes the lock someone else took since.
 * KEYS[1] lock key; ARGV[1] owner token. Returns 1 if deleted, else 0.
 */
export const releaseLockScript = script(
  'releaseLock',
  1,
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
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
redis.call('PEXPIREAT', KEYS[1], last[2])
`;

/**
 * Drops expired permits, then adds `token` if fewer than `limit` remain (or renews it if it is
 * already there: a retry after a lost reply), and hands out its fence.
 * KEYS[1] semaphore set, KEYS[2] its fence counter; ARGV[1] permit token, ARGV[2] limit, ARGV[3] ttl in ms.
 * Returns the fence (≥ 1) if the token holds a permit now, else 0.
 */
export const acquirePermitScript = script(
  'acquirePermit',
  2,
  `${serverNowMs}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
${expireWithLastLease}
local counter = KEYS[2]
${nextFence}`,
);

/**
 * Gives a permit back; a permit whose lease already ran out is dropped but reported as not ours.
 * KEYS[1] semaphore set; ARGV[1] permit token. Returns 1 if an unexpired permit was released, else 0.
 */
export const releasePermitScript = script(
  'releasePermit',
  1,
  `${serverNowMs}
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not deadline then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
if tonumber(deadline) > now then
  return 1
end
return 0
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
