import { describe, expect, it } from '@jest/globals';
import { useLockApps } from '../support/lock-app.js';
import { readerStartsAfterWrite, writerWaitAmidReads } from '../support/read-write-timings.js';

/**
 * Issue 22's timing figures for read-write locks on one Redis, checked here, in band with the
 * topology specs, where no parallel suite adds its load to the machine (`npm test` checks their
 * order of magnitude: test/read-write-locks.e2e-spec.ts).
 */
describe('read-write locks: the timing figures, on Redis, in band', () => {
  const apps = useLockApps('redis', 3);

  it('lets a writer in within one read hold + 20 ms while four workers keep the key read without a gap', async () => {
    const waited = await writerWaitAmidReads(apps()[0].locks, apps()[1].locks);

    expect(waited).toBeLessThan(30 + 20);
  });

  it('starts eight readers queued behind a writer within 10 ms of its release', async () => {
    const after = await readerStartsAfterWrite(apps()[0].locks, [apps()[1].locks, apps()[2].locks]);

    expect(Math.max(...after)).toBeLessThan(10);
  });
});
