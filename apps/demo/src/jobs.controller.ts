import { ConflictException, Controller, Param, Post } from '@nestjs/common';
import { LockService, LockTimeoutError } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';

/** One job of a name runs at a time, across every process sharing the store: a second run gets 409. */
@Controller('jobs')
export class JobsController {
  constructor(private readonly locks: LockService) {}

  @Post(':name/run')
  async run(@Param('name') name: string): Promise<{ job: string; ranForMs: number }> {
    try {
      return await this.locks.withLock(
        `job:${name}`,
        async () => {
          const started = performance.now();
          await delay(1_000); // the job's work
          return { job: name, ranForMs: Math.round(performance.now() - started) };
        },
        { timeout: 0 },
      );
    } catch (error) {
      if (error instanceof LockTimeoutError) {
        throw new ConflictException({ message: `Job "${name}" is already running`, key: error.key });
      }
      throw error;
    }
  }
}
