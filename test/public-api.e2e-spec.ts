import { describe, expect, it } from '@jest/globals';
import * as nestLock from 'nest-lock';

describe("the package's public entry", () => {
  it('exports the values docs/API.md documents, and nothing else', () => {
    const contract = [
      'LockModule',
      'LockService',
      'SemaphoreService',
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
      'currentLock',
      'currentPermit',
      'isLockError',
      'DEFAULT_RETRY_AFTER_SECONDS',
    ];

    expect(Object.keys(nestLock).sort()).toEqual([...contract].sort());
  });
});
