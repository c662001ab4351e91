import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { registerLiveService, unregisterLiveService } from '../live-services.js';
import type { Lock } from '../held-lock.js';
import { errorMessage, InvalidArgumentError, LoadTimeoutError, LockNotConfiguredError } from '../lock.errors.js';
import { createLockLogger, type LockLogger } from '../lock-logger.js';
import { LOCK_OPTIONS } from '../lock.constants.js';
import { LockService } from '../lock.service.js';
import { type ServiceOptions, validateKey } from '../options/call-options.js';
import { LockStore, type SharedValues } from '../store/store.js';
import {
  type CacheBackend,
  cacheManagerBackend,
  type CacheEntry,
  isCacheManager,
  type CacheOptions,
  readEntry,
  refreshesEarly,
  resolveCacheOptions,
  type ResolvedCacheOptions,
  writeEntry,
} from './cache-entry.js';
import { Flight, type FlightKind, type FlightLoader } from './flight.js';
import { readRecord, refusalOf, ValueRefused, valueRecord } from './flight-record.js';
import {
  type ResolvedSingleFlightOptions,
  resolveSingleFlightOptions,
  type SingleFlightOptions,
} from './single-flight-options.js';

/** After a background refresh failed, how long this process serves the stale value without trying again. */
const REFRESH_PAUSE_AFTER_FAILURE = 1_000;

/**
 * The longest a background refresh is waited for (when the caller's timeout is shorter): no caller waits
 * for it, and given up early it would let another process start a second one beside it. A refresh
 * still running once the stale value runs out is given up then.
 */
const LONGEST_REFRESH = 60_000;

/** A value `getOrLoad` loaded (or found cached under the flight's lock), with its cache entry's times. */
interface Filled<T> {
  readonly value: T;
  readonly freshUntil: number;
  readonly loadMs: number;
  /** The value's record, once serialized (or as it travelled, when received): not serialized again. */
  readonly record?: string;
}

/** What an entry adds to its record (`<freshUntil>:<loadMs>:`, two numbers of 13 digits at most). */
const ENTRY_PREFIX_BYTES = 32;

/**
 * The settings of a cache flight, whose result is a `Filled` value: it travels as its cache entry
 * (`<freshUntil>:<loadMs>:<record>`), the value in it as `settings` serialize it.
 */
function filledSettings<T>(key: string, settings: ResolvedCacheOptions<T>): ResolvedSingleFlightOptions<Filled<T>> {
  return {
    ...settings,
    // The value's own record is held to maxValueBytes; its entry may be that and its two numbers.
    maxValueBytes: settings.maxValueBytes + ENTRY_PREFIX_BYTES,
    serialize: ({ value, freshUntil, loadMs, record: serialized }) => {
      const record = serialized ?? valueRecord(key, value, settings);
      const refusal = refusalOf(record);
      if (refusal !== undefined) throw new ValueRefused(refusal);
      return writeEntry({ freshUntil, loadMs, record });
    },
    deserialize: (text) => {
      const entry = readEntry(text);
      if (entry === undefined) throw new Error('not a cache entry (was it left by a process of another build?)');
      const { freshUntil, loadMs, record } = entry;
      return { value: readRecord(key, record, settings), freshUntil, loadMs, record };
    },
  };
}

/** The name under which `getOrLoad` keeps `key`'s value in the cache (its flights are named apart: flight.ts). */
function cacheNameOf(key: string): string {
  return `cache:${key}`;
}

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
export class SingleFlightService implements OnModuleDestroy {
  // By key; each flight's type is its first caller's (the callers of one key ask for one type).
  private readonly flights = new Map<string, Flight<any>>(); // eslint-disable-line @typescript-eslint/no-explicit-any
  private readonly logger: LockLogger;
  private cache?: CacheBackend;
  /** When a background refresh of a key last failed in this process (forgotten when one succeeds). */
  private readonly failedRefreshes = new Map<string, number>();

  /** Built by `LockModule`. @internal */
  constructor(
    @Inject(LockService) private readonly locks: LockService,
    @Inject(LockStore) private readonly store: LockStore,
    @Inject(LOCK_OPTIONS) private readonly options: ServiceOptions,
    @Inject(ModuleRef) private readonly moduleRef: ModuleRef,
  ) {
    this.logger = createLockLogger(options.logger, 'SingleFlightService');
    registerLiveService(SingleFlightService, this);
  }

  onModuleDestroy(): void {
    unregisterLiveService(SingleFlightService, this);
  }

