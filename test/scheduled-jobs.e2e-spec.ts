import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { Injectable, type LoggerService, Module } from '@nestjs/common';
import { Cron, Interval, ScheduleModule, Timeout } from '@nestjs/schedule';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  currentLock,
  InvalidArgumentError,
  LockModule,
  type LockModuleOptions,
  LockService,
  Semaphore,
  WithLock,
} from 'nest-lock';
import { lastValueFrom, Observable, of, toArray } from 'rxjs';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, createLockApp, type LockApp, STORE_KINDS } from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';
import { until } from './support/timing.js';

const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const metricReader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });

/** `nest_lock.skipped` so far, per kind of lease. */
async function skippedSoFar(kind: 'lock' | 'semaphore'): Promise<number> {
  await metricReader.forceFlush();
  const scope = metricExporter
    .getMetrics()
    .at(-1)
    ?.scopeMetrics.find((scopeMetrics) => scopeMetrics.scope.name === 'nest-lock');
  const metric = scope?.metrics.find((candidate) => candidate.descriptor.name === 'nest_lock.skipped');
  const point = metric?.dataPoints.find((each) => each.attributes['nest_lock.kind'] === kind);
  return (point?.value as number | undefined) ?? 0;
}

/**
 * What every application logged at `error`, `warn` and `log` level (as given: the scheduler logs the
 * error object), and nest-lock's verbose lines (its skips).
 */
class RecordingLogger implements LoggerService {
  readonly errors: unknown[] = [];
  readonly warnings: string[] = [];
  readonly logs: string[] = [];
  readonly verboses: string[] = [];
  log(message: unknown): void {
    this.logs.push(String(message));
  }
  error(message: unknown): void {
    this.errors.push(message);
  }
  warn(message: unknown): void {
    this.warnings.push(String(message));
  }
  verbose(message: unknown): void {
    this.verboses.push(String(message));
  }
}

/** The second a cron tick of `* * * * * *` belongs to (it fires at most a few ms late, or early). */
const tickOf = (at: number) => Math.floor((at + 300) / 1_000);

/** Counts per tick: every firing of the schedule (`fired`), and every run of the locked job (`ran`). */
const fired = new Map<number, number>();
const ran = new Map<number, number>();
const count = (counts: Map<number, number>) =>
  counts.set(tickOf(Date.now()), (counts.get(tickOf(Date.now())) ?? 0) + 1);

/** Counts every call of the method in `fired`, then calls it: what the scheduler fires, before the lock. */
function CountFirings(target: object, key: string | symbol, descriptor: PropertyDescriptor): void {
  const method = descriptor.value as (...args: unknown[]) => unknown;
  descriptor.value = function (this: unknown, ...args: unknown[]) {
    count(fired);
    return method.apply(this, args);
  };
}

@Injectable()
class PriceRefresh {
  // @Cron above @WithLock: the lock's wrapper is what the scheduler finds.
  @Cron('* * * * * *')
  @CountFirings
  @WithLock('prices:refresh', { onBusy: 'skip', holdAtLeast: 500 })
  async refresh(): Promise<void> {
    count(ran);
    await delay(50);
  }
}

/** A job that fires every second on every instance and, the first time only, runs 3 s: longer than its ttl. */
@Injectable()
class LongJob {
  static starts: number[] = [];
  static endedAt: number | undefined;
  static lostSignalAtEnd: boolean | undefined;

  // @WithLock above @Cron: the other order.
  @WithLock('long-job', { onBusy: 'skip', ttl: 1_000 })
  @Cron('* * * * * *')
  async run(): Promise<void> {
    LongJob.starts.push(performance.now());
    if (LongJob.starts.length > 1) return;
    const signal = currentLock()!.signal;
    await delay(3_000);
    LongJob.lostSignalAtEnd = signal.aborted;
    LongJob.endedAt = performance.now();
  }
}

/** A job run every second; counts its runs. */
@Injectable()
class EverySecond {
  static runs: number[] = [];

  @Cron('* * * * * *')
  @WithLock('every-second', { onBusy: 'skip' })
  async run(): Promise<void> {
    EverySecond.runs.push(Date.now());
  }
}

/** Fires every 100 ms and runs 250 ms: the ticks that come while it runs are skipped. */
@Injectable()
class Sweep {
  static inside = 0;
  static overlaps = 0;
  static runs = 0;
  static timeoutRan = false;

