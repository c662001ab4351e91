export { LOCK_OPTIONS } from './lock.constants.js';
export {
  InvalidArgumentError,
  LockBackendError,
  LockError,
  LockTimeoutError,
  SemaphoreTimeoutError,
} from './lock.errors.js';
export { LockModule } from './lock.module.js';
export type {
  LeaseDefaults,
  LeaseOptions,
  LockModuleOptions,
  LockOptions,
  ResolvedModuleOptions,
} from './lock.options.js';
export { DEFAULT_LEASE } from './lock.options.js';
export { type Lock, LockService } from './lock.service.js';
export { type Permit, SemaphoreService } from './semaphore.service.js';
export { MemoryStore } from './store/memory.store.js';
export { RedisStore, type RedisStoreOptions } from './store/redis.store.js';
export { LockStore } from './store/store.js';
