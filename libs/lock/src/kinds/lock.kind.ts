import { LockTimeoutError } from '../lock.errors.js';
import { leaseRunsOutIn } from '../store/redis/replies.js';
import type { Inspection } from '../store/store.js';
import type { LeaseKind } from './lease-kind.js';
import {
  acquireLockScript,
  countLockScript,
  extendLockScript,
  fenceLockScript,
  forceReleaseLockScript,
  inspectLockScript,
  releaseLockScript,
} from './lock.scripts.js';

/** A lock asks for nothing beyond the lease itself. */
const NO_REQUEST_ARGS: readonly never[] = [];

/**
 * The exclusive lock: one holder at a time. On Redis the string `<prefix>{<key>}` holding the
 * owner's token, with the lease as its expiry; companions `:fence`, `:line`, `:alive`, `:waiters`.
 */
export const lockKind: LeaseKind<undefined> = {
  name: 'lock',
  exclusive: true,
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
  admits: (holders) => holders.length === 0,
  timeoutError: (key, _request, waited, timeout, refusal) => new LockTimeoutError(key, waited, timeout, refusal),
  redis: {
    namespace: '',
    companions: ['fence', 'line', 'alive', 'waiters'],
    acquire: acquireLockScript,
    requestArgs: () => NO_REQUEST_ARGS,
    takenBySetNx: true,
    release: releaseLockScript,
    extend: extendLockScript,
    fence: fenceLockScript,
    count: countLockScript,
    inspect: inspectLockScript,
    readInspection,
    forceRelease: forceReleaseLockScript,
  },
  redlock: 'token-lease',
};

/** `inspectLockScript`'s reply: {PTTL (-2: free; -1: no expiry, which nest-lock never writes), the counter or ''}. */
function readInspection(reply: unknown): Inspection {
  const [pttl, counter] = reply as [number | string, string];
  const fence = counter === '' ? {} : { fence: Number(counter) };
  if (Number(pttl) === -2) return { ttls: [], ...fence };
  return { ttls: [Number(pttl) === -1 ? Number.POSITIVE_INFINITY : leaseRunsOutIn(pttl)], ...fence };
}
