import { describe, expect, it } from '@jest/globals';
import * as nestLock from 'nest-lock';

describe("the package's public entry", () => {
  it('exports every value the contract names', () => {
    const contract = [
      'LockModule',
      'LockService',
      'SemaphoreService',
      'LocalSemaphore',
      'WithLock',
      'Semaphore',
      'LockInterceptor',
      'LockError',
      'LockTimeoutError',
      'SemaphoreTimeoutError',
      'InvalidArgumentError',
      'LockBackendError',
      'LockLostError',
      'currentLock',
      'currentPermit',
    ];

    expect(contract.filter((name) => typeof (nestLock as Record<string, unknown>)[name] !== 'function')).toEqual([]);
  });
});
