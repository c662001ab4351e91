import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { metrics, SpanStatusCode, trace } from '@opentelemetry/api';
import {
  AggregationTemporality,
  type DataPoint,
  type Histogram,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import type { TestingModule } from '@nestjs/testing';
import { Test } from '@nestjs/testing';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import {
  LeaderService,
  LockBackendError,
  LockModule,
  type LockModuleOptions,
  LockService,
  LockTimeoutError,
  SemaphoreService,
} from 'nest-lock';
import { useBuilt } from './support/built.js';
import { freePort, useRedisServer } from './support/redis-server.js';
import { until } from './support/timing.js';

const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
// Exports only when flushed: each test reads what it did by forceFlush().
const metricReader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
const meterProvider = new MeterProvider({ readers: [metricReader] });
const spanExporter = new InMemorySpanExporter();
const tracerProvider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter: spanExporter })] });

/** The data points of one instrument in the latest export, with its unit. */
async function collect(name: string): Promise<{ unit: string; points: DataPoint<unknown>[] }> {
  await metricReader.forceFlush();
  const latest = metricExporter.getMetrics().at(-1);
  const scope = latest?.scopeMetrics.find((scopeMetrics) => scopeMetrics.scope.name === 'nest-lock');
  const metric = scope?.metrics.find((candidate) => candidate.descriptor.name === name);
  return { unit: metric?.descriptor.unit ?? '', points: metric?.dataPoints ?? [] };
}

/** The histogram point (count, min, max, …) with exactly these attributes. */
async function histogram(name: string, attributes: Record<string, string>): Promise<Histogram | undefined> {
  const { points } = await collect(name);
  return points.find((point) => sameAttributes(point.attributes, attributes))?.value as Histogram | undefined;
}

async function sum(name: string, attributes: Record<string, string>): Promise<number> {
  const { points } = await collect(name);
  return (points.find((point) => sameAttributes(point.attributes, attributes))?.value as number | undefined) ?? 0;
}

function sameAttributes(actual: object, expected: Record<string, string>): boolean {
  return JSON.stringify(Object.entries(actual).sort()) === JSON.stringify(Object.entries(expected).sort());
}

