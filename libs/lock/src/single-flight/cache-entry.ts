import { InvalidArgumentError } from '../lock.errors.js';
import { duration } from '../options/durations.js';
import { keysOf, optionNames } from '../options/option-names.js';
import { isPlainObject, rejectUnknownNames } from '../options/validation.js';
import {
  resolveSingleFlightOptions,
  type ResolvedSingleFlightOptions,
  SINGLE_FLIGHT_OPTION_KEYS,
  type SingleFlightOptions,
} from './single-flight-options.js';

/** How `SingleFlightService.getOrLoad` keeps a key's value in the cache. All durations in ms. */
export interface CacheOptions<T = unknown> extends SingleFlightOptions<T> {
  /** How long a loaded value is fresh. Required. */
  ttl: number;
  /**
   * After `ttl`, how long the value is still served at once — stale — while one refresh runs in the
   * background, for the whole fleet. Default 0: a caller after `ttl` waits for the load.
   */
  staleFor?: number;
  /**
   * Early refresh (XFetch): a caller of a fresh value starts a background refresh with a probability
   * that rises as its expiry nears, scaled by how long the last load took; `earlyRefresh` is the
   * scale (1 as in the paper, larger refreshes earlier, 0 never). Default 1.
   */
  earlyRefresh?: number;
  /** How long a "not found" — the loader returned `null` or `undefined` — is cached. Default: `ttl`. */
  notFoundTtl?: number;
}

export interface ResolvedCacheOptions<T> extends ResolvedSingleFlightOptions<T> {
  readonly ttl: number;
  readonly staleFor: number;
  readonly earlyRefresh: number;
  readonly notFoundTtl: number;
}

const CACHE_OPTION_NAMES = optionNames(
  keysOf<CacheOptions>()({
    ...SINGLE_FLIGHT_OPTION_KEYS,
    ttl: true,
    staleFor: true,
    earlyRefresh: true,
    notFoundTtl: true,
  }),
);

/** `options` checked, `ttl` required, the rest with their defaults. */
export function resolveCacheOptions<T>(
  options: unknown,
  defaults: { ttl: number; timeout: number },
): ResolvedCacheOptions<T> {
  if (!isPlainObject(options)) throw new InvalidArgumentError('options', 'must be an object with a ttl');
  rejectUnknownNames('', options as object, CACHE_OPTION_NAMES);
  const { ttl, staleFor, earlyRefresh, notFoundTtl, ...flight } = options as CacheOptions<T>;
  if (ttl === undefined) throw new InvalidArgumentError('ttl', 'is required: how long a loaded value is fresh (ms)');
  const fresh = duration('ttl', ttl);
  if (earlyRefresh !== undefined && (typeof earlyRefresh !== 'number' || !(earlyRefresh >= 0) || earlyRefresh > 100)) {
    throw new InvalidArgumentError('earlyRefresh', `must be a number from 0 to 100, got ${String(earlyRefresh)}`);
  }
  return {
    ...resolveSingleFlightOptions<T>(flight, defaults),
    ttl: fresh,
    staleFor: staleFor === undefined ? 0 : duration('staleFor', staleFor, 0),
    earlyRefresh: earlyRefresh ?? 1,
    notFoundTtl: notFoundTtl === undefined ? fresh : duration('notFoundTtl', notFoundTtl),
  };
}

/** A value in the cache: until when it is fresh (`Date.now()` ms), how long its load took, and its record. */
export interface CacheEntry {
  readonly freshUntil: number;
  readonly loadMs: number;
  /** As a single-flight result travels (see flight-record.ts). */
  readonly record: string;
}

/** `<freshUntil>:<loadMs>:<record>`: two numbers, then the record as it is. */
export function writeEntry({ freshUntil, loadMs, record }: CacheEntry): string {
  return `${Math.max(0, Math.round(freshUntil))}:${Math.max(0, Math.round(loadMs))}:${record}`;
}

/** The entry a cached text holds; `undefined` for none, or for a text this version cannot read. */
export function readEntry(text: string | undefined): CacheEntry | undefined {
  // Its record begins with its kind (flight-record.ts): `v`, `u`, `e` or `x`.
  const match = text === undefined ? null : /^(\d+):(\d+):(?=[vuex])/.exec(text);
  if (match === null) return undefined;
  return { freshUntil: Number(match[1]), loadMs: Number(match[2]), record: text!.slice(match[0].length) };
}

/**
 * XFetch (Vattani, Chierichetti, Lowenstein, VLDB 2015): whether a caller at `now` refreshes `entry`
 * early — true with a probability that rises to 1 at its expiry, the sooner the longer its load took.
 */
export function refreshesEarly(entry: CacheEntry, now: number, scale: number): boolean {
  if (scale === 0) return false;
  return now - entry.loadMs * scale * Math.log(Math.random()) >= entry.freshUntil;
}

/**
 * Where `getOrLoad` keeps values: the store's shared values, or the application's cache manager
 * (`@nestjs/cache-manager`'s `CACHE_MANAGER`, whose store may be one process's alone).
 */
export interface CacheBackend {
  /** Possibly one process's alone: a process that received a value from another keeps it too. */
  readonly perProcess: boolean;
  get(name: string): Promise<string | undefined>;
  set(name: string, text: string, ttl: number): Promise<void>;
}

/** What `getOrLoad` asks of a cache manager (cache-manager 5–7 and `@nestjs/cache-manager` have it). */
export interface CacheManagerLike {
  get(key: string): Promise<unknown>;
  set(key: string, value: unknown, ttl?: number): Promise<unknown>;
}

export function isCacheManager(candidate: unknown): candidate is CacheManagerLike {
  const { get, set } = (candidate ?? {}) as { get?: unknown; set?: unknown };
  return typeof get === 'function' && typeof set === 'function';
}

/** A cache manager as a `CacheBackend`: its keys prefixed `nest-lock:`, its ttl in ms (cache-manager ≥ 5). */
export function cacheManagerBackend(manager: CacheManagerLike): CacheBackend {
  return {
    perProcess: true,
    get: async (name) => {
      const text = await manager.get(`nest-lock:${name}`);
      return typeof text === 'string' ? text : undefined;
    },
    set: async (name, text, ttl) => {
      await manager.set(`nest-lock:${name}`, text, ttl);
    },
  };
}
