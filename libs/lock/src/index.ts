export { LOCK_OPTIONS } from './lock.constants.js';
export {
  InvalidArgumentError,
  LockBackendError,
  LockError,
  LockLostError,
  LockTimeoutError,
  LockUpgradeError,
  SemaphoreTimeoutError,
} from './lock.errors.js';
export { LocalSemaphore } from './local-semaphore.js';
export { LockModule } from './lock.module.js';
export type { LockModuleOptions, ResolvedModuleOptions } from './lock-module.options.js';
export type {
  Fairness,
  HoldOptions,
  LeaseDefaults,
  LeaseOptions,
  LockMode,
  LockOptions,
  SemaphoreOptions,
} from './options/call-options.js';
export { DEFAULT_LEASE } from './options/call-options.js';
export { DEFAULT_RETRY_AFTER_SECONDS, type LockErrorBody } from './http/http-options.js';
export type { RedisClusterOption } from './store/redis/redis-options.js';
export { currentLock, type Lock, type LockInspection, LockService } from './lock.service.js';
export { currentPermit, LocalPermit, type Permit, type PermitHolder, SemaphoreService } from './semaphore.service.js';
export { MemoryStore } from './store/memory/memory.store.js';
export { RedisStore, type RedisStoreOptions } from './store/redis/redis.store.js';
export { RedlockStore, type RedlockStoreOptions } from './store/redlock/redlock.store.js';
export { LockStore } from './store/store.js';
export { WithLock, type WithLockOptions } from './decorators/with-lock.decorator.js';
export { Semaphore, type SemaphoreDecoratorOptions } from './decorators/semaphore.decorator.js';
export type { KeyTemplate } from './decorators/key-template.js';
export type { OnBusy } from './decorators/guarded-method.js';
export { type LockHttpOptions, LockInterceptor, SEMAPHORE_RETRY_AFTER_SECONDS } from './http/lock.interceptor.js';
