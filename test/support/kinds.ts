// What the package does not export, for tests that look inside: the kinds of lease (to read the
// store's key layout or call a store directly) and the stores behind `LockStore`.
export { lockKind } from '../../libs/lock/src/kinds/lock.kind.js';
export { semaphoreKind } from '../../libs/lock/src/kinds/semaphore.kind.js';
export { LockStore } from '../../libs/lock/src/store/store.js';
export { MemoryStore } from '../../libs/lock/src/store/memory/memory.store.js';
export { RedisStore } from '../../libs/lock/src/store/redis/redis.store.js';
export { LOCK_OPTIONS } from '../../libs/lock/src/lock.constants.js';
export type { ResolvedModuleOptions } from '../../libs/lock/src/lock-module.options.js';
import type { RedisStore as RedisStoreType } from '../../libs/lock/src/store/redis/redis.store.js';
import type { StoreKind as StoreKindType } from '../../libs/lock/src/store/store-kind.js';
export { keyRuns } from '../../libs/lock/src/lease/store-capabilities.js';

/**
 * The wake-up channel a Redis store of this process listens on for the waiters of lease `id`
 * (`<channel>:<the store's process suffix>`): for tests that publish on it, or count its subscribers.
 */
export function listeningChannelOf(store: RedisStoreType, kind: StoreKindType, id: string): string {
  const { wakeUps } = store as unknown as { wakeUps: { listeningChannel(channel: string): string } };
  return wakeUps.listeningChannel(store.channelOf(kind, id));
}
export { RedlockStore } from '../../libs/lock/src/store/redlock/redlock.store.js';
