import { LockBackendError } from '../../lock.errors.js';
import { LONGEST_DURATION } from '../../options/durations.js';
import type { Attempt, LeaseKind, LeaseRenewal, LockInspection, LockStore, Turn } from '../store.js';

interface Lease {
  /** `performance.now()` at which the lease ends. */
  deadline: number;
  /** Frees the lease at its deadline so that waiters wake; unref'd, it never holds the process open. */
  expiry?: NodeJS.Timeout;
}

interface LockLease extends Lease {
  token: string;
}

/**
 * The embedded store: the same lease semantics as `RedisStore`, inside one process.
 * Waiters are woken the moment a lease is released or expires. Being one process, it needs no
 * line of its own for fair waiting: the waiters of a process already queue in order before they
 * attempt (see `lease/local-line.ts`), and nothing is ever handed over.
 */
export class MemoryStore implements LockStore {
  readonly handoverLease = 0;

  private readonly locks = new Map<string, LockLease>();
  /** Semaphore name → permit token → lease. */
  private readonly semaphores = new Map<string, Map<string, Lease>>();
  private readonly sleepers = new Map<string, Set<() => void>>();
  private lastFence = 0;
  /** The fence of each held lock, for `inspectLock` (forgotten on release: nothing kept per key). */
  private readonly lockFences = new Map<string, number>();
  private closed = false;

  async acquireLock(key: string, token: string, ttl: number): Promise<Attempt> {
    const holder = this.liveLock(key);
    if (holder !== undefined && holder.token !== token)
      return { fence: 0, retryIn: holder.deadline - performance.now() };
    this.grantLock(key, token, ttl);
    const fence = this.nextFence();
    this.lockFences.set(key, fence);
    return { fence, retryIn: 0 };
  }

  async releaseLock(key: string, token: string): Promise<boolean> {
    if (this.liveLock(key)?.token !== token) return false;
    this.freeLock(key);
    return true;
  }

  async extendLock(key: string, token: string, ttl: number): Promise<boolean> {
    if (this.liveLock(key)?.token !== token) return false;
    this.grantLock(key, token, ttl);
    return true;
  }

  async isLocked(key: string): Promise<boolean> {
    return this.liveLock(key) !== undefined;
  }

  async acquirePermit(name: string, token: string, limit: number, ttl: number): Promise<Attempt> {
    const permits = this.livePermits(name);
    if (!permits.has(token) && permits.size >= limit) {
      const firstDeadline = Math.min(...[...permits.values()].map((lease) => lease.deadline));
      return { fence: 0, retryIn: firstDeadline - performance.now() };
    }
    this.grantPermit(name, token, ttl);
    return { fence: this.nextFence(), retryIn: 0 };
  }

  async releasePermit(name: string, token: string): Promise<boolean> {
    if (!this.livePermits(name).has(token)) return false;
    this.freePermit(name, token);
    return true;
  }

  async extendPermit(name: string, token: string, ttl: number): Promise<boolean> {
    if (!this.livePermits(name).has(token)) return false;
    this.grantPermit(name, token, ttl);
    return true;
  }

  async countPermits(name: string): Promise<number> {
    return this.livePermits(name).size;
  }

  async extendLeases(leases: readonly LeaseRenewal[]): Promise<(boolean | LockBackendError)[]> {
    return Promise.all(
      leases.map(({ kind, id, token, ttl }) =>
        (kind === 'lock' ? this.extendLock(id, token, ttl) : this.extendPermit(id, token, ttl)).catch(
          (error: LockBackendError) => error,
        ),
      ),
    );
  }

