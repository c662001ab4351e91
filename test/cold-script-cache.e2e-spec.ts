import { describe, expect, it } from '@jest/globals';
import { LockBackendError } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { lockKind, LockStore } from './support/kinds.js';
import { uniqueKey, useLockApp } from './support/lock-app.js';
import { lockKeyOf } from './support/redis-keys.js';
import { useRedisClient } from './support/redis-server.js';

/*
 * Found by the outside review of issue 21's first round; each case failed before its fix.
 *
 * The uncontended acquire is a plain `SET key token NX PX ttl`. When its reply does not come within
 * `commandTimeout` (a frozen or stalled server), the caller gives up and sends a release after it, on
 * the same connection, to undo what it may still take. That release is a script called by EVALSHA; on
 * a server whose script cache is empty (a fresh server, a restart, a failover, SCRIPT FLUSH) it is
 * answered NOSCRIPT once the server resumes — after the command's deadline, so it is not re-sent as
 * EVAL. The SET NX, which needs no script, has been applied meanwhile: the key stayed held by a token
 * nobody holds, for the whole ttl. (Before the one-command acquire every attempt was itself a script
 * — EVALSHA, NOSCRIPT too — so nothing was taken.) The undoing release now goes by EVAL at once.
 *
 * README: "`signal` (an AbortSignal: aborting ends the wait and rejects with the signal's reason;
 * nothing stays held)"; "If an attempt timed out, a release with the same token is sent after it, so
 * even a frozen server that wakes up later keeps nothing."
 */

const COMMAND_TIMEOUT = 150;

describe('a one-command acquire sent to a frozen server with an empty script cache', () => {
  const app = useLockApp('redis', { commandTimeout: COMMAND_TIMEOUT });
  const locks = () => app().locks;
  /** A plain client beside the library, to empty the script cache and look at the key. */
  const redis = useRedisClient(() => app().server!);

  /** Empties the script cache, freezes Redis, runs `call` until it settles, waits past the release's deadline, thaws. */
  async function frozenWithColdScripts(call: (key: string) => Promise<unknown>) {
    const key = uniqueKey('cold');
    await redis().script('FLUSH');
    app().server!.pause();
    let outcome: unknown;
    try {
      outcome = await call(key).then(
        () => 'granted',
        (error: { name?: string }) => error.name,
      );
      // The release sent after the acquisition times out too while Redis is still frozen.
      await delay(3 * COMMAND_TIMEOUT + 200);
    } finally {
      app().server!.resume();
    }
    // Sent after everything the library sent: the server has applied it all when it answers.
    await redis().ping();
    await delay(100);
    return { outcome, leftOnRedis: await redis().get(lockKeyOf(key)), isLocked: await locks().isLocked(key) };
  }

  it('lock() aborted by its AbortSignal leaves no lock behind', async () => {
    const result = await frozenWithColdScripts((key) =>
      locks().lock(key, { ttl: 30_000, signal: AbortSignal.timeout(50) }),
    );
    expect(result).toEqual({ outcome: 'TimeoutError', leftOnRedis: null, isLocked: false });
  });

  it('lock() that fails at its deadline leaves no lock behind', async () => {
    const result = await frozenWithColdScripts((key) => locks().lock(key, { ttl: 30_000, timeout: 200 }));
    expect(result).toEqual({ outcome: 'LockBackendError', leftOnRedis: null, isLocked: false });
  });

  it('tryLock() that fails leaves no lock behind', async () => {
    const result = await frozenWithColdScripts((key) => locks().tryLock(key, { ttl: 30_000 }));
    expect(result).toEqual({ outcome: 'LockBackendError', leftOnRedis: null, isLocked: false });
  });
});

/*
 * A script answered NOSCRIPT after its caller gave up (its deadline passed, or its signal aborted) is
 * not sent again (it would come after the caller's next commands): it did not run, nothing was
 * applied, and trying again later will send it anew. Seen in the Cluster failover test: a command
 * slowed by the failover met the promoted replica's empty script cache after its deadline, and the
 * caller was told BACKEND_ERROR ("retrying cannot fix it"), not BACKEND_UNAVAILABLE.
 */
describe('a script the server no longer knows, answered after its caller gave up', () => {
  const app = useLockApp('redis', { commandTimeout: COMMAND_TIMEOUT });
  const redis = useRedisClient(() => app().server!);

  it('is a transient failure (BACKEND_UNAVAILABLE): it did not run, and a later attempt sends it anew', async () => {
    const store = app().module.get<LockStore>(LockStore);
    const key = uniqueKey('noscript-late');
    await redis().script('FLUSH');
    const gaveUp = AbortSignal.abort(new Error('the caller gave up'));
    const options = { fair: true, liveness: 1_000, inLine: false, signal: gaveUp };

    const error = await store
      .acquire(lockKind, key, 'write', 'late', 10_000, options)
      .catch((failure: unknown) => failure);

    expect(error).toBeInstanceOf(LockBackendError);
    expect(error).toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    expect((error as LockBackendError).transient).toBe(true);
    expect(await redis().exists(lockKeyOf(key))).toBe(0);
  });
});
