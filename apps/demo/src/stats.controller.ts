import { Controller, Delete, Get, HttpCode, Inject } from '@nestjs/common';
import { DemoStorage, type JobRun, type StatName } from './storage/demo-storage.js';

/** What happened so far: on Redis, summed over every demo process. */
@Controller('stats')
export class StatsController {
  constructor(@Inject(DemoStorage) private readonly storage: DemoStorage) {}

  @Get()
  stats(): Promise<Record<StatName, number>> {
    return this.storage.stats();
  }

  /** The latest runs of the scheduled price refresh, newest first: one per firing, across every process. */
  @Get('jobs')
  jobRuns(): Promise<JobRun[]> {
    return this.storage.jobRuns('priceRefresh');
  }

  /** How many commands the demo's Redis has processed (`npm run demo:stampede` counts a run's); `null` without Redis. */
  @Get('redis')
  async redis(): Promise<{ commandsProcessed: number | null }> {
    return { commandsProcessed: (await this.storage.commandsProcessed()) ?? null };
  }

  @Delete()
  @HttpCode(204)
  async reset(): Promise<void> {
    await this.storage.resetStats();
  }
}
