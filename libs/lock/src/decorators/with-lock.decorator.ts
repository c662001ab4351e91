import { DEFAULT_LEASE, type LockOptions, resolveLease } from '../lock.options.js';
import { type HeldLock, LockService } from '../lock.service.js';
import { type GuardDecorator, guardMethod } from './guarded-method.js';
import { compileKeyTemplate, type KeyTemplate } from './key-template.js';

/**
 * Runs the method under the lock `key`, on controller route handlers and provider methods alike.
 * `key` is a template of the method's arguments (`'order:{0}'`, `'order:{0.id}'`) or a function
 * of them. On HTTP routes a busy lock answers 409 Conflict, a key that resolves to nothing 400.
 *
 * @example
 * ＠WithLock('order:{0}', { timeout: 0 })
 * ship(orderId: string) { … }
 */
export function WithLock(key: KeyTemplate, options: LockOptions = {}): GuardDecorator {
  const keyOf = compileKeyTemplate(key);
  // Misspelt options fail when the class is defined, not on the first call.
  resolveLease(DEFAULT_LEASE, options);
  return (target, propertyKey, descriptor) =>
    guardMethod(
      {
        decorator: '@WithLock',
        service: LockService,
        guardFor: (locks, args) => {
          const lockKey = keyOf(args);
          return {
            kind: 'lock',
            id: lockKey,
            // lock() always resolves with a HeldLock; the narrower type lets the chain see whether it is still held.
            acquire: (signal) =>
              locks.lock(lockKey, { ...options, signal: signal ?? options.signal }) as Promise<HeldLock>,
            release: (lock) => lock.unlock(),
          };
        },
      },
      target,
      propertyKey,
      descriptor,
    );
}
