// What the package does not export, for tests that look inside: the kinds of lease (to read the
// store's key layout or call a store directly) and the stores behind `LockStore`.
export { lockKind } from '../../libs/lock/src/kinds/lock.kind.js';
export { semaphoreKind } from '../../libs/lock/src/kinds/semaphore.kind.js';
export { LockStore } from '../../libs/lock/src/store/store.js';
export { MemoryStore } from '../../libs/lock/src/store/memory/memory.store.js';
export { RedisStore } from '../../libs/lock/src/store/redis/redis.store.js';
export { LOCK_OPTIONS } from '../../libs/lock/src/lock.constants.js';
export type { ResolvedModuleOptions } from '../../libs/lock/src/lock-module.options.js';
