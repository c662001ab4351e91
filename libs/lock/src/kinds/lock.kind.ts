import { LockTimeoutError, LockUpgradeError } from '../lock.errors.js';
import { leaseRunsOutIn } from '../store/redis/replies.js';
import type { Inspection } from '../store/store.js';
import type { LockMode } from '../options/call-options.js';
import type { LeaseKind } from './lease-kind.js';
import {
  acquireFreeLocksScript,
  acquireLockScript,
  countLockScript,
  extendLockScript,
  fenceLockScript,
  forceReleaseLockScript,
  inspectLockScript,
  LOCK_KEYS,
  lockRequestArgs,
  releaseLockScript,
} from './lock.scripts.js';

/** Why a read lock is refused on Redlock. */
const NO_READ_LOCKS_ON_REDLOCK =
  "read locks need one Redis (a server, Sentinel or a Cluster): Redlock's quorum holds one owner's token per " +
  'key, not a set of readers. Use a separate LockModule with the redis option for read-write locks';

/**
 * The lock, a read-write lock: one writer (`mode: 'write'`, a plain `lock()`), or any number of
 * readers, at a time. On Redis the string `<prefix>{<key>}` holding its writer's token (or `''` while
 * readers hold it), with the lease as its expiry; companions `:fence`, `:line`, `:alive`, `:waiters`
 * and `:readers` (reader tokens by lease deadline).
 */
export const lockKind: LeaseKind<LockMode> = {
  name: 'lock',
  exclusive: (mode) => mode !== 'read',
  admittedTogether: (mode) => mode === 'read',
  describe: (key) => `lock "${key}"`,
  describeLost: (key) => `The lock "${key}"`,
  purposes: {
    acquire: (key) => `take lock "${key}"`,
    release: (key) => `release lock "${key}"`,
    extend: (key) => `renew lock "${key}"`,
    fence: (key) => `draw a fence for lock "${key}"`,
    count: (key) => `check lock "${key}"`,
    inspect: (key) => `inspect lock "${key}"`,
    forceRelease: (key) => `force-release lock "${key}"`,
  },
  // A waiting writer holds back the readers that come after it (the memory store's line).
  admits: (holders, mode, waiting = []) =>
    mode === 'read'
      ? holders.every((held) => held === 'read') && waiting.every((waiter) => waiter === 'read')
      : holders.length === 0,
  joinRefusal: (held, asked, key) => (held === 'read' && asked === 'write' ? new LockUpgradeError(key) : undefined),
  timeoutError: (key, _mode, waited, timeout, refusal) => new LockTimeoutError(key, waited, timeout, refusal),
  redis: {
    namespace: '',
    companions: LOCK_KEYS.companions,
    acquire: acquireLockScript,
    requestArgs: lockRequestArgs,
    takenBySetNx: (mode) => mode !== 'read',
    acquireAllIfFree: acquireFreeLocksScript,
    release: releaseLockScript,
    extend: extendLockScript,
    fence: fenceLockScript,
    count: countLockScript,
    inspect: inspectLockScript,
    readInspection,
    forceRelease: forceReleaseLockScript,
  },
  redlock: 'token-lease',
  redlockRefusal: (mode) => (mode === 'read' ? NO_READ_LOCKS_ON_REDLOCK : undefined),
};

/**
 * `inspectLockScript`'s reply: {PTTL (-2: free; -1: no expiry, which nest-lock never writes), the
 * counter or '', the number of readers (0: held to write, or free)}.
 */
function readInspection(reply: unknown): Inspection {
  const [pttl, counter, readerCount] = reply as [number | string, string, number | string];
  const fence = counter === '' ? {} : { fence: Number(counter) };
  if (Number(pttl) === -2) return { ttls: [], holders: [], ...fence };
  const ttl = Number(pttl) === -1 ? Number.POSITIVE_INFINITY : leaseRunsOutIn(pttl);
  const readers = Number(readerCount);
  return { ttls: [ttl], holders: readers > 0 ? new Array<LockMode>(readers).fill('read') : ['write'], ...fence };
}
