import type { HeldLease } from './held-lease.js';

/**
 * One holder's share of a lease held by several holders of a call chain: the same lease, whose
 * `release()` / dispose end only this holder's share. The lease is given back when the last holder's
 * share ends. Each kind's view names it for its users (a lock's share has `key`, `mode`, `unlock()`).
 */
export class LeaseShare<Request = unknown> {
  constructor(
    protected readonly lease: HeldLease<Request>,
    /** Ends this holder's share (`true` while the lease was still ours). */
    protected readonly leave: () => Promise<boolean>,
  ) {}

  get token(): string {
    return this.lease.token;
  }

  get elapsed(): number {
    return this.lease.elapsed;
  }

  get signal(): AbortSignal {
    return this.lease.signal;
  }

  get validity(): number {
    return this.lease.validity;
  }

  fence(): Promise<number> {
    return this.lease.fence();
  }

  expire(ttl?: number): Promise<boolean> {
    return this.lease.expire(ttl);
  }

  /** Ends this holder's share: the lease is given back when the last holder's share ends. */
  release(): Promise<boolean> {
    return this.leave();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.leave().catch((error: unknown) => this.lease.warnReleaseFailed(error));
  }
}
