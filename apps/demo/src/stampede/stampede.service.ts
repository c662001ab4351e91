import { Inject, Injectable, ServiceUnavailableException } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { AddressInfo } from 'node:net';
import { CATALOGUE_SIZE } from '../catalogue/catalogue-backend.js';
import type { MissMode } from '../catalogue/products.service.js';
import { DEMO_CONFIG, type DemoConfig } from '../demo.config.js';
import { DemoStorage } from '../storage/demo-storage.js';
import { binWidthFor, type Histogram, histogram, type LatencySummary, summarize } from './latency-summary.js';

/** How the requests' misses are handled: the lock and a second read, nothing, or single-flight. */
export type LockMode = MissMode;

export interface StampedeRequest {
  /** Unset: a random product, a different one for each mode. */
  productId?: number;
  requests: number;
  modes: LockMode[];
  /** Round-robin over this process and its `DEMO_PEERS`. */
  spread: boolean;
}

export interface StampedeRun {
  lock: LockMode;
  productId: number;
  requests: number;
  processes: number;
  /** Loads of this product by the backend during the run, in every process. */
  backendCalls: number;
  /** Count per HTTP status; `failed` for requests that got no answer. */
  statuses: Record<string, number>;
  /** Commands Redis processed during the run, per request (every process's); `null` without Redis. */
  redisCommandsPerRequest: number | null;
  latencyMs: LatencySummary;
  /** One bin width for every run of a request, so that they compare bar for bar. */
  histogram: Histogram;
}

/** A request that goes unanswered this long counts as failed (the lock's own timeout is 5 s). */
const REQUEST_TIMEOUT_MS = 30_000;

/**
 * Fires a stampede at a cold product from inside the server: every request at once over its own
 * connection (a browser would queue them behind its ~6 connections per host), over HTTP, so that
 * each one goes the whole way a client's would.
 */
@Injectable()
export class StampedeService {
  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Inject(DemoStorage) private readonly storage: DemoStorage,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  /** How many processes a spread stampede reaches. */
  get processes(): number {
    return 1 + this.config.peers.length;
  }

  async run(request: StampedeRequest): Promise<StampedeRun[]> {
    const targets = request.spread ? [this.ownUrl(), ...this.config.peers] : [this.ownUrl()];
    const fired = [];
    // One mode after the other: run together, they would share the CPU and blur each other's latencies.
    for (const lock of request.modes) {
      const productId = request.productId ?? 1 + Math.floor(Math.random() * CATALOGUE_SIZE);
      fired.push({ lock, productId, ...(await this.fire(lock, productId, request.requests, targets)) });
    }
    const binMs = binWidthFor(Math.max(...fired.flatMap(({ latenciesMs }) => latenciesMs)));
    return fired.map(({ lock, productId, backendCalls, statuses, latenciesMs, commands }) => ({
      lock,
      productId,
      requests: request.requests,
      processes: targets.length,
      backendCalls,
      statuses,
      redisCommandsPerRequest: commands === undefined ? null : Math.round((commands / request.requests) * 100) / 100,
      latencyMs: summarize(latenciesMs),
      histogram: histogram(latenciesMs, binMs),
    }));
  }

  private async fire(lock: LockMode, productId: number, requests: number, targets: string[]) {
    // A cold start: nothing cached, no loads counted.
    await this.storage.deleteCached(`product:${productId}`);
    await this.storage.resetLoadsOf(productId);
    const before = await this.storage.commandsProcessed();
    const answers = await Promise.all(
      Array.from({ length: requests }, (_, i) =>
        timedGet(`${targets[i % targets.length]}/products/${productId}?lock=${lock}`),
      ),
    );
    const statuses: Record<string, number> = {};
    for (const { status } of answers) statuses[status] = (statuses[status] ?? 0) + 1;
    const after = await this.storage.commandsProcessed();
    return {
      // Less the INFO that read the count, and the count of loads read below.
      commands: before === undefined || after === undefined ? undefined : after - before - 1,
      backendCalls: await this.storage.loadsOf(productId),
      statuses,
      latenciesMs: answers.map(({ ms }) => ms),
    };
  }

  /** Where this process listens, as its own requests reach it. */
  private ownUrl(): string {
    const address = (
      this.adapterHost.httpAdapter.getHttpServer() as { address(): AddressInfo | string | null }
    ).address();
    if (address === null || typeof address === 'string') {
      throw new ServiceUnavailableException(
        'The demo does not listen on a TCP port, so it cannot send itself requests',
      );
    }
    const host = address.address === '0.0.0.0' ? '127.0.0.1' : address.address === '::' ? '::1' : address.address;
    return `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
  }
}

async function timedGet(url: string): Promise<{ status: string; ms: number }> {
  const started = performance.now();
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    await response.arrayBuffer();
    return { status: String(response.status), ms: performance.now() - started };
  } catch {
    return { status: 'failed', ms: performance.now() - started };
  }
}
