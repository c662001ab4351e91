import { describe, expect, it } from '@jest/globals';
import { useRedisServer } from './support/redis-server.js';
import { runWorkers } from './support/workers.js';

const PROCESSES = 4;
const WORKERS = 8;
const SECTIONS = 10;
const LIMIT = 3;

/** 4 processes × 8 workers share a semaphore of 3; each section counts who is inside with INCR / DECR. */
describe('permit limit across processes', () => {
  const server = useRedisServer();

  async function runSections(name: string, mode: 'semaphore' | 'none') {
    const reports = await runWorkers<{ completed: number; maxInside: number }>('permit-sections', PROCESSES, [
      server().url,
      name,
      PROCESSES,
      WORKERS,
      SECTIONS,
      LIMIT,
      mode,
    ]);
    return {
      completed: reports.reduce((sum, report) => sum + report.completed, 0),
      maxInside: Math.max(...reports.map((report) => report.maxInside)),
    };
  }

  it('never has more than limit sections inside at once, and completes every section', async () => {
    const { completed, maxInside } = await runSections('reports', 'semaphore');

    expect(completed).toBe(PROCESSES * WORKERS * SECTIONS);
    expect(maxInside).toBeLessThanOrEqual(LIMIT);
    expect(maxInside).toBeGreaterThanOrEqual(2);
  });

  it('has more than limit inside without the semaphore (the control that shows the check can fail)', async () => {
    const { completed, maxInside } = await runSections('unlimited', 'none');

    expect(completed).toBe(PROCESSES * WORKERS * SECTIONS);
    expect(maxInside).toBeGreaterThan(LIMIT);
  });
});
