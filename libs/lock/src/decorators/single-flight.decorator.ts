import { HttpException } from '@nestjs/common';
import { defer, from, isObservable, lastValueFrom, type Observable } from 'rxjs';
import { InvalidArgumentError, LoaderError, LockNotConfiguredError } from '../lock.errors.js';
import { soleLiveService } from '../live-services.js';
import { type CacheOptions, resolveCacheOptions } from '../single-flight/cache-entry.js';
import { SingleFlightService } from '../single-flight/single-flight.service.js';
import { resolveSingleFlightOptions, type SingleFlightOptions } from '../single-flight/single-flight-options.js';
import {
  classNameOf,
  copyMetadata,
  type GuardDecorator,
  injectService,
  markErrors,
  returnsObservable,
} from './guarded-method.js';
import { checkArgumentsRead, compileKeyTemplate, type KeyTemplate } from './key-template.js';

/**
 * `@SingleFlight`'s options: those of `SingleFlightService.load` but a `signal` (one call's); with a
 * cache `ttl`, those of `getOrLoad` (read-through).
 */
export type SingleFlightDecoratorOptions =
  Omit<SingleFlightOptions, 'signal'> | Omit<CacheOptions, 'signal' | 'serialize' | 'deserialize'>;

/**
 * One run of the method for all its concurrent calls with the same key, in this process and across
 * the processes on the store (`SingleFlightService.load`); with a cache `ttl`, read through a cache
 * (`getOrLoad`: stale-while-revalidate, early refresh). `key` is a template of the method's arguments
 * (`'product:{0}'`), as for `@WithLock`. On routes and provider methods alike; a method that returns
 * an `Observable` shares its last value. An error of the method reaches every caller; in another
 * process an `HttpException` keeps its status (the same answer on every pod).
 *
 * @example
 * ＠SingleFlight('product:{0}', { ttl: 60_000, staleFor: 300_000 })
 * findProduct(id: number) { … }
 */
export function SingleFlight(key: KeyTemplate, options: SingleFlightDecoratorOptions = {}): GuardDecorator {
  const keyOf = compileKeyTemplate(key);
  if ('signal' in options) {
    throw new InvalidArgumentError(
      'signal',
      "@SingleFlight's options hold for every call: a signal belongs to one call",
    );
  }
  // Misspelt options and bad values fail when the class is defined, not on the first call.
  const cached = 'ttl' in options;
  const checkDefaults = { ttl: 1, timeout: 1 };
  if (cached) resolveCacheOptions(options, checkDefaults);
  else resolveSingleFlightOptions(options, checkDefaults);
  return (target, propertyKey, typed) => {
    const descriptor: PropertyDescriptor = typed;
    const where = `${classNameOf(target)}.${String(propertyKey)}`;
    const original: unknown = descriptor.value;
    if (typeof original !== 'function') {
      throw new InvalidArgumentError('target', `@SingleFlight decorates methods; ${where} is not one`);
    }
    checkArgumentsRead(keyOf, key, target, propertyKey, where);
    const serviceProperty =
      typeof target === 'function' ? undefined : injectService(target, SingleFlightService, '@SingleFlight');
    const declaredObservable = returnsObservable(target, propertyKey);

    const flightOf = (instance: object, args: unknown[]): Promise<unknown> =>
      markErrors(() => {
        const service = serviceOf(instance, serviceProperty, where);
        const loader = async (): Promise<unknown> => {
          const result: unknown = await (original as (...a: unknown[]) => unknown).apply(instance, args);
          return isObservable(result) ? lastValueFrom(result, { defaultValue: undefined }) : result;
        };
        const flight = cached
          ? service.getOrLoad(keyOf(args), loader, options)
          : service.load(keyOf(args), loader, options);
        return flight.catch((error: unknown) => Promise.reject(asHttpAnswer(error)));
      }, {});

    const wrapper = function (this: object, ...args: unknown[]): Promise<unknown> | Observable<unknown> {
      return declaredObservable ? defer(() => from(flightOf(this, args))) : flightOf(this, args);
    };
    copyMetadata(original, wrapper);
    Object.defineProperty(wrapper, 'name', { value: original.name });
    descriptor.value = wrapper;
  };
}

/** The instance's `SingleFlightService`, or the one running (a static method, an instance Nest did not create). */
function serviceOf(instance: object, property: symbol | undefined, where: string): SingleFlightService {
  const injected =
    property === undefined ? undefined : (instance as Record<symbol, SingleFlightService | undefined>)[property];
  const service = injected ?? soleLiveService(SingleFlightService);
  if (typeof service !== 'number') return service;
  throw new LockNotConfiguredError(
    `@SingleFlight on ${where} has no SingleFlightService: ${service} applications run one ` +
      '(import LockModule.forRoot() / forRootAsync() in one)',
  );
}

/**
 * A loader's `HttpException` seen from another process answers as it would have there (its status and
 * body); a nest-lock error (a 409 or 503 there) with its status, code and message.
 */
function asHttpAnswer(error: unknown): unknown {
  if (!(error instanceof LoaderError) || error.status === undefined) return error;
  const { status, code, message } = error;
  const body = (error.response as string | Record<string, unknown> | undefined) ?? {
    statusCode: status,
    message,
    ...(code === undefined ? {} : { code }),
  };
  const answer = new HttpException(body, status, { cause: error });
  answer.name = error.name;
  return answer;
}
