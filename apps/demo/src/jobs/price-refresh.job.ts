import { Inject, Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { WithLock } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { DEMO_CONFIG, type DemoConfig, processLabel } from '../demo.config.js';
import { DemoStorage } from '../storage/demo-storage.js';

/** Every 3 seconds, on the wall clock: every demo process fires at the same moments. */
export const PRICE_REFRESH_SCHEDULE = '*/3 * * * * *';

/** The firing of the schedule that `at` belongs to (a firing runs a few ms after its moment, or before). */
export function firingOf(at: number): number {
  return Math.floor((at + 500) / 3_000) * 3_000;
}

/**
 * The "nightly" price refresh, every 3 seconds for the demo. Every demo process runs this schedule;
 * the lock lets one of them refresh per firing and the others skip it (`onBusy: 'skip'`), and keeps
 * the lock 1.5 s after a quick refresh so that a process whose scheduler fires late still skips
 * (`holdAtLeast`). `/stats` and the page show how many times it fired in all and how many it ran.
 */
@Injectable()
export class PriceRefreshJob {
  constructor(
    @Inject(DemoStorage) private readonly storage: DemoStorage,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  /** Every firing in every process, whether it refreshes or skips: what the lock shares out. */
  @Cron(PRICE_REFRESH_SCHEDULE)
  async fired(): Promise<void> {
    await this.storage.increment('priceRefreshFirings');
  }

  @Cron(PRICE_REFRESH_SCHEDULE)
  @WithLock('demo:price-refresh', { onBusy: 'skip', holdAtLeast: 1_500 })
  async refresh(): Promise<void> {
    await delay(100); // the refresh itself
    await this.storage.increment('priceRefreshRuns');
    await this.storage.recordJobRun('priceRefresh', { firing: firingOf(Date.now()), by: processLabel(this.config) });
  }
}
