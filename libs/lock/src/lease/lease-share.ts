import type { LockMode } from '../options/call-options.js';
import type { HeldLease } from './held-lease.js';

/**
 * One holder's share of a lease held by several holders of a call chain (see `HeldLease.shareWith`):
 * the same lease, seen as a `Lock` or a `Permit`, whose `unlock()` / `release()` / dispose end only
 * this holder's share. The lease is given back when the last holder's share ends.
 */
export class LeaseShare {
  constructor(
    private readonly lease: HeldLease,
    private readonly leave: () => Promise<boolean>,
  ) {}

  get key(): string {
    return this.lease.id;
  }

  get keys(): readonly string[] {
    return this.lease.keys;
  }

  get mode(): LockMode {
    return this.lease.mode;
  }

  get name(): string {
    return this.lease.id;
  }

  get token(): string {
    return this.lease.token;
  }

  get elapsed(): number {
    return this.lease.elapsed;
  }

  fence(key?: string): Promise<number> {
    return this.lease.fence(key);
  }

  get signal(): AbortSignal {
    return this.lease.signal;
  }

  get validity(): number {
    return this.lease.validity;
  }

  expire(ttl?: number): Promise<boolean> {
    return this.lease.expire(ttl);
  }

  /** Ends this holder's share: the lease is given back when the last holder's share ends. */
  unlock(): Promise<boolean> {
    return this.leave();
  }

  release(): Promise<boolean> {
    return this.leave();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.leave().catch((error: unknown) => this.lease.warnReleaseFailed(error));
  }
}