  @Interval(100)
  @WithLock('sweep', { onBusy: 'skip' })
  async sweep(): Promise<void> {
    if (++Sweep.inside > 1) Sweep.overlaps++;
    Sweep.runs++;
    await delay(250);
    Sweep.inside--;
  }

  @WithLock('sweep-once', { onBusy: 'skip' })
  @Timeout(50)
  async once(): Promise<void> {
    Sweep.timeoutRan = currentLock()?.key === 'sweep-once';
  }
}

/** Boots one application instance: the scheduler and nest-lock on `options`, with `providers`. */
async function startInstance(
  options: LockModuleOptions,
  providers: (new (...args: never[]) => unknown)[],
  logger: LoggerService,
): Promise<TestingModule> {
  @Module({ imports: [ScheduleModule.forRoot(), LockModule.forRoot(options)], providers })
  class InstanceModule {}
  const module = await Test.createTestingModule({ imports: [InstanceModule] })
    .setLogger(logger)
    .compile();
  module.enableShutdownHooks();
  await module.init();
  return module;
}

describe('scheduled jobs on one pod only, on Redis', () => {
  let server: RedisServer;
  const logger = new RecordingLogger();

  beforeAll(async () => {
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [metricReader] }));
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.stop();
    metrics.disable();
  });

  it('runs each tick of a schedule exactly once across three instances, skipping quietly on the others', async () => {
    const skippedBefore = await skippedSoFar('lock');
    const instances = await Promise.all(
      [0, 1, 2].map(() => startInstance({ redis: server.url, logger }, [PriceRefresh], logger)),
    );
    await delay(10_000);
    await Promise.all(instances.map((instance) => instance.close()));

    // Every tick the three instances all fired; the ones inside the run are whole.
    const ticks = [...fired.keys()].sort().slice(1, -1);
    expect(ticks.length).toBeGreaterThanOrEqual(8);
    for (const tick of ticks) {
      expect({ tick, fired: fired.get(tick) }).toEqual({ tick, fired: 3 });
      expect({ tick, ran: ran.get(tick) }).toEqual({ tick, ran: 1 });
    }
    const allFired = [...fired.values()].reduce((sum, n) => sum + n, 0);
    const allRan = [...ran.values()].reduce((sum, n) => sum + n, 0);
    expect((await skippedSoFar('lock')) - skippedBefore).toBe(allFired - allRan);
    expect(logger.verboses.filter((line) => line.includes('PriceRefresh.refresh skipped'))).toHaveLength(
      allFired - allRan,
    );
    expect(logger.errors).toEqual([]);
    expect(logger.warnings).toEqual([]);
  }, 30_000);

  it('keeps the lock of a job longer than its ttl (the watchdog), while the other instance skips every tick', async () => {
    const quiet = new RecordingLogger();
    const options = { redis: server.url, logger: quiet };
    const [first, second] = await Promise.all([
      startInstance(options, [LongJob], quiet),
      startInstance(options, [LongJob], quiet),
    ]);
    const locks = first.get(LockService);
    try {
      while (LongJob.starts.length === 0) await delay(20);
      // Held at every look for 3 s, whoever fires: ttl 1 s, renewed.
      let looks = 0;
      let heldAtEveryLook = true;
      while (LongJob.endedAt === undefined) {
        if (!(await locks.isLocked('long-job'))) heldAtEveryLook = false;
        looks++;
        await delay(100);
      }
      expect(looks).toBeGreaterThan(20);
      expect(heldAtEveryLook).toBe(true);
      expect(LongJob.lostSignalAtEnd).toBe(false);
      // Both instances fired each second meanwhile; none of those calls ran.
      const [firstStart, ...later] = LongJob.starts;
      expect(later.filter((at) => at > firstStart && at < LongJob.endedAt!)).toEqual([]);
      expect(quiet.verboses.filter((line) => line.includes('LongJob.run skipped')).length).toBeGreaterThanOrEqual(4);
      expect(quiet.errors).toEqual([]);
    } finally {
      await Promise.all([first.close(), second.close()]);
    }
  }, 30_000);

  // Found by the first-hour review: each tick of an outage rejected, and the scheduler logged ~29 lines
  // of stack per firing. A tick while the store is away is skipped (nobody can tell whether another pod
  // runs it), the outage is logged when it starts and when it ends, and nothing else.
  it('skips the ticks while Redis is down, without running the job or logging an error; the next tick after runs it', async () => {
    const own = await RedisServer.start();
    const recorded = new RecordingLogger();
    const instance = await startInstance(
      { redis: own.url, commandTimeout: 300, logger: recorded },
      [EverySecond],
      recorded,
    );
    try {
      while (EverySecond.runs.length === 0) await delay(20);
      await own.stop();
      const stoppedAt = Date.now();
      await delay(2_500);
      expect(EverySecond.runs.filter((at) => at > stoppedAt)).toEqual([]);
      expect(recorded.errors).toEqual([]);
      const skips = recorded.verboses.filter((line) => line.includes('EverySecond.run skipped'));
      expect(skips.length).toBeGreaterThanOrEqual(2);
      expect(skips[0]).toMatch(/the store is unavailable \(Redis is unreachable/);
      expect(recorded.warnings.filter((line) => /Redis is unreachable since/.test(line))).toHaveLength(1);

      await own.restart();
      const backAt = Date.now();
      while (!EverySecond.runs.some((at) => at > backAt) && Date.now() - backAt < 5_000) await delay(50);
      expect(EverySecond.runs.filter((at) => at > backAt).length).toBeGreaterThanOrEqual(1);
      expect(recorded.logs.filter((line) => /Redis is reachable again, after \d/.test(line))).toHaveLength(1);
      expect(recorded.errors).toEqual([]);
    } finally {
      await instance.close();
      await own.stop();
    }
  }, 30_000);
});

