import { Inject } from '@nestjs/common';
import { from, isObservable, Observable, type ObservableInput } from 'rxjs';
import { type DecoratorHttpSettings, markRaisedByDecorator } from '../http/decorator-errors.js';
import type { ChainLease, HoldTicket } from '../lease/lease-chain.js';
import { soleLiveService } from '../live-services.js';
import { InvalidArgumentError, LockBackendError, LockNotConfiguredError } from '../lock.errors.js';
import type { Skip } from '../telemetry/telemetry.js';
import { describe } from '../options/validation.js';

/**
 * The methods the decorators accept: taking a lock is asynchronous, so a decorated method returns a
 * promise (or an Observable), and its type says so.
 */
export type GuardableMethod = (...args: never[]) => PromiseLike<unknown> | Observable<unknown>;

/** The decorator signature of `@WithLock` and `@Semaphore`. */
export type GuardDecorator = <T extends GuardableMethod>(
  target: object,
  propertyKey: string | symbol,
  descriptor: TypedPropertyDescriptor<T>,
) => void;

/**
 * What one call of a decorated method must hold: entering joins the lease the call chain holds or
 * waits for a new one (the services' `enter`), and the ticket's `leave()` gives it back.
 */
export type MethodGuard = (signal?: AbortSignal) => Promise<GuardTicket | typeof SKIPPED>;

/** What a decorated call holds while it runs: a lease's ticket, or (`@LeaderOnly`) nothing to give back. */
export type GuardTicket = Pick<HoldTicket<ChainLease>, 'run' | 'leave'>;

/** What a guard gives instead of a ticket when the call is skipped: its lease was held elsewhere (`onBusy: 'skip'`). */
export const SKIPPED = null;

/** What a decorated call does when its lease is held elsewhere: throw the kind's timeout error, or return `undefined` without running. */
export type OnBusy = 'throw' | 'skip';

/** `onBusy`: `'throw'` or `'skip'`; `undefined` for the default (`'throw'`). */
export function validateOnBusy(value: unknown): OnBusy | undefined {
  if (value !== undefined && value !== 'throw' && value !== 'skip') {
    throw new InvalidArgumentError('onBusy', `must be 'throw' or 'skip', got ${describe(value)}`);
  }
  return value;
}

/** A service whose decorated calls may be skipped (`onBusy: 'skip'`): it logs and counts each skip. */
export interface SkippingService {
  skipped(where: string, skip: Skip): void;
}

export interface GuardedMethodDefinition<S extends SkippingService> {
  /** Decorator name for messages, e.g. `@WithLock`. */
  decorator: string;
  /** The service the guard needs, injected into the instance as a property. */
  service: abstract new (...args: never[]) => S;
  /** Builds the guard of one call; runs before anything is acquired, so its errors reject the call. */
  guardFor(service: S, args: unknown[]): MethodGuard;
  /** What `LockInterceptor` answers on HTTP with this decorator's errors (its `retryAfter`). */
  http?: DecoratorHttpSettings;
  /**
   * `onBusy: 'skip'`: a call whose guard rejects because its lease is held elsewhere (`busy` says so
   * of the kind's timeout error), or because the store is away (`BACKEND_UNAVAILABLE`: nobody can
   * tell whether another process runs it), returns `undefined` without running — an Observable
   * completes without a value — and the service's `skipped` is told (a verbose line, a metric). Any
   * other error still rejects.
   */
  skipWhenBusy?: (error: unknown) => Skip | undefined;
}

/**
 * Replaces a method, when its class is defined, by a wrapper that holds a lock or permit
 * around each call. Interceptors alone cannot do this: they never run for provider methods and
 * see `[req, res, next]` rather than the method's arguments. The wrapper finds its service at call
 * time in a property that Nest injects, so a class whose module cannot provide it fails at
 * bootstrap; an instance built by a factory uses the one service running in the process.
 *
 * - A call inside a chain that already holds the same key or name joins that lease (reentrancy);
 *   the last holder to finish gives it back.
 * - The method's own result and errors pass through unchanged; a failed release is logged.
 * - A method declared to return an `Observable` still returns one: the lease is taken on
 *   subscription and held until it completes, errors or is unsubscribed. A result that turns out
 *   to be an `Observable` otherwise was made under the lease, and each subscription to it takes the
 *   lease again for its own life.
 * - Metadata of other decorators (`@Get`, `@Cron`, …) and the method's name are kept.
 */
