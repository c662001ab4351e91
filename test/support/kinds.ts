// The kinds of lease, for tests that read the store's key layout or call a store directly.
export { lockKind } from '../../libs/lock/src/kinds/lock.kind.js';
export { semaphoreKind } from '../../libs/lock/src/kinds/semaphore.kind.js';