/** A job called directly, as two pods' schedulers firing a little apart would: fast, with or without `holdAtLeast`. */
@Injectable()
class NightlyReport {
  runs = 0;

  @WithLock('report:nightly', { onBusy: 'skip', holdAtLeast: 400 })
  async withHoldAtLeast(): Promise<string> {
    this.runs++;
    return 'done';
  }

  @WithLock('report:unheld', { onBusy: 'skip' })
  async withoutHoldAtLeast(): Promise<string> {
    this.runs++;
    return 'done';
  }

  @WithLock('report:busy', { onBusy: 'skip' })
  async whileBusy(): Promise<string> {
    this.runs++;
    return 'done';
  }

  @Semaphore(1, { name: 'report:permits', onBusy: 'skip', holdAtLeast: 300 })
  async withPermit(): Promise<string> {
    this.runs++;
    return 'done';
  }

  @Semaphore(1, { name: 'report:local', scope: 'local', onBusy: 'skip', holdAtLeast: 300 })
  async withLocalPermit(): Promise<string> {
    this.runs++;
    return 'done';
  }

  @WithLock('report:stream', { onBusy: 'skip' })
  stream(): Observable<number> {
    this.runs++;
    return of(1, 2, 3);
  }

  /** Runs until its lock is lost (or 3 s): `true` when `currentLock().signal` said so (renewed every ~330 ms). */
  @WithLock('report:watchful', { onBusy: 'skip', ttl: 1_000 })
  async untilLost(): Promise<boolean> {
    const { signal } = currentLock()!;
    await Promise.race([delay(3_000), new Promise((resolve) => signal.addEventListener('abort', resolve))]);
    return signal.aborted;
  }
}

