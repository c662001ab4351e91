/**
 * The LockService / SemaphoreService instances of the applications running in this process.
 * A decorated method finds its service in a property Nest injects; an instance Nest built
 * through `useFactory` or `useValue` has no such property, and falls back to the one service
 * of that class that is running — if there is exactly one, so that it is never ambiguous.
 */
const live = new Map<abstract new (...args: never[]) => unknown, Set<unknown>>();

export function registerLiveService(type: abstract new (...args: never[]) => unknown, service: unknown): void {
  const services = live.get(type) ?? new Set();
  live.set(type, services);
  services.add(service);
}

export function unregisterLiveService(type: abstract new (...args: never[]) => unknown, service: unknown): void {
  live.get(type)?.delete(service);
}

/** The one running instance of `type`, or how many there are when it is not exactly one. */
export function soleLiveService<S>(type: abstract new (...args: never[]) => S): S | number {
  const services = live.get(type);
  return services?.size === 1 ? ([...services][0] as S) : (services?.size ?? 0);
}
