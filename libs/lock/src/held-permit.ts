import { HeldLease } from './lease/held-lease.js';
import { LeaseShare } from './lease/lease-share.js';

/** A held permit of a semaphore. Its lease runs out after `ttl` unless it is renewed (`autoExtend`, or `expire()`). */
export interface Permit {
  readonly name: string;
  /** 128 random bits, fresh for every acquisition. */
  readonly token: string;
  /** Milliseconds spent waiting before the permit was granted (exactly 0 when one was free). */
  readonly elapsed: number;
  /**
   * Strictly greater than every fence drawn earlier for a permit of this semaphore, drawn on the first
   * call while the permit is ours, as `Lock.fence()`.
   */
  fence(): Promise<number>;
  /** Aborted with a `LockLostError` once the lease is known to be lost (also by a `release()` that finds it gone); never by a `release()` that frees it. */
  readonly signal: AbortSignal;
  /** Milliseconds the lease is still guaranteed to be ours (0 once released or lost). */
  readonly validity: number;
  /** `true`: given back by us; `false`: no longer ours (its lease ran out), or already released. */
  release(): Promise<boolean>;
  /** Resets the remaining lease to `ttl` (default: its current ttl: the one it was taken with, or the last given to `expire()`); `false` if no longer ours. */
  expire(ttl?: number): Promise<boolean>;
  /** `await using permit = await semaphores.acquire('reports', 2)` releases at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** A permit as its holder sees it: a held lease of `semaphoreKind`, named by its semaphore (`name`). */
export class HeldPermit extends HeldLease<number> implements Permit {
  get name(): string {
    return this.id;
  }

  /** How one holder of a call chain sees it: `release()` ends that holder's share only. */
  shareWith(leave: () => Promise<boolean>): PermitShare {
    return new PermitShare(this, leave);
  }
}

/** One holder's share of a permit held by several holders of a call chain (see `LeaseShare`). */
export class PermitShare extends LeaseShare<number> implements Permit {
  get name(): string {
    return this.lease.id;
  }
}
