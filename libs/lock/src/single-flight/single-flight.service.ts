import { Inject, Injectable } from '@nestjs/common';
import { InvalidArgumentError, LockNotConfiguredError } from '../lock.errors.js';
import { createLockLogger, type LockLogger } from '../lock-logger.js';
import { LOCK_OPTIONS } from '../lock.constants.js';
import { LockService } from '../lock.service.js';
import { type ServiceOptions, validateKey } from '../options/call-options.js';
import { LockStore } from '../store/store.js';
import { Flight } from './flight.js';
import { resolveSingleFlightOptions, type SingleFlightOptions } from './single-flight-options.js';

/**
 * One load for a key, however many callers ask for it at once, in this process and across the
 * processes on the store: the callers of a process share one promise; across processes one runs the
 * loader under the key's lock, renewed while it runs, and the others receive its result — or its
 * error — when it finishes. Built on `LockService`: the key's lock (to write: the loader; to read: the
 * waiters, let in together by its release) and a short-lived value on the store.
 *
 * For efficiency, not correctness: a load that nobody waits for any more, a result that cannot be
 * left on the store, or a loader's process that dies makes a second load, never a wrong value.
 */
@Injectable()
export class SingleFlightService {
  // By key; each flight's type is its first caller's (the callers of one key ask for one type).
  private readonly flights = new Map<string, Flight<any>>(); // eslint-disable-line @typescript-eslint/no-explicit-any
  private readonly logger: LockLogger;

  /** Built by `LockModule`. @internal */
  constructor(
    @Inject(LockService) private readonly locks: LockService,
    @Inject(LockStore) private readonly store: LockStore,
    @Inject(LOCK_OPTIONS) private readonly options: ServiceOptions,
  ) {
    this.logger = createLockLogger(options.logger, 'SingleFlightService');
  }

  /**
   * The value of `key` as `loader` loads it, once for all the callers that ask while it loads: here,
   * they share the load in flight; in other processes, they wait for it and receive its value
   * (serialized: JSON unless `serialize` / `deserialize` say otherwise) or its error (a `LoaderError`
   * with the error's name, message, code and status). The loader runs with the key's lock held and
   * renewed, so a loader longer than `ttl` never runs twice; nothing is cached once it is done (see
   * `cacheErrorsFor`). This caller's `timeout` (`LoadTimeoutError`) and `signal` end its wait only.
   */
  async load<T>(key: string, loader: () => T | Promise<T>, options: SingleFlightOptions<T> = {}): Promise<T> {
    validateKey('key', key);
    if (typeof loader !== 'function') {
      throw new InvalidArgumentError('loader', `must be a function, got ${typeof loader}`);
    }
    const settings = resolveSingleFlightOptions<T>(options, this.options.defaults);
    const { values } = this.store;
    if (values === undefined) {
      throw new LockNotConfiguredError(
        'SingleFlightService needs a store that keeps shared values (the memory store, Redis, Sentinel or a Cluster): Redlock does not',
      );
    }
    let flight = this.flights.get(key) as Flight<T> | undefined;
    if (flight === undefined) {
      const ended = (): void => {
        if (this.flights.get(key) === started) this.flights.delete(key);
      };
      const started: Flight<T> = new Flight(key, loader, settings, this.locks, values, this.logger, ended);
      this.flights.set(key, started);
      flight = started;
    }
    return flight.join(settings.timeout, settings.signal);
  }
}
