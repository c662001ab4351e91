import { errorMessage, LockBackendError } from '../../lock.errors.js';

/**
 * Reply errors that pass by themselves (a failover, a load, a busy script, memory pressure):
 * retried like an outage. Any other reply error (`WRONGTYPE`, `NOPERM`, a script error) would only
 * be answered again, so it is raised at once as `BACKEND_ERROR`.
 */
const TRANSIENT_REPLY = /^(READONLY|LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|BUSY|OOM|NOREPLICAS|MISCONF)\b/;

/** What each store operation was for, in the words of the caller: `could not take lock "k"`. */
const PURPOSES: Record<string, (key: string) => string> = {
  acquireLock: (key) => `take lock "${key}"`,
  releaseLock: (key) => `release lock "${key}"`,
  extendLock: (key) => `renew lock "${key}"`,
  EXISTS: (key) => `check lock "${key}"`,
  inspectLock: (key) => `inspect lock "${key}"`,
  forceReleaseLock: (key) => `force-release lock "${key}"`,
  acquirePermit: (name) => `take a permit of semaphore "${name}"`,
  releasePermit: (name) => `release a permit of semaphore "${name}"`,
  extendPermit: (name) => `renew a permit of semaphore "${name}"`,
  countPermits: (name) => `count the permits of semaphore "${name}"`,
  listPermits: (name) => `list the permits of semaphore "${name}"`,
  renewal: (id) => `renew the lease of "${id}"`,
  'renewal pipeline': (id) => `renew the leases of "${id}" and others`,
  QUIT: () => 'close the connection',
};

/** `take lock "k"`; an operation without a phrase of its own (a renewal batch, QUIT) is named as it is. */
export function purposeOf(operation: string, key: string): string {
  return PURPOSES[operation]?.(key) ?? (key === '' ? operation : `${operation} "${key}"`);
}

/** The command did not answer within `commandTimeout`. */
export function unansweredError(operation: string, key: string, commandTimeout: number): LockBackendError {
  const message = `Redis did not answer within ${commandTimeout} ms: could not ${purposeOf(operation, key)}`;
  return new LockBackendError(message, key || undefined);
}

/**
 * A client error as users read it: what could not be done and why, in one line; the client's own
 * error (ioredis's message, its stack) stays in `cause`. `BACKEND_ERROR` for a reply error that
 * would only come again, else `BACKEND_UNAVAILABLE`.
 */
export function backendErrorOf(error: unknown, operation: string, key: string): LockBackendError {
  if (error instanceof LockBackendError) return error;
  const purpose = purposeOf(operation, key);
  const reply = error instanceof Error && error.name === 'ReplyError' ? errorMessage(error) : undefined;
  if (reply === undefined) {
    return new LockBackendError(`Redis is unreachable: could not ${purpose}`, key, { cause: error });
  }
  const transient = TRANSIENT_REPLY.exec(reply);
  if (transient !== null) {
    return new LockBackendError(`Redis is not serving requests (${transient[1]}): could not ${purpose}`, key, {
      cause: error,
    });
  }
  // The server's own words matter here (WRONGTYPE: another value sits at the key): they stay in the message.
  return new LockBackendError(`Redis refused to ${purpose}: ${reply}`, key, { cause: error, code: 'BACKEND_ERROR' });
}
