import { type LockOptions, validateCallOptions } from '../lock.options.js';
import { LockService } from '../lock.service.js';
import { type GuardDecorator, guardMethod } from './guarded-method.js';
import { compileKeyTemplate, type KeyTemplate } from './key-template.js';

/**
 * Runs the method under the lock `key`, on controller route handlers and provider methods alike.
 * `key` is a template of the method's arguments (`'order:{0}'`, `'order:{0.id}'`) or a function
 * of them. On HTTP routes a busy lock answers 409 Conflict, a key that resolves to nothing 400.
 * The lock is renewed while the method runs (`autoExtend`); `currentLock()` returns it.
 *
 * @example
 * ＠WithLock('order:{0}', { timeout: 0 })
 * ship(orderId: string) { … }
 */
export function WithLock(key: KeyTemplate, options: LockOptions = {}): GuardDecorator {
  const keyOf = compileKeyTemplate(key);
  // Misspelt options fail when the class is defined, not on the first call.
  validateCallOptions('lock', options);
  return (target, propertyKey, descriptor) =>
    guardMethod(
      {
        decorator: '@WithLock',
        service: LockService,
        guardFor: (locks, args) => {
          const lockKey = keyOf(args);
          return (signal) => locks.enter(lockKey, { ...options, signal: signal ?? options.signal });
        },
      },
      target,
      propertyKey,
      descriptor,
    );
}
