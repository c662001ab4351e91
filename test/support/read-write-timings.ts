import type { Fairness, LockService } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { deferred } from './deferred.js';
import { uniqueKey } from './lock-app.js';

/**
 * The read-write lock's two timing scenarios (issue 22's acceptance), each returning what it
 * measured: `test/read-write-locks.e2e-spec.ts` checks their order of magnitude under the load of
 * the parallel suites; `test/topologies/read-write-timings.topology-spec.ts`, run in band, checks
 * the figures themselves.
 */

/**
 * Ms a writer (of fairness `fair`) waits while four loops of overlapping 30 ms reads (7.5 ms apart)
 * keep the key read without a gap.
 */
export async function writerWaitAmidReads(
  readers: LockService,
  writers: LockService,
  fair: Fairness = true,
): Promise<number> {
  const key = uniqueKey('busy-readers');
  let reading = true;
  const loops = Array.from({ length: 4 }, async (_, i) => {
    await delay(i * 7.5);
    while (reading) await readers.withLock(key, () => delay(30), { mode: 'read', timeout: 10_000 });
  });
  await delay(300);
  // Read at this instant: on a loaded machine the four loops' timers may fire late together and leave a
  // gap of one round trip between their reads — the writer asks once the readers hold the key again.
  for (let tries = 0; (await readers.inspect(key)).mode !== 'read'; tries++) {
    if (tries === 100) throw new Error('the readers do not hold the key');
    await delay(1);
  }

  const asked = performance.now();
  const writer = await writers.lock(key, { timeout: 5_000, fair });
  const waited = performance.now() - asked;
  reading = false;
  await writer.unlock();
  await Promise.all(loops);
  return waited;
}

/** Ms from a writer's release to the start of each of eight readers queued behind it, alternating between two applications. */
export async function readerStartsAfterWrite(
  writers: LockService,
  readers: [LockService, LockService],
): Promise<number[]> {
  const key = uniqueKey('readers-behind-writer');
  const writer = await writers.lock(key);
  const released = deferred<number>();
  const startedAfter: Promise<number>[] = [];
  for (let i = 0; i < 8; i++) {
    startedAfter.push(
      readers[i % 2].withLock(key, async () => performance.now() - (await released.promise), {
        mode: 'read',
        timeout: 5_000,
      }),
    );
    await delay(20); // each reader queued before the next
  }
  released.resolve(performance.now());
  await writer.unlock();
  return Promise.all(startedAfter);
}
