import { errorMessage, LockBackendError } from '../../lock.errors.js';
import { type ConnectionState, misconfigurationOf } from './connection-state.js';

/**
 * Reply errors that pass by themselves (a failover, a load, a busy script, memory pressure):
 * retried like an outage. `NOSCRIPT` reaches a caller only when its script was not sent again (the
 * caller had given up on it): it did not run, and the next attempt sends it anew. Any other reply
 * error (`WRONGTYPE`, a script error; `NOPERM` and the like: `BACKEND_MISCONFIGURED`) would only be
 * answered again, so it is raised at once.
 */
const TRANSIENT_REPLY = /^(READONLY|LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|BUSY|OOM|NOREPLICAS|MISCONF|NOSCRIPT)\b/;

/**
 * The command did not answer within `commandTimeout`. `purpose`: what it was for, in the words of the
 * caller (`take lock "k"`, a kind's `purposes`).
 */
export function unansweredError(purpose: string, key: string, commandTimeout: number): LockBackendError {
  return new LockBackendError(
    `Redis did not answer within ${commandTimeout} ms: could not ${purpose}`,
    key || undefined,
  );
}

/**
 * Redis refuses this client's configuration (`misconfiguration`: the reply's text): raised at once,
 * not retried, until the configuration is fixed.
 */
export function misconfiguredError(misconfiguration: string, purpose: string, key: string): LockBackendError {
  return new LockBackendError(
    `Redis refuses this client (${misconfiguration}): could not ${purpose}. ` +
      'Check the password, user and database of the redis option',
    key || undefined,
    { code: 'BACKEND_MISCONFIGURED', retryable: false },
  );
}

/**
 * A client error as users read it: what could not be done (`purpose`) and why, in one line, with
 * since when and why the connection is down when it is (`connection`); the client's own error
 * (ioredis's message, its stack) stays in `cause`. `BACKEND_MISCONFIGURED` for a reply refusing this
 * client's configuration, `BACKEND_ERROR` for another reply error that would only come again, else
 * `BACKEND_UNAVAILABLE`.
 */
export function backendErrorOf(
  error: unknown,
  purpose: string,
  key: string,
  connection?: ConnectionState,
): LockBackendError {
  if (error instanceof LockBackendError) return error;
  const reply = error instanceof Error && error.name === 'ReplyError' ? errorMessage(error) : undefined;
  if (reply === undefined) {
    const down = connection?.outage;
    const why = down === undefined ? '' : ` (since ${new Date(down.since).toISOString()}: ${down.reason})`;
    return new LockBackendError(`Redis is unreachable${why}: could not ${purpose}`, key, { cause: error });
  }
  const misconfiguration = misconfigurationOf(error);
  if (misconfiguration !== undefined) return misconfiguredError(misconfiguration, purpose, key);
  const transient = TRANSIENT_REPLY.exec(reply);
  if (transient !== null) {
    return new LockBackendError(`Redis is not serving requests (${transient[1]}): could not ${purpose}`, key, {
      cause: error,
    });
  }
  // The server's own words matter here (WRONGTYPE: another value sits at the key): they stay in the message.
  return new LockBackendError(`Redis refused to ${purpose}: ${reply}`, key, { cause: error, code: 'BACKEND_ERROR' });
}
