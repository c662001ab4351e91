import type { LockError } from '../lock.errors.js';
import type { StoreKind } from '../store/store-kind.js';

/**
 * A kind of lease, as a value: everything the lease core and the stores need to know of a lock, a
 * permit of a semaphore, or any other kind, so that they are written once and never ask which kind
 * they hold. The stores' part is `StoreKind` (its key layout and scripts on Redis, its admission
 * rule in memory); the rest is the core's: how a lease of this kind is named and what a wait that
 * ends without it throws. See docs/ARCHITECTURE.md, "Adding a kind of lease".
 */
export interface LeaseKind<Request = unknown> extends StoreKind<Request> {
  /**
   * At most one holder at a time. A holder of this process then passes the lease straight to the
   * next waiter of this process, which waits for that rather than queue on the store (a kind with
   * room for several may have a lease free elsewhere meanwhile: its waiters keep asking the store).
   */
  readonly exclusive: boolean;
  /** The lease as messages name it: `lock "order:42"`, `a permit of semaphore "reports"`. */
  describe(id: string): string;
  /** The subject of the sentence that says it was lost: `The lock "order:42"`. */
  describeLost(id: string): string;
  /** What a wait that ended without the lease throws: `LockTimeoutError`, `SemaphoreTimeoutError`. */
  timeoutError(id: string, request: Request, waited: number, timeout: number, refusal?: string): LockError;
}
