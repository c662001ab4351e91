import { describe, expect, it } from '@jest/globals';
import { useRedisClient, useRedisServer } from './support/redis-server.js';
import { runWorkers } from './support/workers.js';

const PROCESSES = 4;
const WORKERS = 8;
const SECTIONS = 25;

/**
 * Each critical section reads a Redis counter, awaits ~1 ms and writes counter + 1: any two
 * sections that overlap lose an update. 4 processes × 8 workers × 25 sections must count 800.
 */
describe('mutual exclusion across processes', () => {
  const server = useRedisServer();
  /** Reads the counter the sections wrote. */
  const redis = useRedisClient(server);

  async function runCriticalSections(key: string, mode: 'lock' | 'none') {
    const reports = await runWorkers<{ completed: number }>('critical-sections', PROCESSES, [
      server().url,
      key,
      PROCESSES,
      WORKERS,
      SECTIONS,
      mode,
    ]);
    return {
      completed: reports.reduce((sum, report) => sum + report.completed, 0),
      counter: Number(await redis().get(`${key}:counter`)),
    };
  }

  it('loses no update when every section runs under the lock', async () => {
    const { completed, counter } = await runCriticalSections('exclusive', 'lock');

    expect(completed).toBe(PROCESSES * WORKERS * SECTIONS);
    expect(counter).toBe(PROCESSES * WORKERS * SECTIONS);
  });

  it('loses updates without the lock (the control that shows the check can fail)', async () => {
    const { completed, counter } = await runCriticalSections('unprotected', 'none');

    expect(completed).toBe(PROCESSES * WORKERS * SECTIONS);
    expect(counter).toBeLessThan(PROCESSES * WORKERS * SECTIONS);
  });
});
