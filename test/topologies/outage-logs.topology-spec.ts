import { describe, expect, it } from '@jest/globals';
import { Injectable, type LoggerService, Module } from '@nestjs/common';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { LockModule, WithLock } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { RedisServer } from '../support/redis-server.js';

/**
 * Every line an application logs, whoever logs it (Nest, the scheduler, nest-lock), at every level
 * Nest prints by default; an error's stack counts as the lines it spans.
 */
class PrintedLines implements LoggerService {
  readonly lines: string[] = [];
  private record(level: string, message: unknown, rest: unknown[]) {
    const text = [message, ...rest]
      .map((part) => (part instanceof Error ? (part.stack ?? String(part)) : String(part)))
      .join(' ');
    for (const line of text.split('\n')) this.lines.push(`${level} ${line}`);
  }
  log(message: unknown, ...rest: unknown[]) {
    this.record('log', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]) {
    this.record('warn', message, rest);
  }
  error(message: unknown, ...rest: unknown[]) {
    this.record('error', message, rest);
  }
}

@Injectable()
class Nightly {
  static runs: number[] = [];

  @Cron('* * * * * *')
  @WithLock('nightly', { onBusy: 'skip' })
  async run(): Promise<void> {
    Nightly.runs.push(Date.now());
  }
}

// Found by the first-hour review: a Redis outage under a one-second cron job logged ~29 lines of stack per
// firing (535 lines in 23 s). Sixty seconds of outage now log when it starts and when it ends.
describe('a minute of Redis outage under a one-second @Cron job', () => {
  it('logs a handful of lines, and the job runs again once Redis is back', async () => {
    const server = await RedisServer.start();
    const printed = new PrintedLines();
    @Module({ imports: [ScheduleModule.forRoot(), LockModule.forRoot({ redis: server.url })], providers: [Nightly] })
    class AppModule {}
    const module = await Test.createTestingModule({ imports: [AppModule] })
      .setLogger(printed)
      .compile();
    await module.init();
    try {
      while (Nightly.runs.length === 0) await delay(50);
      // Counted from before the stop: the client may see its connection close, and log so, before the
      // server's process has exited.
      const before = printed.lines.length;
      await server.stop();
      const downAt = Date.now();
      await delay(60_000);
      await server.restart();
      const backAt = Date.now();
      while (!Nightly.runs.some((at) => at > backAt) && Date.now() - backAt < 10_000) await delay(100);

      const duringOutage = printed.lines.slice(before);
      expect(Nightly.runs.filter((at) => at > downAt && at < backAt)).toEqual([]);
      expect(Nightly.runs.filter((at) => at > backAt).length).toBeGreaterThanOrEqual(1);
      expect(duringOutage.length).toBeLessThanOrEqual(5);
      expect(duringOutage.filter((line) => /Redis is unreachable since/.test(line))).toHaveLength(1);
      expect(duringOutage.filter((line) => /Redis is reachable again/.test(line))).toHaveLength(1);
    } finally {
      await module.close();
      await server.stop();
    }
  }, 120_000);
});
