export {
  type AnyLockError,
  type HttpAnswer,
  InvalidArgumentError,
  isLockError,
  LockBackendError,
  LockError,
  type LockErrorCode,
  LoaderError,
  LoadTimeoutError,
  LockLostError,
  LockNotConfiguredError,
  LockTimeoutError,
  LockUpgradeError,
  SemaphoreTimeoutError,
} from './lock.errors.js';
export { LocalSemaphore } from './local-semaphore.js';
export { LockModule } from './lock.module.js';
export type { LockModuleOptions } from './lock-module.options.js';
export type {
  Fairness,
  HoldOptions,
  LeaseDefaults,
  LeaseOptions,
  LockMode,
  LockOptions,
  SemaphoreOptions,
} from './options/call-options.js';
export { DEFAULT_RETRY_AFTER_SECONDS, type LockErrorBody } from './http/http-options.js';
export type { RedisClusterOption } from './store/redis/redis-options.js';
export { type Lock } from './held-lock.js';
export { type Permit } from './held-permit.js';
export { currentLock, type LockInspection, LockService } from './lock.service.js';
export { currentPermit, LocalPermit, type PermitHolder, SemaphoreService } from './semaphore.service.js';
export { WithLock, type WithLockOptions } from './decorators/with-lock.decorator.js';
export { Semaphore, type SemaphoreDecoratorOptions } from './decorators/semaphore.decorator.js';
export { LeaderService } from './leader/leader.service.js';
export type { Leadership } from './leader/campaign.js';
export type { CampaignOptions } from './leader/campaign-options.js';
export { LeaderOnly, type LeaderOnlyOptions } from './decorators/leader-only.decorator.js';
export { SingleFlightService } from './single-flight/single-flight.service.js';
export { SingleFlight, type SingleFlightDecoratorOptions } from './decorators/single-flight.decorator.js';
export type { SingleFlightOptions } from './single-flight/single-flight-options.js';
export type { CacheOptions } from './single-flight/cache-entry.js';
export type { KeyTemplate } from './decorators/key-template.js';
export type { OnBusy } from './decorators/guarded-method.js';
export {
  type Attempt,
  type AttemptOptions,
  type Handover,
  type Inspection,
  type LeaseExtension,
  LockStore,
  PASSED_WITHOUT_FENCE,
  type ReleaseOptions,
  type SharedValues,
  type Successor,
  type TakenIfFree,
  type Turn,
  type TurnWait,
} from './store/store.js';
export type { StoreKind, StoreOperation } from './store/store-kind.js';
