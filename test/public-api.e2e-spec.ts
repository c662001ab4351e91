import { describe, expect, it } from '@jest/globals';
import * as nestLock from 'nest-lock';

describe("the package's public entry", () => {
  it('exports the values docs/API.md documents, and nothing else', () => {
    const contract = [
      'LockModule',
      'LockService',
      'SemaphoreService',
      'LeaderService',
      'LeaderOnly',
      'SingleFlightService',
      'SingleFlight',
      'LocalSemaphore',
      'LocalPermit',
      'WithLock',
      'Semaphore',
      'LockError',
      'LockTimeoutError',
      'SemaphoreTimeoutError',
      'InvalidArgumentError',
      'LockBackendError',
      'LockLostError',
      'LockUpgradeError',
      'LockNotConfiguredError',
      'LoadTimeoutError',
      'LoaderError',
      'currentLock',
      'currentPermit',
      'isLockError',
      'DEFAULT_RETRY_AFTER_SECONDS',
      'LockStore',
      'PASSED_WITHOUT_FENCE',
    ];

    expect(Object.keys(nestLock).sort()).toEqual([...contract].sort());
    expect(typeof nestLock.LockStore).toBe('symbol'); // the injection token of the store contract
  });
});
