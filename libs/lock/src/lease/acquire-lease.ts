import { randomBytes } from 'node:crypto';
import { type LeaseDefaults, type LockOptions, resolveLease, validateCallOptions } from '../lock.options.js';
import type { LeaseKind, LockStore } from '../store/store.js';
import type { LeaseGrant } from './held-lease.js';
import { type Pause, sleep, waitForLease } from './wait-for-lease.js';

/** One lease to take: a lock key or a semaphore name, and how the store takes and gives it back. */
export interface LeaseRequest {
  kind: LeaseKind;
  /** The lock key or semaphore name (validated by the caller). */
  id: string;
  /** Per-call options; for semaphores without `token`. */
  options: LockOptions;
  /** One attempt: the fence when granted, `0` when taken. */
  attempt(token: string, ttl: number): Promise<number>;
  release(token: string): Promise<boolean>;
}

/**
 * Validates a request's options and runs the shared wait loop for it. Resolves with the grant,
 * or with how long it waited when the timeout passed; the caller turns that into its own error.
 */
export async function acquireLease(
  store: LockStore,
  defaults: Readonly<LeaseDefaults>,
  request: LeaseRequest,
): Promise<LeaseGrant | { waited: number }> {
  const { kind, id, options } = request;
  validateCallOptions(kind, options);
  const policy = resolveLease(defaults, options);
  const token = options.token ?? createOwnerToken();

  const start = performance.now();
  const pause: Pause = store.waitForRelease
    ? (ms, abortSignal) => store.waitForRelease!(kind, id, ms, abortSignal)
    : sleep;
  const won = await waitForLease(
    { attempt: () => request.attempt(token, policy.ttl), release: () => request.release(token) },
    policy,
    pause,
    options.signal,
  );
  if (won === null) return { waited: performance.now() - start };
  return { token, ttl: policy.ttl, ...won };
}

/** 128 random bits, fresh for every acquisition, so that no two owners ever share a token. */
function createOwnerToken(): string {
  return randomBytes(16).toString('base64url');
}
