import { SemaphoreTimeoutError } from '../lock.errors.js';
import type { LeaseKind } from './lease-kind.js';
import {
  acquirePermitScript,
  countPermitsScript,
  extendPermitScript,
  fencePermitScript,
  listPermitsScript,
  releasePermitScript,
  SEMAPHORE_KEYS,
  semaphoreRequestArgs,
} from './semaphore.scripts.js';

/** Why semaphores are refused on Redlock. */
const NO_SEMAPHORES_ON_REDLOCK =
  'semaphores need one Redis; Redlock cannot count permits across independent masters (two quorums of ' +
  'independent counters can each see a free permit). Use a separate LockModule with the redis option for semaphores';

/**
 * A permit of a counting semaphore: at most `limit` holders at once, the limit being each caller's
 * own (its request). On Redis the sorted set `<prefix>sem:{<name>}` of permit tokens by lease
 * deadline; companions `:fence`, `:line`, `:alive`, `:waiters` and `:limits` (each waiter's limit).
 */
export const semaphoreKind: LeaseKind<number> = {
  name: 'semaphore',
  exclusive: () => false,
  admittedTogether: () => false,
  describe: (name) => `a permit of semaphore "${name}"`,
  describeLost: (name) => `A permit of semaphore "${name}"`,
  purposes: {
    acquire: (name) => `take a permit of semaphore "${name}"`,
    release: (name) => `release a permit of semaphore "${name}"`,
    extend: (name) => `renew a permit of semaphore "${name}"`,
    fence: (name) => `draw a fence for a permit of semaphore "${name}"`,
    count: (name) => `count the permits of semaphore "${name}"`,
    inspect: (name) => `list the permits of semaphore "${name}"`,
    forceRelease: (name) => `force-release the permits of semaphore "${name}"`,
  },
  admits: (holders, limit) => holders.length < limit,
  timeoutError: (name, limit, waited, timeout, refusal) =>
    new SemaphoreTimeoutError(name, limit, waited, timeout, refusal),
  redis: {
    namespace: 'sem:',
    companions: SEMAPHORE_KEYS.companions,
    acquire: acquirePermitScript,
    requestArgs: semaphoreRequestArgs,
    takenBySetNx: () => false,
    release: releasePermitScript,
    extend: extendPermitScript,
    fence: fencePermitScript,
    count: countPermitsScript,
    inspect: listPermitsScript,
    readInspection: (reply) => ({ ttls: (reply as (number | string)[]).map(Number) }),
  },
  redlock: { refusal: NO_SEMAPHORES_ON_REDLOCK },
};
