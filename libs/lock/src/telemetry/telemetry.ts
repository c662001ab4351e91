import type { Attributes, Counter, Histogram, Span, Tracer, UpDownCounter } from '@opentelemetry/api';
import { errorMessage, type LockLostError } from '../lock.errors.js';

type OpenTelemetryApi = typeof import('@opentelemetry/api');

/** Why a decorated call with `onBusy: 'skip'` did not run: its lease was held elsewhere, or the store was away. */
export type SkipReason = 'busy' | 'unavailable' | 'not-leader';

/** A decorated call that did not run (`onBusy: 'skip'`): why, counted by `reason` and logged with `detail`. */
export interface Skip {
  reason: SkipReason;
  /** For the log line: `lock "k" is held elsewhere`. */
  detail: string;
}
/**
 * `@opentelemetry/api` is an optional peer: asked for once, when this module loads, and without
 * it every measurement below is a no-op. A dynamic import, so that the CommonJS and the ESM builds
 * both load it, and an application without it never fails to start.
 */
const openTelemetry: Promise<OpenTelemetryApi | undefined> = import('@opentelemetry/api').then(
  (api) => api,
  () => undefined,
);

/** The name of nest-lock's meter and tracer. */
const INSTRUMENTATION_NAME = 'nest-lock';
const ACQUIRE_SPAN_NAME = 'nest-lock.acquire';

interface Instruments {
  api: OpenTelemetryApi;
  /** A meter provider was registered when the module started: the metrics are recorded. */
  metered: boolean;
  /** Whether a tracer provider is registered now (one may come after the module started). */
  tracing(): boolean;
  tracer: Tracer;
  waitDuration: Histogram;
  holdDuration: Histogram;
  timeouts: Counter;
  lostLeases: Counter;
  skipped: Counter;
  handovers: Counter;
  waiters: UpDownCounter;
  leaderships: UpDownCounter;
  elections: Counter;
}

type AcquireOutcome = 'acquired' | 'timeout' | 'error';

/** How a waiter got a lease from a releasing holder (`nest_lock.handovers`). */
export type HandedOverVia = 'process' | 'store';

/** Ends the hold time of one lease; only the first call counts. */
export interface HoldTimer {
  end(): void;
}

const UNTIMED: HoldTimer = { end: () => undefined };

/**
 * nest-lock's metrics and spans (see "Observability" in docs/API.md). The instruments are made
 * when the module starts, from the meter provider registered then: OpenTelemetry's metrics API
 * does not forward to a provider registered later, so the SDK must start before the application.
 */
export class LockTelemetry {
  private constructor(private readonly instruments: Instruments | undefined) {}

  static async create(): Promise<LockTelemetry> {
    const api = await openTelemetry;
    if (api === undefined) return new LockTelemetry(undefined);
    const meter = api.metrics.getMeter(INSTRUMENTATION_NAME);
    // Without an SDK, the API hands out no-op meters (this one, whoever asks) and a tracer provider
    // that delegates to a no-op one: nothing is measured then, and nothing is made per acquisition.
    const metered = meter !== api.createNoopMeter();
    const noTracing = new api.ProxyTracerProvider().getDelegate();
    return new LockTelemetry({
      api,
      metered,
      tracing: () => (api.trace.getTracerProvider() as { getDelegate?(): unknown }).getDelegate?.() !== noTracing,
      tracer: api.trace.getTracer(INSTRUMENTATION_NAME),
      waitDuration: meter.createHistogram('nest_lock.wait.duration', {
        description: 'Time a caller waited for a lock or permit, whatever came of it',
        unit: 'ms',
      }),
      holdDuration: meter.createHistogram('nest_lock.hold.duration', {
        description: 'Time a lock or permit was held, from its grant to its release',
        unit: 'ms',
      }),
      timeouts: meter.createCounter('nest_lock.timeouts', {
        description: 'Waits for a lock or permit that ended without one when their timeout passed',
        unit: '{timeout}',
      }),
      lostLeases: meter.createCounter('nest_lock.leases.lost', {
        description: 'Leases lost while renewed or held by a scope (the ones onLockLost is told about)',
        unit: '{lease}',
      }),
      skipped: meter.createCounter('nest_lock.skipped', {
        description:
          "Decorated calls that did not run because their lease was held elsewhere or the store was away (onBusy: 'skip')",
        unit: '{call}',
      }),
      handovers: meter.createCounter('nest_lock.handovers', {
        description:
          'Leases a waiter got from a releasing holder: passed within its process without a command (process), or handed over through the store (store)',
        unit: '{lease}',
      }),
      waiters: meter.createUpDownCounter('nest_lock.waiters', {
        description: 'Callers of this process waiting for a lock or permit right now',
        unit: '{waiter}',
      }),
      leaderships: meter.createUpDownCounter('nest_lock.leaderships', {
        description: 'Names this process leads right now (LeaderService): 1 per name while it leads',
        unit: '{leadership}',
      }),
      elections: meter.createCounter('nest_lock.elections', {
        description: 'Leaderships this process began, each under a new term (LeaderService)',
        unit: '{leadership}',
      }),
    });
  }

