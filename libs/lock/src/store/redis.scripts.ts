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
 * Takes the lock, or confirms that `token` already holds it.
 * KEYS[1] lock key; ARGV[1] owner token, ARGV[2] ttl in ms. Returns 1 if held by the token now, else 0.
 * The second branch makes a retry idempotent: an attempt whose reply was lost (command timeout)
 * may have taken the lock, and the same token must not then wait for its own lease to run out.
 */
export const acquireLockScript = script(
  'acquireLock',
  1,
  `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`,
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
