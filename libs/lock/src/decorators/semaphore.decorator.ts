import { InvalidArgumentError, SemaphoreTimeoutError } from '../lock.errors.js';
import { validateRetryAfter } from '../http/http-options.js';
import {
  type DecoratorCallOptions,
  HOLD_OPTIONS_KEYS,
  type HoldOptions,
  LOCAL_SEMAPHORE_OPTIONS_KEYS,
  type LocalSemaphoreOptions,
  SEMAPHORE_DECORATOR_CALL_KEYS,
  type SemaphoreOptions,
  splitHoldOptions,
  validateCallOptions,
  validateKey,
  validateLimit,
  validateLocalOptions,
} from '../options/call-options.js';
import { keysOf, optionNames } from '../options/option-names.js';
import { SemaphoreService } from '../semaphore.service.js';
import type { Skip } from '../telemetry/telemetry.js';
import { classNameOf, type GuardDecorator, guardMethod, type OnBusy, validateOnBusy } from './guarded-method.js';

export interface SemaphoreDecoratorOptions extends DecoratorCallOptions<SemaphoreOptions>, HoldOptions {
  /** Semaphore name; default `ClassName.methodName`. */
  name?: string;
  /** `'distributed'` (default): across every process on the store; `'local'`: inside this process. */
  scope?: 'distributed' | 'local';
  /** Seconds in `Retry-After` of its 503 on HTTP routes; default: the module's `retryAfter`. */
  retryAfter?: number;
  /**
   * When every permit is held: `'throw'` (default) rejects with `SemaphoreTimeoutError` (503 on a
   * route); `'skip'` returns `undefined` without running the method, logged at debug level and
   * counted (`nest_lock.skipped`) — the default `timeout` is then `0`, one attempt.
   */
  onBusy?: OnBusy;
}

/** What `@Semaphore` adds to a call's options: its own, whatever its `scope`. */
type SemaphoreDecoratorOwnOptions = Omit<SemaphoreDecoratorOptions, keyof DecoratorCallOptions<SemaphoreOptions>>;

// The key objects of the decorator's options (options/option-names.ts): the names it knows.
const SEMAPHORE_DECORATOR_OWN_KEYS = keysOf<SemaphoreDecoratorOwnOptions>()({
  name: true,
  scope: true,
  retryAfter: true,
  onBusy: true,
  ...HOLD_OPTIONS_KEYS,
});
const SEMAPHORE_DECORATOR_OPTIONS_KEYS = keysOf<SemaphoreDecoratorOptions>()({
  ...SEMAPHORE_DECORATOR_CALL_KEYS,
  ...SEMAPHORE_DECORATOR_OWN_KEYS,
});
/** `scope: 'local'`: of a call's options, a local semaphore honours only its own (`timeout`). */
const LOCAL_SEMAPHORE_DECORATOR_OPTIONS_KEYS = keysOf<LocalSemaphoreOptions & SemaphoreDecoratorOwnOptions>()({
  ...LOCAL_SEMAPHORE_OPTIONS_KEYS,
  ...SEMAPHORE_DECORATOR_OWN_KEYS,
});
const SEMAPHORE_DECORATOR_OPTION_NAMES = optionNames(SEMAPHORE_DECORATOR_OPTIONS_KEYS);
const LOCAL_SEMAPHORE_DECORATOR_OPTION_NAMES = optionNames(LOCAL_SEMAPHORE_DECORATOR_OPTIONS_KEYS);

/**
 * At most `limit` calls of the method run at once — across every process (default) or inside
 * this one (`scope: 'local'`) — on controller route handlers and provider methods alike.
 * On HTTP routes, no permit within `timeout` (or a store that failed) answers 503 Service
 * Unavailable with `Retry-After`.
 *
 * @example
 * ＠Semaphore(2, { timeout: 0 })
 * createReport() { … }
 */
export function Semaphore(limit: number, options: SemaphoreDecoratorOptions = {}): GuardDecorator {
  validateLimit(limit);
  // Misspelt options — and options a local semaphore cannot honour — fail when the class is defined.
  if (options.scope === 'local') validateLocalOptions(options, LOCAL_SEMAPHORE_DECORATOR_OPTION_NAMES);
  else validateCallOptions(SEMAPHORE_DECORATOR_OPTION_NAMES, options);
  const { name, scope = 'distributed', retryAfter, onBusy, ...leaseOptions } = options;
  const skipWhenBusy = validateOnBusy(onBusy) === 'skip';
  splitHoldOptions(leaseOptions); // checks holdAtLeast when the class is defined; each call splits it off
  if (skipWhenBusy) leaseOptions.timeout ??= 0;
  if (name !== undefined) validateKey('name', name);
  if (retryAfter !== undefined) validateRetryAfter(retryAfter);
  if (scope !== 'distributed' && scope !== 'local') {
    throw new InvalidArgumentError('scope', `must be 'distributed' or 'local', got ${String(scope)}`);
  }

  return (target, propertyKey, descriptor) => {
    const semaphoreName = name ?? `${classNameOf(target)}.${String(propertyKey)}`;
    guardMethod(
      {
        decorator: '@Semaphore',
        service: SemaphoreService,
        guardFor: (semaphores) =>
          scope === 'local'
            ? () => semaphores.enterLocal(semaphoreName, limit, leaseOptions)
            : (signal) =>
                semaphores.enter(
                  semaphoreName,
                  limit,
                  signal === undefined ? leaseOptions : { ...leaseOptions, signal },
                ),
        ...(retryAfter === undefined ? {} : { http: { retryAfter } }),
        ...(skipWhenBusy ? { skipWhenBusy: noPermitFree } : {}),
      },
      target,
      propertyKey,
      descriptor,
    );
  };
}

/** `onBusy: 'skip'` for a semaphore: busy is a timeout while every permit was held (not a store's refusal). */
function noPermitFree(error: unknown): Skip | undefined {
  if (!(error instanceof SemaphoreTimeoutError) || error.refusal !== undefined) return undefined;
  return { reason: 'busy', detail: `every permit of semaphore "${error.semaphore}" is held` };
}
