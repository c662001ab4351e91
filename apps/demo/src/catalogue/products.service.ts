import { Inject, Injectable } from '@nestjs/common';
import { LockService, SingleFlightService } from 'nest-lock';
import { DEMO_CONFIG, type DemoConfig } from '../demo.config.js';
import { DemoStorage } from '../storage/demo-storage.js';
import { CatalogueBackend, type Product } from './catalogue-backend.js';

/**
 * How a miss is handled: `on`, the lock and a second read of the cache (lua-resty-lock's workflow);
 * `off`, straight to the backend; `single-flight`, one load for every request that missed, in every
 * process, its product handed to all of them (`SingleFlightService`).
 */
export type MissMode = 'on' | 'off' | 'single-flight';

/** What the cache holds for an id the backend does not know. */
const NOT_FOUND = 'not-found';

/**
 * Cache-aside with dogpile protection (the cache-miss workflow of lua-resty-lock): when a
 * hundred requests miss the same product at once, one of them loads it and the others wait
 * for the lock, then find it in the cache.
 */
@Injectable()
export class ProductsService {
  constructor(
    private readonly locks: LockService,
    private readonly flights: SingleFlightService,
    private readonly backend: CatalogueBackend,
    @Inject(DemoStorage) private readonly storage: DemoStorage,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  /** The product, or `null` when the catalogue has no such id. */
  async findProduct(id: number, mode: MissMode = this.config.lock ? 'on' : 'off'): Promise<Product | null> {
    // Step 1: read the cache.
    const cached = await this.storage.getCached(`product:${id}`);
    if (cached !== undefined) {
      await this.storage.increment('cacheHits');
      return parse(cached);
    }
    await this.storage.increment('cacheMisses');
    if (mode === 'off') return this.loadAndCache(id);
    // The next step: one load for all the requests that missed, here and in the other processes,
    // which receive its product when it is loaded (no lock taken in turn, no second read).
    if (mode === 'single-flight') return this.flights.load(`product:${id}`, () => this.loadAndCache(id));

    // Step 2: a miss. Take the lock on this product: one request loads it, the others wait here.
    const lock = await this.locks.lock(`product:${id}`);
    try {
      if (lock.elapsed > 0) await this.storage.increment('lockWaits');

      // Step 3: read the cache again. The request that held the lock before us may have filled it.
      const filled = await this.storage.getCached(`product:${id}`);
      if (filled !== undefined) return parse(filled);

      // Step 4: load from the backend and fill the cache, a "not found" marker included.
      return await this.loadAndCache(id);
    } finally {
      // Also when the backend failed: the next request must not wait for the lock's ttl.
      await lock.unlock();
    }
  }

  async evict(id: number): Promise<void> {
    await this.storage.deleteCached(`product:${id}`);
  }

  private async loadAndCache(id: number): Promise<Product | null> {
    const product = await this.backend.load(id);
    if (product === null) {
      // A shorter ttl: the product may be added, but until then nobody asks the backend again.
      await this.storage.setCached(`product:${id}`, NOT_FOUND, this.config.notFoundTtlMs);
    } else {
      await this.storage.setCached(`product:${id}`, JSON.stringify(product), this.config.cacheTtlMs);
    }
    return product;
  }
}

function parse(cached: string): Product | null {
  return cached === NOT_FOUND ? null : (JSON.parse(cached) as Product);
}