  /**
   * The value of `key` as `loader` loads it, once for all the callers that ask while it loads: here,
   * they share the load in flight; in other processes, they wait for it and receive its value
   * (serialized: JSON unless `serialize` / `deserialize` say otherwise) or its error (a `LoaderError`
   * with the error's name, message, code and status). The loader runs with the key's lock held and
   * renewed, so a loader longer than `lockTtl` never runs twice; nothing is cached once it is done (see
   * `cacheErrorsFor`). This caller's `timeout` (`LoadTimeoutError`) and `signal` end its wait only.
   */
  async load<T>(key: string, loader: () => T | Promise<T>, options: SingleFlightOptions<T> = {}): Promise<T> {
    validateKey('key', key);
    if (typeof loader !== 'function') {
      throw new InvalidArgumentError('loader', `must be a function, got ${typeof loader}`);
    }
    const settings = resolveSingleFlightOptions<T>(options, this.options.defaults);
    return this.fly('load', key, () => loader(), settings, this.sharedValues());
  }

  /**
   * Read-through: the value of `key` in the cache (nest-lock's own, on the store: Redis across
   * processes, the memory store in one), else loaded once for every caller of the fleet as `load`
   * does, and kept for `ttl`. After `ttl`, with `staleFor`, the stale value is served at once while
   * one refresh runs in the background for the whole fleet; before it, a caller may start that
   * refresh early (`earlyRefresh`, XFetch), so that no expiry instant sends every caller to the
   * loader. A "not found" (`null` or `undefined`) is kept for `notFoundTtl`; an error is not kept
   * (unless `cacheErrorsFor`).
   */
  async getOrLoad<T>(key: string, loader: () => T | Promise<T>, options: CacheOptions<T>): Promise<T> {
    validateKey('key', key);
    if (typeof loader !== 'function') {
      throw new InvalidArgumentError('loader', `must be a function, got ${typeof loader}`);
    }
    const settings = resolveCacheOptions<T>(options, this.options.defaults);
    const values = this.sharedValues();
    settings.signal?.throwIfAborted();
    const cache = this.cacheBackend();
    const started = performance.now();
    const cached = readEntry(await this.boundedWait(key, cache.get(cacheNameOf(key)), settings));
    const now = Date.now();
    if (cached !== undefined && now < cached.freshUntil + settings.staleFor) {
      const fresh = now < cached.freshUntil;
      // Stale, or fresh but drawn to refresh early: one refresh for the fleet, in the background —
      // not again from this process for a second after one failed (a backend that is down).
      const failedAt = this.failedRefreshes.get(key);
      const pausing = failedAt !== undefined && now - failedAt < REFRESH_PAUSE_AFTER_FAILURE;
      if (!pausing && (!fresh || refreshesEarly(cached, now, settings.earlyRefresh))) {
        this.refresh(key, loader, settings, cache, cached, values);
      }
      return readRecord(key, cached.record, settings);
    }
    const timeLeft = Math.max(1, settings.timeout - (performance.now() - started));
    return this.loadIntoCache(key, loader, { ...settings, timeout: timeLeft }, cache, cached, values);
  }

  /**
   * One refresh of `key` for the fleet, in the background: not the caller's wait, so neither its
   * signal nor its timeout ends it (given up, the lock would let another process start a second one
   * beside it); it is waited for while the value it refreshes may still be served, up to a minute.
   */
  private refresh<T>(
    key: string,
    loader: () => T | Promise<T>,
    settings: ResolvedCacheOptions<T>,
    cache: CacheBackend,
    cached: CacheEntry,
    values: SharedValues,
  ): void {
    const servedFor = cached.freshUntil + settings.staleFor - Date.now();
    const timeout = Math.max(settings.timeout, Math.min(servedFor, LONGEST_REFRESH));
    this.loadIntoCache(key, loader, { ...settings, signal: undefined, timeout }, cache, cached, values, true).then(
      () => this.failedRefreshes.delete(key),
      (error: unknown) => {
        this.failedRefreshes.set(key, Date.now());
        this.logger.warn(`Refresh of "${key}" failed, its value is served as it was: ${errorMessage(error)}`);
      },
    );
  }

  /**
   * The flight that loads `key` into the cache, unless the value `cached` was read meanwhile
   * replaced. Its result is the value with the times of its cache entry, so that a process that
   * received it from another's load keeps, in a cache of its own (one process's alone), the very
   * entry the loader wrote: the same expiry everywhere (the processes' refreshes meet in one flight),
   * the same load time (early refresh reads it).
   */
  private async loadIntoCache<T>(
    key: string,
    loader: () => T | Promise<T>,
    settings: ResolvedCacheOptions<T>,
    cache: CacheBackend,
    cached: CacheEntry | undefined,
    values: SharedValues,
    background = false,
  ): Promise<T> {
    const fill = (lock: Lock): Promise<Filled<T>> => this.fill(key, loader, settings, cache, cached, lock);
    const keepReceived = cache.perProcess
      ? (filled: Filled<T>): void =>
          // Not waited for: the callers have their value, and a cache that does not answer must not hold them.
          void this.keep(key, filled, settings, cache).catch((error: unknown) =>
            this.logger.warn(`"${key}" could not be kept in this process's cache: ${errorMessage(error)}`),
          )
      : undefined;
    const flight = filledSettings(key, settings);
    const filled = await this.fly('cache', key, fill, flight, values, keepReceived, background);
    return filled.value;
  }