export function guardMethod<S extends SkippingService>(
  definition: GuardedMethodDefinition<S>,
  target: object,
  propertyKey: string | symbol,
  descriptor: PropertyDescriptor,
): void {
  const original: unknown = descriptor.value;
  const where = `${classNameOf(target)}.${String(propertyKey)}`;
  if (typeof original !== 'function') {
    throw new InvalidArgumentError('target', `${definition.decorator} decorates methods; ${where} is not one`);
  }
  // A static method has no instance for Nest to inject into: it uses the one running service.
  const serviceProperty =
    typeof target === 'function' ? undefined : injectService(target, definition.service, definition.decorator);
  const declaredObservable = returnsObservable(target, propertyKey);
  const http = definition.http ?? {};

  function guardOf(instance: object, args: unknown[]): MethodGuard {
    const injected =
      serviceProperty === undefined ? undefined : (instance as Record<symbol, S | undefined>)[serviceProperty];
    const service = injected ?? soleLiveService(definition.service);
    if (typeof service === 'number') {
      const { name } = definition.service;
      throw new LockNotConfiguredError(
        `${definition.decorator} on ${where} has no ${name}: Nest did not create this ${target.constructor.name} ` +
          `with its injector, and ${service} applications run a ${name} ` +
          '(import LockModule.forRoot() / forRootAsync() in one). ' +
          'The method does not run unprotected.',
      );
    }
    const guard = markErrors(() => definition.guardFor(service, args), http);
    const busy = definition.skipWhenBusy;
    if (busy === undefined) return (signal) => markErrors(() => guard(signal), http);
    return (signal) =>
      markErrors(() => guard(signal), http).catch((error: unknown) => {
        const why = busy(error) ?? storeAway(error);
        if (why === undefined) throw error;
        service.skipped(where, why);
        return SKIPPED;
      });
  }

  const wrapper = function (this: object, ...args: unknown[]): unknown {
    const call = () => (original as (...a: unknown[]) => unknown).apply(this, args);
    return declaredObservable
      ? guardedObservable(() => guardOf(this, args), call as () => ObservableInput<unknown>)
      : guardedCall(() => guardOf(this, args), call);
  };
  copyMetadata(original, wrapper);
  Object.defineProperty(wrapper, 'name', { value: original.name });
  descriptor.value = wrapper;
}

async function guardedCall(guardOf: () => MethodGuard, call: () => unknown): Promise<unknown> {
  const enter = guardOf();
  const ticket = await enter();
  if (ticket === SKIPPED) return undefined;
  let result: unknown;
  try {
    result = await ticket.run(call);
  } catch (error) {
    await ticket.leave();
    throw error;
  }
  await ticket.leave();
  // An Observable the method did not declare: its body ran under the lease, and each subscription
  // takes the lease again for its own life (one lease for all of them would end with the first).
  if (isObservable(result)) return guardedObservable(guardOf, () => result);
  return result;
}

function guardedObservable(guardOf: () => MethodGuard, call: () => ObservableInput<unknown>): Observable<unknown> {
  return new Observable<unknown>((subscriber) => {
    const abort = new AbortController();
    let ticket: GuardTicket | undefined;
    let inner: { unsubscribe(): void } | undefined;
    // Entered synchronously on subscription (a promise's executor runs at once, and turns a throw
    // into a rejection), so that a subscription inside a holder joins its lease.
    new Promise<GuardTicket | typeof SKIPPED>((resolve) => resolve(guardOf()(abort.signal))).then(
      (entered) => {
        if (entered === SKIPPED) return subscriber.complete();
        ticket = entered;
        // Unsubscribed while waiting: a lease won at that moment is not wanted any more.
        if (subscriber.closed) return void entered.leave();
        try {
          inner = entered.run(() => from(call()).subscribe(subscriber));
        } catch (error) {
          subscriber.error(error);
        }
      },
      (error: unknown) => subscriber.error(error),
    );
    return () => {
      abort.abort();
      inner?.unsubscribe();
      void ticket?.leave();
    };
  });
}

/** The store could not be reached (an outage the module logs once): a skip, not an error per call. */
function storeAway(error: unknown): Skip | undefined {
  if (!(error instanceof LockBackendError) || error.code !== 'BACKEND_UNAVAILABLE') return undefined;
  return { reason: 'unavailable', detail: `the store is unavailable (${error.message})` };
}

/** Runs `fn`, marking what it throws or rejects with as raised by a decorator (for the HTTP mapping). */
export function markErrors<T>(fn: () => T, http: DecoratorHttpSettings): T {
  try {
    const result = fn();
    if (result instanceof Promise)
      return result.catch((error: unknown) => Promise.reject(markRaisedByDecorator(error, http))) as T;
    return result;
  } catch (error) {
    throw markRaisedByDecorator(error, http);
  }
}

const injectedProperties = new WeakMap<object, Map<unknown, symbol>>();

/**
 * Declares a property injection of `service` on the class once, and returns the property's key.
 * Nest names the property in the error of an application without LockModule, so its description
 * says what to do.
 */
export function injectService(
  target: object,
  service: abstract new (...args: never[]) => unknown,
  decorator: string,
): symbol {
  const properties = injectedProperties.get(target) ?? new Map<unknown, symbol>();
  injectedProperties.set(target, properties);
  let property = properties.get(service);
  if (property === undefined) {
    property = Symbol(`${decorator} needs ${service.name}: import LockModule.forRoot() / forRootAsync()`);
    properties.set(service, property);
    Inject(service)(target, property);
  }
  return property;
}

/** The class a decorator was applied in: the prototype's constructor, or the class itself for a static method. */
export function classNameOf(target: object): string {
  return typeof target === 'function' ? target.name : target.constructor.name;
}

export function returnsObservable(target: object, propertyKey: string | symbol): boolean {
  const type: unknown = Reflect.getMetadata('design:returntype', target, propertyKey);
  return typeof type === 'function' && (type === Observable || type.prototype instanceof Observable);
}

/** Metadata that decorators applied before this one (`@Get`, `@Cron`, swagger, …) stored on the method itself. */
export function copyMetadata(from: object, to: object): void {
  for (const key of Reflect.getOwnMetadataKeys(from)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, from), to);
  }
}