  /**
   * Runs one acquisition (`acquire`) inside a `nest-lock.acquire` span, counted as a waiter
   * meanwhile; records its wait time and outcome, and counts a timeout.
   */
  observeAcquire<Result extends { token: string; elapsed: number } | { waited: number }>(
    /** The kind of lease (`lock`, `semaphore`): the `nest_lock.kind` attribute. */
    kind: string,
    id: string,
    acquire: () => Promise<Result>,
  ): Promise<Result> {
    // Not an async function: unobserved (the common case), the acquisition's own promise is returned as it is.
    const { instruments } = this;
    if (instruments === undefined || !(instruments.metered || instruments.tracing())) return acquire();
    return this.observed(instruments, kind, id, acquire);
  }

  private observed<Result extends { token: string; elapsed: number } | { waited: number }>(
    instruments: Instruments,
    kind: string,
    id: string,
    acquire: () => Promise<Result>,
  ): Promise<Result> {
    const { api, tracer, waiters } = instruments;
    const kindOnly: Attributes = { 'nest_lock.kind': kind };
    const start = performance.now();
    waiters.add(1, kindOnly);
    const attributes: Attributes = { 'nest_lock.kind': kind, 'nest_lock.key': id };
    return tracer.startActiveSpan(ACQUIRE_SPAN_NAME, { attributes }, async (span) => {
      try {
        const result = await acquire();
        if ('token' in result) this.acquireEnded(span, kind, 'acquired', result.elapsed);
        else this.acquireEnded(span, kind, 'timeout', result.waited);
        return result;
      } catch (error) {
        this.acquireEnded(span, kind, 'error', performance.now() - start);
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: errorMessage(error) });
        throw error;
      } finally {
        waiters.add(-1, kindOnly);
        span.end();
      }
    });
  }

  /**
   * `count` leases of `kind` taken together at once (a lock on several free keys, one step): each
   * recorded as an acquisition that waited 0 ms. No span: nothing was waited for.
   */
  acquiredAtOnce(kind: string, count: number): void {
    if (this.instruments === undefined || !this.instruments.metered) return;
    for (let i = 0; i < count; i++) {
      this.instruments.waitDuration.record(0, { 'nest_lock.kind': kind, 'nest_lock.outcome': 'acquired' });
    }
  }

  /** Starts the hold time of a lease just granted; it is recorded when the lease is released. */
  startHold(kind: string): HoldTimer {
    if (this.instruments === undefined || !this.instruments.metered) return UNTIMED;
    const { holdDuration } = this.instruments;
    const start = performance.now();
    let ended = false;
    return {
      end: () => {
        if (ended) return;
        ended = true;
        holdDuration.record(performance.now() - start, { 'nest_lock.kind': kind });
      },
    };
  }

  /** This process began leading `name` (`LeaderService`): counted, and led until `leadershipEnded`. */
  leadershipBegan(name: string): void {
    this.instruments?.elections.add(1, { 'nest_lock.name': name });
    this.instruments?.leaderships.add(1, { 'nest_lock.name': name });
  }

  leadershipEnded(name: string): void {
    this.instruments?.leaderships.add(-1, { 'nest_lock.name': name });
  }

  /** A decorated call of `kind` skipped (`onBusy: 'skip'`): its lease was held elsewhere (`busy`), or the store away (`unavailable`). */
  skipped(kind: string, reason: SkipReason): void {
    this.instruments?.skipped.add(1, { 'nest_lock.kind': kind, 'nest_lock.reason': reason });
  }

  /** A waiter of `kind` got its lease from a releasing holder: `process`, passed without a command; `store`, handed over through the store. */
  handedOver(kind: string, via: HandedOverVia): void {
    this.instruments?.handovers.add(1, { 'nest_lock.kind': kind, 'nest_lock.via': via });
  }

  leaseLost(error: LockLostError): void {
    this.instruments?.lostLeases.add(1, { 'nest_lock.kind': error.kind, 'nest_lock.reason': error.reason });
  }

  private acquireEnded(span: Span, kind: string, outcome: AcquireOutcome, waited: number): void {
    const { waitDuration, timeouts } = this.instruments!;
    waitDuration.record(waited, { 'nest_lock.kind': kind, 'nest_lock.outcome': outcome });
    if (outcome === 'timeout') timeouts.add(1, { 'nest_lock.kind': kind });
    span.setAttributes({ 'nest_lock.outcome': outcome, 'nest_lock.waited_ms': Math.round(waited) });
  }
}
