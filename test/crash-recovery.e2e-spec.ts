import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { closeLockApp, createLockApp, type LockApp } from './support/lock-app.js';
import { killWorker, startWorker } from './support/workers.js';

/**
 * A holder process that keeps renewing its lease is SIGKILLed: what it held comes back after
 * its ttl (500 ms), and a survivor waiting for it gets it well within 2 s.
 */
describe('a holder process that crashes', () => {
  let survivor: LockApp;

  beforeAll(async () => {
    survivor = await createLockApp('redis');
  });
  afterAll(async () => {
    await closeLockApp(survivor);
  });

  it.each(['lock', 'semaphore'] as const)('gives up its %s once its lease runs out', async (kind) => {
    const id = `crash:${kind}`;
    const { child } = await startWorker('hold-until-killed', [survivor.server!.url, kind, id, 500]);
    const take = (timeout: number) =>
      kind === 'lock' ? survivor.locks.lock(id, { timeout }) : survivor.semaphores.acquire(id, 1, { timeout });

    // Alive, the holder renews: its lease outlives the ttl.
    await expect(take(1_000)).rejects.toMatchObject({ code: kind === 'lock' ? 'LOCK_TIMEOUT' : 'SEMAPHORE_TIMEOUT' });

    await killWorker(child);
    const started = performance.now();
    const lease = await take(5_000);
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(lease.elapsed).toBeGreaterThan(0);
    await ('unlock' in lease ? lease.unlock() : lease.release());
  });
});
