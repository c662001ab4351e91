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
   * Whether a caller asking `request` holds the lease alone (a lock's writer). A holder of this process
   * then passes the lease straight to such a next waiter of this process, which waits for that rather
   * than queue on the store (a request that may share the lease, a reader or a permit, may find it free
   * elsewhere meanwhile: such waiters keep asking the store).
   */
  exclusive(request: Request): boolean;
  /**
   * Whether waiters asking `request` are let in together by one release (a lock's readers, behind a
   * writer): they then stand in the store's own line, where it keeps one, rather than queue in this
   * process one after another.
   */
  admittedTogether(request: Request): boolean;
  /** The lease as messages name it: `lock "order:42"`, `a permit of semaphore "reports"`. */
  describe(id: string): string;
  /** The subject of the sentence that says it was lost: `The lock "order:42"`. */
  describeLost(id: string): string;
  /**
   * Why a call asking `asked` may not join the lease its call chain holds on `id`, taken asking `held`
   * (a lock's write inside a read of the same key: `LockUpgradeError`); `undefined` when it joins it.
   */
  joinRefusal?(held: Request, asked: Request, id: string): LockError | undefined;
  /** What a wait that ended without the lease throws: `LockTimeoutError`, `SemaphoreTimeoutError`. */
  timeoutError(id: string, request: Request, waited: number, timeout: number, refusal?: string): LockError;
}
