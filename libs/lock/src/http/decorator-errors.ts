/**
 * Errors raised by `@WithLock` / `@Semaphore` themselves (a busy lock, no permit, a key template
 * that resolved to nothing, a store that failed), as opposed to errors of the decorated method,
 * which pass through untouched. `LockInterceptor` maps only these to HTTP responses, with the
 * HTTP settings of the decorator that raised them.
 */
export interface DecoratorHttpSettings {
  /** The decorator's `retryAfter` (seconds), if it set one. */
  retryAfter?: number;
}

const raisedByDecorator = new WeakMap<object, DecoratorHttpSettings>();

export function markRaisedByDecorator(error: unknown, settings: DecoratorHttpSettings = {}): unknown {
  if (typeof error === 'object' && error !== null && !raisedByDecorator.has(error)) {
    raisedByDecorator.set(error, settings);
  }
  return error;
}

export function isRaisedByDecorator(error: unknown): boolean {
  return typeof error === 'object' && error !== null && raisedByDecorator.has(error);
}

/** The settings of the decorator that raised `error`; `undefined` for any other error. */
export function decoratorSettingsOf(error: unknown): DecoratorHttpSettings | undefined {
  return typeof error === 'object' && error !== null ? raisedByDecorator.get(error) : undefined;
}
