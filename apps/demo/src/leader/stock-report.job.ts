import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { LeaderOnly, LeaderService } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { DEMO_CONFIG, type DemoConfig, processLabel } from '../demo.config.js';
import { firingOf, PRICE_REFRESH_SCHEDULE } from '../jobs/price-refresh.job.js';
import { DemoStorage } from '../storage/demo-storage.js';

/** The name the demo processes campaign for: one of them leads, the others wait to take over. */
export const DEMO_LEADERSHIP = 'demo';

/**
 * The stock report, every 3 seconds, on the leader only (`@LeaderOnly`): unlike the price refresh,
 * where whichever process takes the lock first runs a firing, the same process runs every firing
 * until it stops — then another takes over within the leadership's lease (at once on a graceful
 * shutdown). On election, the new leader records itself under its term, so the page can say who
 * leads; the term fences that record (see `DemoStorage.recordLeader`).
 */
@Injectable()
export class StockReportJob implements OnModuleInit {
  private readonly logger = new Logger('StockReport');

  constructor(
    @Inject(LeaderService) private readonly leaders: LeaderService,
    @Inject(DemoStorage) private readonly storage: DemoStorage,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  /** Before bootstrap, when `@LeaderOnly` would start the campaign: this one has the election callback. */
  onModuleInit(): void {
    this.leaders.campaign(DEMO_LEADERSHIP, {
      onElected: async (term, signal) => {
        const recorded = await this.storage.recordLeader({ by: processLabel(this.config), term, since: Date.now() });
        if (!recorded || signal.aborted) this.logger.warn(`Term ${term} ended before this process could record it`);
      },
    });
  }

  /** Every firing in every process, whether it leads or skips. */
  @Cron(PRICE_REFRESH_SCHEDULE)
  async fired(): Promise<void> {
    await this.storage.increment('stockReportFirings');
  }

  @Cron(PRICE_REFRESH_SCHEDULE)
  @LeaderOnly(DEMO_LEADERSHIP)
  async report(): Promise<void> {
    const term = this.leaders.leadership(DEMO_LEADERSHIP)?.term;
    await delay(100); // the report itself
    await this.storage.increment('stockReportRuns');
    await this.storage.recordJobRun('stockReport', {
      firing: firingOf(Date.now()),
      by: processLabel(this.config),
      term,
    });
  }
}
