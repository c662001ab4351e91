import { Inject, UseInterceptors } from '@nestjs/common';
import { defer, from, isObservable, Observable, type ObservableInput } from 'rxjs';
import { warnReleaseFailed } from '../lease.js';
import { type ChainLease, type ChainLeaseKind, leaseHeldByChain, runHolding } from '../lock.context.js';
import { LockInterceptor } from '../lock.interceptor.js';
import { markRaisedByDecorator } from './decorator-errors.js';
import { soleLiveService } from './live-services.js';

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

/** What one call of a decorated method must hold, and how to take and give it back. */
export interface MethodGuard<L extends ChainLease = ChainLease> {
  kind: ChainLeaseKind;
  /** The lock key or semaphore name of this call. */
  id: string;
  acquire(signal?: AbortSignal): Promise<L>;
  release(lease: L): Promise<unknown>;
}

export interface GuardedMethodDefinition<S, L extends ChainLease> {
  /** Decorator name for messages, e.g. `@WithLock`. */
  decorator: string;
  /** The service the guard needs, injected into the instance as a property. */
  service: abstract new (...args: never[]) => S;
  /** Builds the guard of one call; runs before anything is acquired, so its errors reject the call. */
  guardFor(service: S, args: unknown[]): MethodGuard<L>;
}

/**
 * Replaces a method, when its class is defined, by a wrapper that holds a lock or permit
 * around each call. Interceptors alone cannot do this: they never run for provider methods and
 * see `[req, res, next]` rather than the method's arguments. The wrapper finds its service at call
 * time in a property that Nest injects, so a class whose module cannot provide it fails at
 * bootstrap; an instance built by a factory uses the one service running in the process.
 *
 * - A call inside a chain that already holds the same key or name runs at once (reentrancy).
 * - The method's own result and errors pass through unchanged; a failed release is logged.
 * - A method declared to return an `Observable` still returns one: the lease is taken on
 *   subscription and held until it completes, errors or is unsubscribed. A result that turns out
 *   to be an `Observable` otherwise is held the same way from the call on.
 * - Metadata of other decorators (`@Get`, `@Cron`, …) and the method's name are kept.
 */
export function guardMethod<S, L extends ChainLease>(
  definition: GuardedMethodDefinition<S, L>,
  target: object,
  propertyKey: string | symbol,
  descriptor: PropertyDescriptor,
): void {
  const original: unknown = descriptor.value;
  const where = `${target.constructor.name}.${String(propertyKey)}`;
  if (typeof original !== 'function') {
    throw new TypeError(`${definition.decorator} decorates methods; ${where} is not one`);
  }
  const serviceProperty = injectService(target, definition.service);
  const declaredObservable = returnsObservable(target, propertyKey);

  function guardOf(instance: object, args: unknown[]): MethodGuard<L> {
    const injected = (instance as Record<symbol, S | undefined>)[serviceProperty];
    const service = injected ?? soleLiveService(definition.service);
    if (typeof service === 'number') {
      const { name } = definition.service;
      throw new Error(
        `${definition.decorator} on ${where} has no ${name}: Nest did not create this ${target.constructor.name} ` +
          `with its injector, and ${service} applications run a ${name} (import LockModule.forRoot() in one). ` +
          'The method does not run unprotected.',
      );
    }
    return markErrors(() => definition.guardFor(service, args));
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
  UseInterceptors(LockInterceptor)(target, propertyKey, descriptor);
}

async function guardedCall<L extends ChainLease>(guardOf: () => MethodGuard<L>, call: () => unknown): Promise<unknown> {
  const guard = guardOf();
  if (leaseHeldByChain(guard.kind, guard.id)) return call();

  const lease = await markErrors(() => guard.acquire());
  let result: unknown;
  try {
    result = await runHolding(guard.kind, guard.id, lease, call);
  } catch (error) {
    await releaseQuietly(guard, lease);
    throw error;
  }
  if (isObservable(result)) return holdUntilFinished(result, guard, lease);
  await releaseQuietly(guard, lease);
  return result;
}

function guardedObservable<L extends ChainLease>(
  guardOf: () => MethodGuard<L>,
  call: () => ObservableInput<unknown>,
): Observable<unknown> {
  return defer(() => {
    const guard = guardOf();
    if (leaseHeldByChain(guard.kind, guard.id)) return from(call());

    return new Observable<unknown>((subscriber) => {
      const abort = new AbortController();
      let lease: L | undefined;
      let inner: { unsubscribe(): void } | undefined;
      markErrors(() => guard.acquire(abort.signal)).then(
        (acquired) => {
          // Unsubscribed while waiting: a lease won at that moment is not wanted any more.
          if (subscriber.closed) return void releaseQuietly(guard, acquired);
          lease = acquired;
          try {
            inner = runHolding(guard.kind, guard.id, acquired, () => from(call()).subscribe(subscriber));
          } catch (error) {
            subscriber.error(error);
          }
        },
        (error: unknown) => subscriber.error(error),
      );
      return () => {
        abort.abort();
        inner?.unsubscribe();
        if (lease) void releaseQuietly(guard, lease);
      };
    });
  });
}

/** An Observable result of a call that already holds its lease: released when it finishes or is dropped. */
function holdUntilFinished<L extends ChainLease>(
  source: Observable<unknown>,
  guard: MethodGuard<L>,
  lease: L,
): Observable<unknown> {
  return new Observable<unknown>((subscriber) => {
    const inner = runHolding(guard.kind, guard.id, lease, () => source.subscribe(subscriber));
    return () => {
      inner.unsubscribe();
      void releaseQuietly(guard, lease);
    };
  });
}

async function releaseQuietly<L extends ChainLease>(guard: MethodGuard<L>, lease: L): Promise<void> {
  try {
    await guard.release(lease);
  } catch (error) {
    // The method's own result or error stands.
    warnReleaseFailed(`"${guard.id}"`, error);
  }
}

/** Runs `fn`, marking what it throws or rejects with as raised by a decorator (for the HTTP mapping). */
function markErrors<T>(fn: () => T): T {
  try {
    const result = fn();
    if (result instanceof Promise)
      return result.catch((error: unknown) => Promise.reject(markRaisedByDecorator(error))) as T;
    return result;
  } catch (error) {
    throw markRaisedByDecorator(error);
  }
}

const injectedProperties = new WeakMap<object, Map<unknown, symbol>>();

/** Declares a property injection of `service` on the class once, and returns the property's key. */
function injectService(target: object, service: abstract new (...args: never[]) => unknown): symbol {
  const properties = injectedProperties.get(target) ?? new Map<unknown, symbol>();
  injectedProperties.set(target, properties);
  let property = properties.get(service);
  if (property === undefined) {
    property = Symbol(`nest-lock:${service.name}`);
    properties.set(service, property);
    Inject(service)(target, property);
  }
  return property;
}

function returnsObservable(target: object, propertyKey: string | symbol): boolean {
  const type: unknown = Reflect.getMetadata('design:returntype', target, propertyKey);
  return typeof type === 'function' && (type === Observable || type.prototype instanceof Observable);
}

/** Metadata that decorators applied before this one (`@Get`, `@Cron`, swagger, …) stored on the method itself. */
function copyMetadata(from: object, to: object): void {
  for (const key of Reflect.getOwnMetadataKeys(from)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, from), to);
  }
}