describe.each(STORE_KINDS)('skip when busy and hold at least, on the %s store', (kind) => {
  // Two pods: on Redis two applications on one server; on the memory store one process, one application.
  const apps: LockApp[] = [];
  beforeAll(async () => {
    const first = await createLockApp(kind, {}, [NightlyReport]);
    apps.push(first, kind === 'redis' ? await bootLockModule({ redis: first.server!.url }, [NightlyReport]) : first);
  });
  afterAll(async () => {
    for (const app of new Set([...apps].reverse())) await closeLockApp(app);
  });
  const job = (pod: number) => apps[pod].module.get(NightlyReport);
  const locks = (pod: number) => apps[pod].locks;

  it('keeps the lock after a fast job until holdAtLeast since it started, so a pod firing 200 ms later skips', async () => {
    const returnedIn = performance.now();
    expect(await job(0).withHoldAtLeast()).toBe('done');
    expect(performance.now() - returnedIn).toBeLessThan(200); // the method returns at once; the release waits
    expect(await locks(1).isLocked('report:nightly')).toBe(true);

    await delay(200);
    const runs = job(1).runs;
    expect(await job(1).withHoldAtLeast()).toBeUndefined(); // skipped: held for 400 ms since the first started
    expect(job(1).runs).toBe(runs);

    await delay(400);
    expect(await locks(1).isLocked('report:nightly')).toBe(false);
    expect(await job(1).withHoldAtLeast()).toBe('done');
  });

  it('runs the job twice without holdAtLeast when the second pod fires 200 ms later (the control)', async () => {
    expect(await job(0).withoutHoldAtLeast()).toBe('done');
    await delay(200);
    expect(await job(1).withoutHoldAtLeast()).toBe('done');
  });

  it('returns undefined without running while the lock is held elsewhere, and counts nothing as an error', async () => {
    const holder = await locks(1).lock('report:busy');
    const runs = job(0).runs;
    expect(await job(0).whileBusy()).toBeUndefined();
    expect(job(0).runs).toBe(runs);
    await holder.unlock();
    expect(await job(0).whileBusy()).toBe('done');
  });

  it('skips a semaphore whose permits are all held, distributed and local, and holds a permit at least as asked', async () => {
    expect(await job(0).withPermit()).toBe('done');
    expect(await job(1).withPermit()).toBeUndefined();
    expect(await job(0).withLocalPermit()).toBe('done');
    expect(await job(0).withLocalPermit()).toBeUndefined();
    await delay(400);
    expect(await job(1).withPermit()).toBe('done');
    expect(await job(0).withLocalPermit()).toBe('done');
  });

  it('completes an Observable without a value when skipped', async () => {
    const holder = await locks(1).lock('report:stream');
    expect(await lastValueFrom(job(0).stream().pipe(toArray()))).toEqual([]);
    await holder.unlock();
    expect(await lastValueFrom(job(0).stream().pipe(toArray()))).toEqual([1, 2, 3]);
  });

  it('never keeps the lease longer than its ttl for holdAtLeast', async () => {
    await locks(0).withLock('report:short', () => 'done', { holdAtLeast: 10_000, ttl: 300 });
    expect(await locks(1).isLocked('report:short')).toBe(true);
    await delay(600);
    expect(await locks(1).isLocked('report:short')).toBe(false);
  });

  it('tells a skipping job through currentLock().signal when it lost its lock', async () => {
    const lost = job(0).untilLost();
    await until('the job to hold its lock', () => locks(1).isLocked('report:watchful'));
    await locks(1).forceUnlock('report:watchful');
    expect(await lost).toBe(true);
  });

  it('refuses bad onBusy and holdAtLeast values before anything is taken', async () => {
    expect(() => WithLock('k', { onBusy: 'never' as never })).toThrow(InvalidArgumentError);
    expect(() => Semaphore(1, { onBusy: 'maybe' as never })).toThrow(/onBusy/);
    expect(() => WithLock('k', { holdAtLeast: -1 })).toThrow(/holdAtLeast/);
    await expect(locks(0).withLock('k', () => 1, { holdAtLeast: Number.NaN })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      argument: 'holdAtLeast',
    });
    expect(await locks(0).withLock('k', () => 1, { holdAtLeast: undefined })).toBe(1); // absent, as if not given
    // A bare lock() is released by its holder: holdAtLeast is not one of its options.
    await expect(locks(0).lock('k', { holdAtLeast: 100 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('scheduled jobs on the memory store, in one process', () => {
  it('skips the ticks of an @Interval that come while its job still runs, and runs a @Timeout under its lock', async () => {
    const logger = new RecordingLogger();
    const instance = await startInstance({ store: 'memory', logger }, [Sweep], logger);
    try {
      await delay(1_200);
    } finally {
      await instance.close();
    }
    expect(Sweep.overlaps).toBe(0);
    expect(Sweep.runs).toBeGreaterThanOrEqual(3);
    expect(Sweep.runs).toBeLessThanOrEqual(5); // about one run per 300 ms, not one per tick
    expect(logger.verboses.filter((line) => line.includes('Sweep.sweep skipped')).length).toBeGreaterThanOrEqual(5);
    expect(Sweep.timeoutRan).toBe(true);
    expect(logger.errors).toEqual([]);
  });
});

describe('holdAtLeast at shutdown, on Redis', () => {
  it('releases a lease kept for holdAtLeast at once when the application closes', async () => {
    const app = await createLockApp('redis');
    const other = await bootLockModule({ redis: app.server!.url });
    try {
      await app.locks.withLock('report:closing', () => 'done', { holdAtLeast: 20_000 });
      expect(await other.locks.isLocked('report:closing')).toBe(true);
      const closing = performance.now();
      await app.module.close();
      expect(performance.now() - closing).toBeLessThan(1_000);
      expect(await other.locks.isLocked('report:closing')).toBe(false);
    } finally {
      await closeLockApp(other);
      await app.server!.stop();
    }
  });
});