  /** Releases here never hand a lease over; they wake every waiter, so a wait lasts up to its limit. */
  openTurn(kind: LeaseKind, key: string): Turn {
    return { wait: (wait, signal) => this.sleep(channelOf(kind, key), wait.limit, signal), close: () => undefined };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const lease of this.locks.values()) clearTimeout(lease.expiry);
    for (const permits of this.semaphores.values()) for (const lease of permits.values()) clearTimeout(lease.expiry);
    this.locks.clear();
    this.semaphores.clear();
    for (const sleepers of this.sleepers.values()) for (const wake of [...sleepers]) wake();
  }

  /** Resolves with 0 when `channel` is woken or after `ms`; rejects with the signal's reason on abort. */
  private sleep(channel: string, ms: number, signal?: AbortSignal): Promise<number> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const sleepers = this.sleepers.get(channel) ?? new Set<() => void>();
      this.sleepers.set(channel, sleepers);
      const settle = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        sleepers.delete(wake);
        if (sleepers.size === 0 && this.sleepers.get(channel) === sleepers) this.sleepers.delete(channel);
      };
      const wake = () => {
        settle();
        resolve(0);
      };
      const onAbort = () => {
        settle();
        reject(signal!.reason);
      };
      const timer = setTimeout(wake, ms);
      sleepers.add(wake);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** The lock on `key` if it has not run out; the deadline is checked as well as the timer, which may fire late. */
  private liveLock(key: string): LockLease | undefined {
    this.assertOpen(key);
    const lease = this.locks.get(key);
    if (lease !== undefined && lease.deadline <= performance.now()) {
      this.freeLock(key);
      return undefined;
    }
    return lease;
  }

  private grantLock(key: string, token: string, ttl: number): void {
    clearTimeout(this.locks.get(key)?.expiry);
    const lease: LockLease = { token, deadline: performance.now() + ttl };
    this.locks.set(key, lease);
    this.armExpiry(lease, () => this.locks.get(key) === lease && this.freeLock(key));
  }

  private freeLock(key: string): void {
    clearTimeout(this.locks.get(key)?.expiry);
    this.locks.delete(key);
    this.lockFences.delete(key);
    this.wake('lock', key);
  }

  /** The unexpired permits of `name`, expired ones dropped. */
  private livePermits(name: string): Map<string, Lease> {
    this.assertOpen(name);
    const permits = this.semaphores.get(name) ?? new Map<string, Lease>();
    const now = performance.now();
    for (const [token, lease] of permits) if (lease.deadline <= now) this.freePermit(name, token);
    return permits;
  }

  private grantPermit(name: string, token: string, ttl: number): void {
    const permits = this.semaphores.get(name) ?? new Map<string, Lease>();
    this.semaphores.set(name, permits);
    clearTimeout(permits.get(token)?.expiry);
    const lease: Lease = { deadline: performance.now() + ttl };
    permits.set(token, lease);
    this.armExpiry(lease, () => permits.get(token) === lease && this.freePermit(name, token));
  }

  private freePermit(name: string, token: string): void {
    const permits = this.semaphores.get(name);
    clearTimeout(permits?.get(token)?.expiry);
    permits?.delete(token);
    if (permits?.size === 0) this.semaphores.delete(name);
    this.wake('semaphore', name);
  }

  /**
   * Fences from the clock, as on Redis: the clock in microseconds, or one more than the last fence
   * when that is ahead. So they increase for every key of the store (one number for all: nothing to
   * keep per key), and across restarts of the process.
   */
  private nextFence(): number {
    const micros = Math.floor((performance.timeOrigin + performance.now()) * 1_000);
    this.lastFence = Math.max(this.lastFence + 1, micros);
    return this.lastFence;
  }

  /**
   * Frees `lease` at its deadline so that waiters wake, never before: Node fires a delay above
   * 2^31−1 ms at once, so a longer lease (reachable only by calling the store directly: the
   * services refuse such a ttl) is re-armed until its deadline, as is a timer that fires early.
   */
  private armExpiry(lease: Lease, onExpiry: () => void): void {
    const remaining = lease.deadline - performance.now();
    if (remaining <= 0) {
      onExpiry();
      return;
    }
    lease.expiry = setTimeout(
      () => this.armExpiry(lease, onExpiry),
      Math.min(Math.ceil(remaining), LONGEST_DURATION),
    ).unref();
  }

  private wake(kind: LeaseKind, key: string): void {
    const sleepers = this.sleepers.get(channelOf(kind, key));
    if (sleepers !== undefined) for (const wake of [...sleepers]) wake();
  }

  private assertOpen(key: string): void {
    if (this.closed) throw new LockBackendError('The memory lock store is closed', key, { retryable: false });
  }

  async inspectLock(key: string): Promise<LockInspection> {
    const lease = this.liveLock(key);
    if (lease === undefined) return { held: false, ttl: 0 };
    const fence = this.lockFences.get(key);
    return {
      held: true,
      ttl: Math.ceil(lease.deadline - performance.now()),
      ...(fence === undefined ? {} : { fence }),
    };
  }

  async listPermits(name: string): Promise<number[]> {
    const now = performance.now();
    return [...this.livePermits(name).values()].map((lease) => Math.ceil(lease.deadline - now)).sort((a, b) => a - b);
  }

  async forceReleaseLock(key: string): Promise<boolean> {
    if (this.liveLock(key) === undefined) return false;
    this.freeLock(key);
    return true;
  }
}

function channelOf(kind: LeaseKind, key: string): string {
  return `${kind}\0${key}`;
}
