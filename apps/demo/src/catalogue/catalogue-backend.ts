import { Inject, Injectable } from '@nestjs/common';
import { setTimeout as delay } from 'node:timers/promises';
import { DEMO_CONFIG, type DemoConfig } from '../demo.config.js';
import { DemoStorage } from '../storage/demo-storage.js';

export interface Product {
  id: number;
  name: string;
  priceCents: number;
}

/** Products 1–10,000 exist; any other id is unknown. */
export const CATALOGUE_SIZE = 10_000;

export class BackendFailure extends Error {
  // Its name travels with a single-flight load's error to the other processes (LoaderError.name).
  override readonly name = 'BackendFailure';
}

/** A slow product database: every call takes `BACKEND_LATENCY_MS` and is counted. */
@Injectable()
export class CatalogueBackend {
  /** Ids whose next loads fail, to show that a failed load frees the lock at once. */
  private readonly failing = new Set<number>();

  constructor(
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
    @Inject(DemoStorage) private readonly storage: DemoStorage,
  ) {}

  async load(id: number): Promise<Product | null> {
    await Promise.all([this.storage.increment('backendCalls'), this.storage.countLoad(id)]);
    await delay(this.config.backendLatencyMs);
    if (this.failing.has(id)) throw new BackendFailure(`the catalogue backend failed to load product ${id}`);
    if (id < 1 || id > CATALOGUE_SIZE) return null;
    return { id, name: `Product ${id}`, priceCents: 100 + ((id * 7919) % 10_000) };
  }

  failLoadsOf(id: number, fail: boolean): void {
    if (fail) this.failing.add(id);
    else this.failing.delete(id);
  }
}
