import { LockBackendError } from '../lock.errors.js';
import type { LockStore } from './store.js';

interface Lease {
  token: string;
  /** `performance.now()` at which the lease ends. */
  deadline: number;
  /** Frees the key at its deadline so that waiters wake; unref'd, it never holds the process open. */
  expiry: NodeJS.Timeout;
}

/**
 * The embedded store: the same lease semantics as `RedisStore`, inside one process.
 * Waiters are woken the moment a lease is released or expires.
 */
export class MemoryStore implements LockStore {
  private readonly leases = new Map<string, Lease>();
  private readonly sleepers = new Map<string, Set<() => void>>();
  private closed = false;

  async acquireLock(key: string, token: string, ttl: number): Promise<boolean> {
    const holder = this.liveLease(key);
    if (holder !== undefined && holder.token !== token) return false;
    this.grant(key, token, ttl);
    return true;
  }

  async releaseLock(key: string, token: string): Promise<boolean> {
    if (this.liveLease(key)?.token !== token) return false;
    this.free(key);
    return true;
  }

  async extendLock(key: string, token: string, ttl: number): Promise<boolean> {
    if (this.liveLease(key)?.token !== token) return false;
    this.grant(key, token, ttl);
    return true;
  }

  async isLocked(key: string): Promise<boolean> {
    return this.liveLease(key) !== undefined;
  }

  waitForRelease(key: string, maxWait: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const sleepers = this.sleepers.get(key) ?? new Set<() => void>();
      this.sleepers.set(key, sleepers);
      const settle = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        sleepers.delete(wake);
        if (sleepers.size === 0 && this.sleepers.get(key) === sleepers) this.sleepers.delete(key);
      };
      const wake = () => {
        settle();
        resolve();
      };
      const onAbort = () => {
        settle();
        reject(signal!.reason);
      };
      const timer = setTimeout(wake, maxWait);
      sleepers.add(wake);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const lease of this.leases.values()) clearTimeout(lease.expiry);
    this.leases.clear();
    for (const sleepers of this.sleepers.values()) for (const wake of [...sleepers]) wake();
  }

  /** The lease on `key` if it has not run out; the store is checked as well as the timer, which may fire late. */
  private liveLease(key: string): Lease | undefined {
    if (this.closed) throw new LockBackendError('The memory lock store is closed', key);
    const lease = this.leases.get(key);
    if (lease !== undefined && lease.deadline <= performance.now()) {
      this.free(key);
      return undefined;
    }
    return lease;
  }

  private grant(key: string, token: string, ttl: number): void {
    clearTimeout(this.leases.get(key)?.expiry);
    const expiry = setTimeout(() => this.free(key), ttl).unref();
    this.leases.set(key, { token, deadline: performance.now() + ttl, expiry });
  }

  private free(key: string): void {
    clearTimeout(this.leases.get(key)?.expiry);
    this.leases.delete(key);
    const sleepers = this.sleepers.get(key);
    if (sleepers !== undefined) for (const wake of [...sleepers]) wake();
  }
}
