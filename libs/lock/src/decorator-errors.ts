/**
 * Errors raised by `@WithLock` / `@Semaphore` themselves (a busy lock, no permit, a key template
 * that resolved to nothing), as opposed to errors of the decorated method, which pass through
 * untouched. `LockInterceptor` maps only these to HTTP responses.
 */
const raisedByDecorator = new WeakSet<object>();

export function markRaisedByDecorator(error: unknown): unknown {
  if (typeof error === 'object' && error !== null) raisedByDecorator.add(error);
  return error;
}

export function isRaisedByDecorator(error: unknown): boolean {
  return typeof error === 'object' && error !== null && raisedByDecorator.has(error);
}
