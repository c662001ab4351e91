import { Controller, Get, Inject } from '@nestjs/common';
import { LeaderService } from 'nest-lock';
import { DEMO_CONFIG, type DemoConfig, processLabel } from '../demo.config.js';
import { DemoStorage, type JobRun, type LeaderRecord } from '../storage/demo-storage.js';
import { DEMO_LEADERSHIP } from './stock-report.job.js';

export interface LeaderView {
  /** The latest leader recorded by the demo processes (on Redis, any of them). */
  leader: LeaderRecord | null;
  /** The process answering: whether it leads now, by its own leadership. */
  here: { by: string; leads: boolean; term: number | null };
  /** The stock report's latest runs, newest first: each by the leader of its moment. */
  runs: JobRun[];
}

/** Who leads the demo processes, and what the leader-only job did. */
@Controller('leader')
export class LeaderController {
  constructor(
    @Inject(LeaderService) private readonly leaders: LeaderService,
    @Inject(DemoStorage) private readonly storage: DemoStorage,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  @Get()
  async view(): Promise<LeaderView> {
    const [leader, runs] = await Promise.all([this.storage.leader(), this.storage.jobRuns('stockReport')]);
    const leadership = this.leaders.leadership(DEMO_LEADERSHIP);
    const here = {
      by: processLabel(this.config),
      leads: leadership?.isLeader ?? false,
      term: leadership?.term ?? null,
    };
    return { leader: leader ?? null, here, runs };
  }
}
