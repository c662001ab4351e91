import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { registerLiveService, unregisterLiveService } from '../live-services.js';
import { errorMessage, InvalidArgumentError, LockNotConfiguredError } from '../lock.errors.js';
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
import { Flight, type FlightKind } from './flight.js';
import { readRecord, valueRecord } from './flight-record.js';
import {
  type ResolvedSingleFlightOptions,
  resolveSingleFlightOptions,
  type SingleFlightOptions,
} from './single-flight-options.js';

/** After a background refresh failed, how long this process serves the stale value without trying again. */
const REFRESH_PAUSE_AFTER_FAILURE = 1_000;

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
    return this.fly('load', key, loader, settings, this.sharedValues());
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
    const cache = this.cacheBackend();
    const cached = readEntry(await cache.get(cacheNameOf(key)));
    const now = Date.now();
    if (cached !== undefined && now < cached.freshUntil + settings.staleFor) {
      const fresh = now < cached.freshUntil;
      // Stale, or fresh but drawn to refresh early: one refresh for the fleet, in the background —
      // not again from this process for a second after one failed (a backend that is down).
      const failedAt = this.failedRefreshes.get(key);
      const pausing = failedAt !== undefined && now - failedAt < REFRESH_PAUSE_AFTER_FAILURE;
      if (!pausing && (!fresh || refreshesEarly(cached, now, settings.earlyRefresh))) {
        // Not the caller's wait: its signal does not end the refresh.
        const refresh = { ...settings, signal: undefined };
        this.fly('cache', key, () => this.fill(key, loader, refresh, cache, cached), refresh, values).then(
          () => this.failedRefreshes.delete(key),
          (error: unknown) => {
            this.failedRefreshes.set(key, Date.now());
            this.logger.warn(`Refresh of "${key}" failed, its value is served as it was: ${errorMessage(error)}`);
          },
        );
      }
      return readRecord(key, cached.record, settings);
    }
    let filledHere = false;
    const fill = (): Promise<T> => ((filledHere = true), this.fill(key, loader, settings, cache, cached));
    const value = await this.fly('cache', key, fill, settings, values);
    // Received from another process's load: a cache of this process's own keeps it too.
    if (!filledHere && cache.perProcess) {
      await this.keep(key, value, settings, cache, 0).catch((error: unknown) =>
        this.logger.warn(`"${key}" could not be kept in this process's cache: ${errorMessage(error)}`),
      );
    }
    return value;
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
  ): Promise<T> {
    const current = readEntry(await cache.get(cacheNameOf(key)));
    if (current !== undefined && current.freshUntil !== seen?.freshUntil && Date.now() < current.freshUntil) {
      return readRecord(key, current.record, settings);
    }
    const started = Date.now();
    const value = await loader();
    // Never negative, should the clock step back during the load (the entry could not be read).
    await this.keep(key, value, settings, cache, Math.max(0, Date.now() - started));
    return value;
  }

  /** Keeps `value` in the cache, fresh from now (a value that cannot travel is not kept: see valueRecord). */
  private async keep<T>(
    key: string,
    value: T,
    settings: ResolvedCacheOptions<T>,
    cache: CacheBackend,
    loadMs: number,
  ): Promise<void> {
    const record = valueRecord(key, value, settings);
    if (record.startsWith('x')) return;
    const fresh = value === null || value === undefined ? settings.notFoundTtl : settings.ttl;
    const entry = writeEntry({ freshUntil: Date.now() + fresh, loadMs, record });
    await cache.set(cacheNameOf(key), entry, fresh + settings.staleFor);
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
    loader: () => T | Promise<T>,
    settings: ResolvedSingleFlightOptions<T>,
    values: SharedValues,
  ): Promise<T> {
    settings.signal?.throwIfAborted();
    const id = `${kind}\0${key}`;
    let flight = this.flights.get(id) as Flight<T> | undefined;
    if (flight === undefined) {
      const ended = (): void => {
        if (this.flights.get(id) === started) this.flights.delete(id);
      };
      const started: Flight<T> = new Flight(kind, key, loader, settings, this.locks, values, this.logger, ended);
      this.flights.set(id, started);
      flight = started;
    }
    return flight.join(settings.timeout, settings.signal);
  }
}
