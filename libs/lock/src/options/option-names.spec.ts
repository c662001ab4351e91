import { describe, expect, it } from '@jest/globals';
import { Semaphore } from '../decorators/semaphore.decorator.js';
import { WithLock } from '../decorators/with-lock.decorator.js';
import { resolveModuleOptions } from '../lock-module.options.js';
import { resolveRedlock } from '../store/redlock/redlock-options.js';
import { DEFAULT_LEASE, resolveAcquirePolicy, validateLocalOptions } from './call-options.js';
import { keysOf, optionNames } from './option-names.js';

interface Sample {
  required: number;
  optional?: string;
}

describe('keysOf', () => {
  it('gives back the key object of its interface as written', () => {
    expect(keysOf<Sample>()({ required: true, optional: true })).toEqual({ required: true, optional: true });
  });

  it('refuses, at compile time, a key missing and a key the interface lacks, written or spread', () => {
    const extra = { extra: true } as const;
    // @ts-expect-error -- `optional` is missing
    expect(keysOf<Sample>()({ required: true })).toEqual({ required: true });
    // @ts-expect-error -- `extra` is not a key of Sample
    expect(keysOf<Sample>()({ required: true, optional: true, extra: true })).toHaveProperty('extra');
    // @ts-expect-error -- `extra` is not a key of Sample, even by a spread (which `satisfies` lets through)
    expect(keysOf<Sample>()({ required: true, optional: true, ...extra })).toHaveProperty('extra');
  });
});

describe('optionNames', () => {
  it('lists the names of a key object in its order', () => {
    expect([...optionNames({ b: true, a: true, c: true })]).toEqual(['b', 'a', 'c']);
  });
});

describe('the unknown-option checks', () => {
  const defaults = { ...DEFAULT_LEASE, fair: true };
  const bogus = { bogus: 1 } as never;
  const lease = 'ttl, timeout, step, ratio, maxStep, autoExtend, fair';

  // The names each check knows, from its options interface's key object, listed as they always were.
  it.each<[string, () => unknown, string]>([
    [
      'LockModule options',
      () => resolveModuleOptions(bogus),
      'redis, store, redlock, keyPrefix, fenceCounterTtl, defaults, commandTimeout, waitForReplicas, onLockLost, httpErrors, retryAfter, errorBody, logger',
    ],
    ['defaults', () => resolveModuleOptions({ defaults: bogus }), lease],
    [
      'waitForReplicas',
      () =>
        resolveModuleOptions({
          redis: 'redis://localhost',
          waitForReplicas: { replicas: 1, timeout: 10, bogus: 1 } as never,
        }),
      'replicas, timeout',
    ],
    [
      'redlock',
      () => resolveRedlock({ nodes: ['redis://localhost'], bogus: 1 }, 1_000),
      'nodes, quorum, driftFactor, quarantine',
    ],
    ['a lock', () => resolveAcquirePolicy('lock', defaults, bogus, () => 1), `${lease}, signal, token, mode`],
    ['a permit', () => resolveAcquirePolicy('semaphore', defaults, bogus, () => 1), `${lease}, signal`],
    ['a local permit', () => validateLocalOptions(bogus), 'timeout'],
    ['@WithLock', () => WithLock('key', bogus), `${lease}, mode, retryAfter, onBusy, holdAtLeast`],
    ['@Semaphore', () => Semaphore(1, bogus), `${lease}, name, scope, retryAfter, onBusy, holdAtLeast`],
    [
      "@Semaphore with scope: 'local'",
      () => Semaphore(1, { scope: 'local', bogus: 1 } as never),
      'timeout, name, scope, retryAfter, onBusy, holdAtLeast',
    ],
  ])('%s', (_, check, known) => {
    expect(check).toThrow(`unknown option (known: ${known})`);
  });
});
