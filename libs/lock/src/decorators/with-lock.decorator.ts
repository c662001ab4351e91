import { validateRetryAfter } from '../http/http-options.js';
import { InvalidArgumentError, LockTimeoutError } from '../lock.errors.js';
import {
  type DecoratorCallOptions,
  HOLD_OPTIONS_KEYS,
  type HoldOptions,
  LOCK_DECORATOR_CALL_KEYS,
  type LockOptions,
  splitHoldOptions,
  validateCallOptions,
} from '../options/call-options.js';
import { keysOf, optionNames } from '../options/option-names.js';
import { LockService } from '../lock.service.js';
import type { Skip } from '../telemetry/telemetry.js';
import {
  classNameOf,
  type GuardableMethod,
  type GuardDecorator,
  guardMethod,
  type OnBusy,
  validateOnBusy,
} from './guarded-method.js';
import { checkArgumentsRead, compileKeyTemplate, type KeyTemplate } from './key-template.js';

export interface WithLockOptions extends DecoratorCallOptions<LockOptions>, HoldOptions {
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

/** The key object of `WithLockOptions` (options/option-names.ts): the names `@WithLock` knows. */
const WITH_LOCK_OPTIONS_KEYS = keysOf<WithLockOptions>()({
  ...LOCK_DECORATOR_CALL_KEYS,
  retryAfter: true,
  onBusy: true,
  ...HOLD_OPTIONS_KEYS,
});
const WITH_LOCK_OPTION_NAMES = optionNames(WITH_LOCK_OPTIONS_KEYS);

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

/**
 * A template, or several (an empty list is refused when the class is defined), and a check of each
 * against the method it decorates.
 */
function compileKeyTemplates(key: KeyTemplate | readonly KeyTemplate[]) {
  const templates: readonly KeyTemplate[] = Array.isArray(key) ? key : [key as KeyTemplate];
  if (templates.length === 0) {
    throw new InvalidArgumentError('key', 'must name at least one key template, got an empty array');
  }
  const keysOf = templates.map(compileKeyTemplate);
  return {
    keyOf: Array.isArray(key) ? (args: unknown[]): string | string[] => keysOf.map((keyOf) => keyOf(args)) : keysOf[0],
    fits: (target: object, propertyKey: string | symbol) =>
      keysOf.forEach((keyOf, i) =>
        checkArgumentsRead(keyOf, templates[i], target, propertyKey, `${classNameOf(target)}.${String(propertyKey)}`),
      ),
  };
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
// The template overload comes last: when no overload fits, TypeScript reports the last one's error,
// which then names a misspelt option (`timout`) rather than complaining about the key.
/** Several keys, one lock: `@WithLock(['account:{0}', 'account:{1}'])` (see `LockService.lock` with keys). */
export function WithLock(keys: readonly KeyTemplate[], options?: WithLockOptions): GuardDecorator;
/** A key function: its parameters are checked against the method's (annotate them: they are `unknown` otherwise). */
export function WithLock<KeyArgs extends unknown[]>(
  key: (...args: KeyArgs) => string,
  options?: WithLockOptions,
): KeyedGuardDecorator<KeyArgs>;
export function WithLock(key: string, options?: WithLockOptions): GuardDecorator;
export function WithLock(key: KeyTemplate | readonly KeyTemplate[], options: WithLockOptions = {}): GuardDecorator {
  const { keyOf, fits } = compileKeyTemplates(key);
  // Misspelt options fail when the class is defined, not on the first call.
  validateCallOptions(WITH_LOCK_OPTION_NAMES, options);
  const { retryAfter, onBusy, ...lockOptions } = options;
  if (retryAfter !== undefined) validateRetryAfter(retryAfter);
  const skipWhenBusy = validateOnBusy(onBusy) === 'skip';
  splitHoldOptions(lockOptions); // checks holdAtLeast when the class is defined; each call splits it off
  if (skipWhenBusy) lockOptions.timeout ??= 0;
  return (target, propertyKey, descriptor) => {
    fits(target, propertyKey);
    guardMethod(
      {
        decorator: '@WithLock',
        service: LockService,
        guardFor: (locks, args) => {
          const lockKey = keyOf(args);
          return (signal) => locks.enter(lockKey, signal === undefined ? lockOptions : { ...lockOptions, signal });
        },
        ...(retryAfter === undefined ? {} : { http: { retryAfter } }),
        ...(skipWhenBusy ? { skipWhenBusy: heldElsewhere } : {}),
      },
      target,
      propertyKey,
      descriptor,
    );
  };
}

/** `onBusy: 'skip'` for a lock: busy is a timeout while another owner held the key (not a store's refusal). */
function heldElsewhere(error: unknown): Skip | undefined {
  if (!(error instanceof LockTimeoutError) || error.refusal !== undefined) return undefined;
  return { reason: 'busy', detail: `lock "${error.key}" is held elsewhere` };
}