  /** `read`, or `LoadTimeoutError` once the caller's timeout passes (or its signal's reason). */
  private boundedWait<R>(
    key: string,
    read: Promise<R>,
    settings: { timeout: number; signal?: AbortSignal | undefined },
  ): Promise<R> {
    const { timeout, signal } = settings;
    const started = performance.now();
    return new Promise<R>((resolve, reject) => {
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
      };
      const aborted = (): void => (done(), reject(signal!.reason));
      const timer = setTimeout(
        () => (done(), reject(new LoadTimeoutError(key, performance.now() - started, timeout))),
        timeout,
      );
      signal?.addEventListener('abort', aborted, { once: true });
      read.then(
        (value) => (done(), resolve(value)),
        (error: unknown) => (done(), reject(error)),
      );
    });
  }

  /**
   * Under the flight's lock: loads `key` and keeps its value, unless another process did since
   * `seen` was read (a fresh entry other than `seen` is its value: no load).
   */
  private async fill<T>(
    key: string,
    loader: () => T | Promise<T>,
    settings: ResolvedCacheOptions<T>,
    cache: CacheBackend,
    seen: CacheEntry | undefined,
    lock: Lock,
  ): Promise<Filled<T>> {
    const current = readEntry(await cache.get(cacheNameOf(key)));
    if (current !== undefined && current.freshUntil !== seen?.freshUntil && Date.now() < current.freshUntil) {
      return {
        value: readRecord(key, current.record, settings),
        freshUntil: current.freshUntil,
        loadMs: current.loadMs,
      };
    }
    const started = Date.now();
    const value = await loader();
    const fresh = value === null || value === undefined ? settings.notFoundTtl : settings.ttl;
    // Never negative, should the clock step back during the load.
    const freshUntil = Date.now() + fresh;
    // Serialized once: for the cache and for the processes that wait.
    const record = valueRecord(key, value, settings);
    const filled = { value, freshUntil, loadMs: Math.max(0, Date.now() - started), record };
    // Not once the lease ran out (the process froze): the load that came after may have filled it.
    if (lock.validity > 0) await this.keep(key, filled, settings, cache);
    return filled;
  }

  /** Keeps a value with its entry's times, until it may no longer be served (not one that cannot travel). */
  private async keep<T>(
    key: string,
    filled: Filled<T>,
    settings: ResolvedCacheOptions<T>,
    cache: CacheBackend,
  ): Promise<void> {
    const record = filled.record ?? valueRecord(key, filled.value, settings);
    const servedFor = filled.freshUntil + settings.staleFor - Date.now();
    if (refusalOf(record) !== undefined || servedFor <= 0) return;
    const entry = writeEntry({ freshUntil: filled.freshUntil, loadMs: filled.loadMs, record });
    await cache.set(cacheNameOf(key), entry, servedFor);
  }

  /**
   * The application's cache manager (`@nestjs/cache-manager`'s `CACHE_MANAGER`, found in any module)
   * when there is one, else the store's shared values; looked up once.
   */
  private cacheBackend(): CacheBackend {
    if (this.cache !== undefined) return this.cache;
    let manager: unknown;
    try {
      manager = this.moduleRef.get('CACHE_MANAGER', { strict: false });
    } catch {
      manager = undefined; // no CacheModule in the application
    }
    const values = this.sharedValues();
    this.cache = isCacheManager(manager)
      ? cacheManagerBackend(manager)
      : { perProcess: false, get: (name) => values.get(name), set: (name, text, ttl) => values.set(name, text, ttl) };
    return this.cache;
  }

  private sharedValues(): SharedValues {
    const { values } = this.store;
    if (values === undefined) {
      throw new LockNotConfiguredError(
        'SingleFlightService needs a store that keeps shared values (the memory store, Redis, Sentinel or a Cluster): Redlock does not',
      );
    }
    return values;
  }

  /**
   * The flight of `key` of this kind in this process, started if none is: the caller joins it. A
   * caller whose signal has aborted already is refused at once: no flight starts for nobody.
   */
  private fly<T>(
    kind: FlightKind,
    key: string,
    loader: FlightLoader<T>,
    settings: ResolvedSingleFlightOptions<T>,
    values: SharedValues,
    received?: (value: T) => void,
    background = false,
  ): Promise<T> {
    settings.signal?.throwIfAborted();
    const id = `${kind}\0${key}`;
    let flight = this.flights.get(id) as Flight<T> | undefined;
    if (flight === undefined || !flight.joinableWithin(settings.timeout)) {
      const ended = (): void => {
        if (this.flights.get(id) === started) this.flights.delete(id);
      };
      const started: Flight<T> = new Flight(
        kind,
        key,
        loader,
        settings,
        this.locks,
        values,
        this.logger,
        ended,
        received,
      );
      this.flights.set(id, started);
      flight = started;
    }
    return flight.join(settings.timeout, settings.signal, background);
  }
}
