import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { errorMessage } from './lock.errors.js';
import {
  type LeaseDefaults,
  type LeaseOptions,
  positive,
  resolveLease,
  validateKey,
  validateSignal,
} from './lock.options.js';
import type { LeaseKind, LockStore } from './store/store.js';
import { type Pause, sleep, waitForLease } from './wait-for-lease.js';

const logger = new Logger('nest-lock');

/** A failed release is logged, never thrown over the caller's result or error: the lease runs out on its own. */
export function warnReleaseFailed(subject: string, error: unknown): void {
  logger.warn(`Could not release ${subject} (${errorMessage(error)}); its lease will expire on its own`);
}

/** What a held lock and a held permit have in common: a token, a lease, and one release. */
export abstract class HeldLease {
  /** Set once given back, so that a second release changes nothing even with a reused token. */
  private released = false;

  constructor(
    /** Owner token: 128 random bits, fresh for every acquisition, unless the caller supplied one. */
    readonly token: string,
    /** Milliseconds spent waiting before the lease was granted (exactly 0 when it was free). */
    readonly elapsed: number,
    private readonly ttl: number,
  ) {}

  /** `false` once released through this object. */
  get active(): boolean {
    return !this.released;
  }

  /** Resets the remaining lease to `ttl` (default: the ttl it was taken with); `false` if no longer ours. */
  async expire(ttl: number = this.ttl): Promise<boolean> {
    positive('ttl', ttl);
    if (this.released) return false;
    return this.renew(ttl);
  }

  /** Releases, logging a failure instead of throwing it (withLock, withPermit, `await using`). */
  async releaseQuietly(): Promise<void> {
    await this.releaseOnce().catch((error: unknown) => warnReleaseFailed(this.subject, error));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.releaseQuietly();
  }

  /** `true`: given back by us; `false`: no longer ours (expired or taken), or already released. */
  protected async releaseOnce(): Promise<boolean> {
    if (this.released) return false;
    const released = await this.giveBack();
    this.released = true;
    return released;
  }

  /** What is held, for log messages, e.g. `lock "order:42"`. */
  protected abstract get subject(): string;
  protected abstract giveBack(): Promise<boolean>;
  protected abstract renew(ttl: number): Promise<boolean>;
}

/** One lease to take: a lock key or a semaphore name, and how the store takes and gives it back. */
export interface LeaseRequest {
  kind: LeaseKind;
  /** The lock key or semaphore name. */
  id: string;
  options: LeaseOptions & { token?: string };
  attempt(token: string, ttl: number): Promise<boolean>;
  release(token: string): Promise<boolean>;
}

export type LeaseGrant = { token: string; elapsed: number; ttl: number };

/**
 * Validates a request and runs the shared wait loop for it. Resolves with the grant, or with
 * how long it waited when the timeout passed; the caller turns that into its own error.
 */
export async function acquireLease(
  store: LockStore,
  defaults: Readonly<LeaseDefaults>,
  request: LeaseRequest,
): Promise<LeaseGrant | { waited: number }> {
  const { kind, id, options } = request;
  validateKey(kind === 'lock' ? 'key' : 'name', id);
  const lease = resolveLease(defaults, options);
  const signal = validateSignal(options.signal);
  const token = options.token === undefined ? createOwnerToken() : validateKey('token', options.token);

  const start = performance.now();
  const pause: Pause = store.waitForRelease
    ? (ms, abortSignal) => store.waitForRelease!(kind, id, ms, abortSignal)
    : sleep;
  const elapsed = await waitForLease(
    { attempt: () => request.attempt(token, lease.ttl), release: () => request.release(token) },
    lease,
    pause,
    signal,
  );
  if (elapsed === null) return { waited: performance.now() - start };
  return { token, elapsed, ttl: lease.ttl };
}

/** 128 random bits, fresh for every acquisition, so that no two owners ever share a token. */
function createOwnerToken(): string {
  return randomBytes(16).toString('base64url');
}
