import { validateRetryAfter } from '../http/http-options.js';
import { InvalidArgumentError, LockTimeoutError } from '../lock.errors.js';
import { type HoldOptions, type LockOptions, splitHoldOptions, validateCallOptions } from '../options/call-options.js';
import { LockService } from '../lock.service.js';
import {
  type GuardableMethod,
  type GuardDecorator,
  guardMethod,
  type OnBusy,
  validateOnBusy,
} from './guarded-method.js';
import { compileKeyTemplate, type KeyTemplate } from './key-template.js';

export interface WithLockOptions extends LockOptions, HoldOptions {
  /** Seconds in `Retry-After` when the store fails on an HTTP route (503); default: the module's `retryAfter`. */
  retryAfter?: number;
  /**
   * When the lock is held elsewhere: `'throw'` (default) rejects with `LockTimeoutError` (409 on a
   * route); `'skip'` returns `undefined` without running the method, logged at debug level and
   * counted (`nest_lock.skipped`) — the default `timeout` is then `0`, one attempt. For jobs that one
   * process runs and the others skip (a `@Cron` on every replica).
   */
  onBusy?: OnBusy;
}

/**
 * `@WithLock` with a key function: the method's parameters must fit the function's — the
 * function receives the method's arguments, so each of its parameters must accept the method's
 * parameter at the same place (the method may take more).
 */
export type KeyedGuardDecorator<KeyArgs extends unknown[]> = <T extends GuardableMethod>(
  target: object,
  propertyKey: string | symbol,
  descriptor: TypedPropertyDescriptor<T> & KeyFunctionFits<Parameters<T>, KeyArgs>,
) => void;

/** `unknown` (no constraint) when the method's parameters fit the key function's, else a type naming both. */
export type KeyFunctionFits<MethodArgs extends unknown[], KeyArgs extends unknown[]> = MethodArgs extends [
  ...KeyArgs,
  ...unknown[],
]
  ? unknown
  : { "the key function's parameters do not accept the method's": { method: MethodArgs; keyFunction: KeyArgs } };

/** A template, or several (an empty list is refused when the class is defined). */
function compileKeyTemplates(key: KeyTemplate | readonly KeyTemplate[]): (args: unknown[]) => string | string[] {
  if (!Array.isArray(key)) return compileKeyTemplate(key as KeyTemplate);
  if (key.length === 0)
    throw new InvalidArgumentError('key', 'must name at least one key template, got an empty array');
  const keysOf = (key as readonly KeyTemplate[]).map(compileKeyTemplate);
  return (args) => keysOf.map((keyOf) => keyOf(args));
}

/**
 * Runs the method under the lock `key`, on controller route handlers and provider methods alike.
 * `key` is a template of the method's arguments (`'order:{0}'`, `'order:{0.id}'`) or a function
 * of them, whose parameter types are checked against the method's. On HTTP routes a busy lock
 * answers 409 Conflict, a key that resolves to nothing 400, a store that cannot be reached 503.
 * The lock is renewed while the method runs (`autoExtend`); `currentLock()` returns it.
 *
 * @example
 * ＠WithLock('order:{0}', { timeout: 0 })
 * ship(orderId: string) { … }
 */
export function WithLock(key: string, options?: WithLockOptions): GuardDecorator;
// `any[]`: a key function without parameter types keeps taking `any` arguments, as before.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function WithLock<KeyArgs extends any[]>(
  key: (...args: KeyArgs) => string,
  options?: WithLockOptions,
): KeyedGuardDecorator<KeyArgs>;
export function WithLock(key: KeyTemplate, options?: WithLockOptions): GuardDecorator;
/** Several keys, one lock: `@WithLock(['account:{0}', 'account:{1}'])` (see `LockService.lock` with keys). */
export function WithLock(keys: readonly KeyTemplate[], options?: WithLockOptions): GuardDecorator;
export function WithLock(key: KeyTemplate | readonly KeyTemplate[], options: WithLockOptions = {}): GuardDecorator {
  const keyOf = compileKeyTemplates(key);
  // Misspelt options fail when the class is defined, not on the first call.
  validateCallOptions('lock', options, ['retryAfter', 'onBusy', 'holdAtLeast']);
  const { retryAfter, onBusy, ...lockOptions } = options;
  if (retryAfter !== undefined) validateRetryAfter(retryAfter);
  const skipWhenBusy = validateOnBusy(onBusy) === 'skip';
  splitHoldOptions(lockOptions); // checks holdAtLeast when the class is defined; each call splits it off
  if (skipWhenBusy) lockOptions.timeout ??= 0;
  return (target, propertyKey, descriptor) =>
    guardMethod(
      {
        decorator: '@WithLock',
        service: LockService,
        guardFor: (locks, args) => {
          const lockKey = keyOf(args);
          return (signal) => locks.enter(lockKey, { ...lockOptions, signal: signal ?? lockOptions.signal });
        },
        ...(retryAfter === undefined ? {} : { http: { retryAfter } }),
        ...(skipWhenBusy ? { skipWhenBusy: skipWhenLockBusy } : {}),
      },
      target,
      propertyKey,
      descriptor,
    );
}

/** `onBusy: 'skip'` for a lock: busy is a timeout while another owner held the key (not a store's refusal). */
const skipWhenLockBusy = {
  isBusy: (error: unknown) => error instanceof LockTimeoutError && error.refusal === undefined,
  skipped: (locks: LockService, error: unknown, where: string) => locks.skipped(where, error as LockTimeoutError),
};