function acquireSpans(key: string): ReadableSpan[] {
  return spanExporter
    .getFinishedSpans()
    .filter((span) => span.name === 'nest-lock.acquire' && span.attributes['nest_lock.key'] === key);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Stopped after the module below has closed: Jest runs an inner block's afterAll hooks first. */
const server = useRedisServer();

describe('OpenTelemetry', () => {
  let module: TestingModule;
  let locks: LockService;
  let semaphores: SemaphoreService;

  async function start(options: LockModuleOptions): Promise<void> {
    module = await Test.createTestingModule({ imports: [LockModule.forRoot(options)] }).compile();
    locks = module.get(LockService);
    semaphores = module.get(SemaphoreService);
  }

  beforeAll(async () => {
    // As an application does: the SDK is registered before the module starts.
    metrics.setGlobalMeterProvider(meterProvider);
    trace.setGlobalTracerProvider(tracerProvider);
    await start({ redis: server().url });
  });
  afterAll(async () => {
    await module.close();
    await meterProvider.shutdown();
    await tracerProvider.shutdown();
    metrics.disable();
    trace.disable();
  });

  it('a contended withLock leaves wait and hold histograms and a span per acquire', async () => {
    const holds = [1, 2, 3].map(() => locks.withLock('contended', () => sleep(100)));
    await Promise.all(holds);

    const waits = await histogram('nest_lock.wait.duration', {
      'nest_lock.kind': 'lock',
      'nest_lock.outcome': 'acquired',
    });
    expect(waits?.count).toBe(3);
    // The last one waited for both others' 100 ms: an order of magnitude, not a tight time.
    expect(waits?.max).toBeGreaterThan(100);
    const held = await histogram('nest_lock.hold.duration', { 'nest_lock.kind': 'lock' });
    expect(held?.count).toBe(3);
    expect(held?.min).toBeGreaterThanOrEqual(90);
    expect((await collect('nest_lock.wait.duration')).unit).toBe('ms');
    expect((await collect('nest_lock.hold.duration')).unit).toBe('ms');

    const spans = acquireSpans('contended');
    expect(spans).toHaveLength(3);
    for (const span of spans) {
      expect(span.instrumentationScope.name).toBe('nest-lock');
      expect(span.attributes).toEqual({
        'nest_lock.kind': 'lock',
        'nest_lock.key': 'contended',
        'nest_lock.outcome': 'acquired',
        'nest_lock.waited_ms': expect.any(Number),
      });
      expect(span.status.code).toBe(SpanStatusCode.UNSET);
    }
    const waited = spans.map((span) => span.attributes['nest_lock.waited_ms'] as number).sort((a, b) => a - b);
    expect(waited[0]).toBe(0);
    expect(waited[2]).toBeGreaterThan(100);
  });

  it('a wait that times out: outcome timeout, a timeout counted, the span says so', async () => {
    const holder = await locks.lock('busy');
    const timeoutsBefore = await sum('nest_lock.timeouts', { 'nest_lock.kind': 'lock' });
    await expect(locks.lock('busy', { timeout: 50 })).rejects.toBeInstanceOf(LockTimeoutError);
    await holder.unlock();

    expect(await sum('nest_lock.timeouts', { 'nest_lock.kind': 'lock' })).toBe(timeoutsBefore + 1);
    const waits = await histogram('nest_lock.wait.duration', {
      'nest_lock.kind': 'lock',
      'nest_lock.outcome': 'timeout',
    });
    expect(waits?.count).toBeGreaterThanOrEqual(1);
    const [timedOut] = acquireSpans('busy').filter((span) => span.attributes['nest_lock.outcome'] === 'timeout');
    expect(timedOut?.attributes['nest_lock.waited_ms']).toBeGreaterThanOrEqual(50);
  });

  it('semaphores: kind semaphore, the name as the key', async () => {
    await Promise.all([1, 2, 3].map(() => semaphores.withPermit('reports', 2, () => sleep(50))));

    const waits = await histogram('nest_lock.wait.duration', {
      'nest_lock.kind': 'semaphore',
      'nest_lock.outcome': 'acquired',
    });
    expect(waits?.count).toBe(3);
    expect((await histogram('nest_lock.hold.duration', { 'nest_lock.kind': 'semaphore' }))?.count).toBe(3);
    expect(acquireSpans('reports').map((span) => span.attributes['nest_lock.kind'])).toEqual([
      'semaphore',
      'semaphore',
      'semaphore',
    ]);
  });

  it('the waiters gauge counts callers waiting right now, and comes back to 0', async () => {
    const holder = await locks.lock('queue');
    const waiting = [locks.withLock('queue', () => undefined), locks.withLock('queue', () => undefined)];
    // The second waits behind the first in this process, where Redis does not see it: the gauge is the sign.
    await until('two waiters counted', async () => (await sum('nest_lock.waiters', { 'nest_lock.kind': 'lock' })) >= 2);
    expect(await sum('nest_lock.waiters', { 'nest_lock.kind': 'lock' })).toBe(2);
    expect((await collect('nest_lock.waiters')).unit).toBe('{waiter}');

    await holder.unlock();
    await Promise.all(waiting);
    expect(await sum('nest_lock.waiters', { 'nest_lock.kind': 'lock' })).toBe(0);
  });

  it('a lost lease is counted with its kind and reason', async () => {
    const before = await sum('nest_lock.leases.lost', { 'nest_lock.kind': 'lock', 'nest_lock.reason': 'taken' });
    await locks.withLock(
      'lost',
      async (lock) => {
        await locks.forceUnlock('lost');
        while (!lock.signal.aborted) await sleep(20);
      },
      { ttl: 300 },
    );
    expect(await sum('nest_lock.leases.lost', { 'nest_lock.kind': 'lock', 'nest_lock.reason': 'taken' })).toBe(
      before + 1,
    );
  });

  it('a store failure: outcome error, and the span records the error', async () => {
    const deadPort = await freePort();
    const down = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: `redis://127.0.0.1:${deadPort}`, logger: false })],
    }).compile();
    try {
      await expect(down.get(LockService).lock('unreachable', { timeout: 200 })).rejects.toBeInstanceOf(
        LockBackendError,
      );
    } finally {
      await down.close();
    }

    const waits = await histogram('nest_lock.wait.duration', {
      'nest_lock.kind': 'lock',
      'nest_lock.outcome': 'error',
    });
    expect(waits?.count).toBeGreaterThanOrEqual(1);
    const [failed] = acquireSpans('unreachable');
    expect(failed?.attributes['nest_lock.outcome']).toBe('error');
    expect(failed?.status.code).toBe(SpanStatusCode.ERROR);
    expect(failed?.events.map((event) => event.name)).toContain('exception');
  });

  it('counts the leases a waiter got from a releasing holder, passed in its process or through the store', async () => {
    const before = {
      process: await sum('nest_lock.handovers', { 'nest_lock.kind': 'lock', 'nest_lock.via': 'process' }),
      store: await sum('nest_lock.handovers', { 'nest_lock.kind': 'lock', 'nest_lock.via': 'store' }),
    };
    // Three callers at once: the first takes the key, the next two are passed it here, without a command.
    await Promise.all([1, 2, 3].map(() => locks.withLock('handovers', () => sleep(5))));
    // A holder whose token the caller chose passes through the store.
    const holder = await locks.lock('handovers-own', { token: 'handovers-own-token' });
    const waiter = locks.lock('handovers-own', { timeout: 5_000 });
    await sleep(50);
    await holder.unlock();
    await (await waiter).unlock();

    expect(await sum('nest_lock.handovers', { 'nest_lock.kind': 'lock', 'nest_lock.via': 'process' })).toBe(
      before.process + 2,
    );
    expect(await sum('nest_lock.handovers', { 'nest_lock.kind': 'lock', 'nest_lock.via': 'store' })).toBe(
      before.store + 1,
    );
  });

  it('leader election: the leaderships gauge is 1 while leading and 0 after, each election counted', async () => {
    const leaders = module.get(LeaderService);
    const name = { 'nest_lock.name': 'metered' };
    const leadership = leaders.campaign('metered');
    await leadership.whenLeader();
    expect(await sum('nest_lock.leaderships', name)).toBe(1);
    expect(await sum('nest_lock.elections', name)).toBe(1);
    await leaders.resign('metered');
    expect(await sum('nest_lock.leaderships', name)).toBe(0);
    await leaders.campaign('metered').whenLeader();
    expect(await sum('nest_lock.elections', name)).toBe(2);
    await leaders.resign('metered');
  });

  it('passes an unordered lock (fair: false) to a waiter of its process without a command; a permit through Redis', async () => {
    const counted = (kind: string, via: string) =>
      sum('nest_lock.handovers', { 'nest_lock.kind': kind, 'nest_lock.via': via });
    const before = { lock: await counted('lock', 'process'), permits: await counted('semaphore', 'process') };
    await Promise.all([1, 2, 3].map(() => locks.withLock('unordered-passes', () => sleep(5), { fair: false })));
    await Promise.all([1, 2, 3].map(() => semaphores.withPermit('permit-passes', 1, () => sleep(5))));

    expect(await counted('lock', 'process')).toBe(before.lock + 2);
    expect(await counted('semaphore', 'process')).toBe(before.permits);
  });

  describe('on the memory store', () => {
    afterEach(() => spanExporter.reset());

    it('measures the same way', async () => {
      const memory = await Test.createTestingModule({ imports: [LockModule.forRoot({ store: 'memory' })] }).compile();
      const memoryLocks = memory.get(LockService);
      await Promise.all([1, 2].map(() => memoryLocks.withLock('in-memory', () => sleep(20))));
      await memory.close();

      expect(acquireSpans('in-memory').map((span) => span.attributes['nest_lock.outcome'])).toEqual([
        'acquired',
        'acquired',
      ]);
    });
  });
});

describe('without the optional peers installed (@opentelemetry/api, @nestjs/terminus)', () => {
  useBuilt('library');

  it('the main entry starts and locks, measuring nothing and never loading terminus', async () => {
    // A child process running the built package, where resolving either fails as if it were not installed.
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', './test/support/without-optional-peers.mjs', './test/support/workers/lock-once.mjs'],
      { timeout: 20_000 },
    );
    expect(stdout.trim()).toBe('locked without @opentelemetry/api, without @nestjs/terminus');
  });
});
