/**
 * Errors raised by `@WithLock` / `@Semaphore` themselves (a busy lock, no permit, a key made of the
 * method's arguments that is not one, a store that failed), as opposed to errors of the decorated
 * method: `LockInterceptor` answers them with the HTTP settings of the decorator that raised them,
 * and a key they could not make of the request's input is the client's fault (400).
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

/** The settings of the decorator that raised `error`; `undefined` for any other error. */
export function decoratorSettingsOf(error: unknown): DecoratorHttpSettings | undefined {
  return typeof error === 'object' && error !== null ? raisedByDecorator.get(error) : undefined;
}
