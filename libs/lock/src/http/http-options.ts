import { InvalidArgumentError, type LockErrorCode } from '../lock.errors.js';
import { LONGEST_DURATION } from '../options/durations.js';
import { describe } from '../options/validation.js';

/** The default JSON body of an answer `LockInterceptor` gives for a decorator's error. */
export interface LockErrorBody {
  statusCode: number;
  error: string;
  /** The error's stable `code`: `LOCK_TIMEOUT`, `SEMAPHORE_TIMEOUT`, `BACKEND_UNAVAILABLE`, … */
  code: LockErrorCode;
  message: string;
  /** `LOCK_TIMEOUT` and backend errors: the lock key (or semaphore name) involved. */
  key?: string;
  /** `SEMAPHORE_TIMEOUT`: the semaphore and its limit. */
  semaphore?: string;
  limit?: number;
  /** `INVALID_ARGUMENT`: what was wrong, e.g. `key`. */
  argument?: string;
}

/**
 * `Retry-After` of a 503 when neither the module nor the decorator says otherwise. Not derived from
 * the wait policy: the caller already waited its `timeout`, and when a permit frees up or Redis
 * comes back is unknown; one second spreads retries without making clients wait long.
 */
export const DEFAULT_RETRY_AFTER_SECONDS = 1;

/** `Retry-After` takes whole seconds. */
export function validateRetryAfter(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > LONGEST_DURATION) {
    throw new InvalidArgumentError('retryAfter', `must be a whole number of seconds ≥ 0, got ${describe(value)}`);
  }
  return value;
}
