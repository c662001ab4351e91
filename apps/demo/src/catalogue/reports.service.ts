import { Injectable } from '@nestjs/common';
import { Semaphore, WithLock } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';

/** Slow work the decorators guard: a report (two at a time, everywhere) and a reindex (one at a time). */
@Injectable()
export class ReportsService {
  @Semaphore(2, { name: 'reports', timeout: 0 })
  async createReport(): Promise<{ report: string; tookMs: number }> {
    return { report: 'sales', tookMs: await work(1_000) };
  }

  @WithLock('reindex', { timeout: 0 })
  async reindex(): Promise<{ reindexed: number; tookMs: number }> {
    return { reindexed: 10_000, tookMs: await work(1_000) };
  }
}

async function work(ms: number): Promise<number> {
  const started = performance.now();
  await delay(ms);
  return Math.round(performance.now() - started);
}
