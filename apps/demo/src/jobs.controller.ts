import { Controller, Param, Post } from '@nestjs/common';
import { WithLock } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';

/** One job of a name runs at a time, across every process sharing the store: a second run gets 409. */
@Controller('jobs')
export class JobsController {
  @Post(':name/run')
  @WithLock('job:{0}', { timeout: 0 })
  async run(@Param('name') name: string): Promise<{ job: string; ranForMs: number }> {
    const started = performance.now();
    await delay(1_000); // the job's work
    return { job: name, ranForMs: Math.round(performance.now() - started) };
  }
}
