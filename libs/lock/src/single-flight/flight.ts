import type { Lock } from '../held-lock.js';
import { errorMessage, LoadTimeoutError } from '../lock.errors.js';
import type { LockLogger } from '../lock-logger.js';
import type { LockService } from '../lock.service.js';
import { LONGEST_DURATION } from '../options/durations.js';
import type { SharedValues } from '../store/store.js';
import { errorRecord, readRecord, valueRecord } from './flight-record.js';
import type { ResolvedSingleFlightOptions } from './single-flight-options.js';

/**
 * How long a load's result stays for the processes that waited for it: they read it the moment the
 * loader's release lets them in, so a few seconds cover a slow network; it never outlives them long.
 */
const RESULT_TTL = 10_000;

/** The longest lease a waiter reads the result under (one command's time, with a wide margin). */
const READ_TTL = 5_000;

/** Where a flight of `key` keeps its lock and its records on the store. */
export function flightNames(key: string): { lock: string; result: string; error: string } {
  return { lock: `single-flight:${key}`, result: `single-flight:${key}`, error: `single-flight-error:${key}` };
}

/**
 * One load of a key as this process sees it: the callers of the process share it (one promise, no
 * command of their own). Across processes the key's lock decides who loads: the process that takes
 * it to write runs the loader, leaves the result on the store and releases; the others wait for it
 * to read — the release lets them all in at once — and read the result. A result that is not there
 * (the loader's process died, or it could not write) sends them back to take the lock themselves.
 */
export class Flight<T> {
  readonly result: Promise<T>;
  private callers = 0;
  /** Aborted when every caller of this process gave up while it waited for another's load. */
  private readonly abandoned = new AbortController();
  private loading = false;
  private readonly names: ReturnType<typeof flightNames>;

  constructor(
    private readonly key: string,
    private readonly loader: () => T | Promise<T>,
    private readonly settings: ResolvedSingleFlightOptions<T>,
    private readonly locks: LockService,
    private readonly values: SharedValues,
    private readonly logger: LockLogger,
    /** Called when the flight is over for this process (settled, or abandoned by its last caller): once or twice. */
    private readonly ended: () => void,
  ) {
    this.names = flightNames(key);
    this.result = this.fly();
    // Every caller handles it in `join`; a flight abandoned by all of them rejects for nobody.
    this.result.catch(() => undefined).finally(ended);
  }

  /** One caller's wait for the result: its own `timeout` and `signal` end its wait only. */
  join(timeout: number, signal: AbortSignal | undefined): Promise<T> {
    this.callers++;
    const start = performance.now();
    return new Promise<T>((resolve, reject) => {
      let left = false;
      const leave = (): void => {
        if (left) return;
        left = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        if (--this.callers === 0 && !this.loading) this.abandon();
      };
      const aborted = (): void => {
        leave();
        reject(signal!.reason);
      };
      const timer = setTimeout(() => {
        leave();
        reject(new LoadTimeoutError(this.key, performance.now() - start, timeout));
      }, timeout);
      if (signal?.aborted) return aborted();
      signal?.addEventListener('abort', aborted, { once: true });
      this.result.then(
        (value) => (leave(), resolve(value)),
        (error: unknown) => (leave(), reject(error)),
      );
    });
  }

  /**
   * Every caller gave up while another process loads: this process stops waiting, and a caller that
   * comes now starts a flight of its own rather than join one that is ending.
   */
  private abandon(): void {
    this.abandoned.abort();
    this.ended();
  }

  private async fly(): Promise<T> {
    const { lockTtl, cacheErrorsFor } = this.settings;
    for (;;) {
      if (cacheErrorsFor > 0) {
        const cached = await this.values.get(this.names.error);
        if (cached !== undefined) return readRecord(this.key, cached, this.settings);
      }
      const lock = await this.locks.tryLock(this.names.lock, { ttl: lockTtl, autoExtend: true });
      if (lock !== null) return this.loadHolding(lock);
      // Another process loads (or its waiters read what it loaded): wait until its release lets us read.
      const reading = await this.locks.lock(this.names.lock, {
        mode: 'read',
        // Held for one read: a reader whose process dies keeps the next load waiting this long at most.
        ttl: Math.min(lockTtl, READ_TTL),
        timeout: LONGEST_DURATION,
        signal: this.abandoned.signal,
      });
      let record: string | undefined;
      try {
        record = await this.values.get(this.names.result);
      } finally {
        // The callers need not wait for the release (a failure only makes the read lease run out).
        void reading.unlock().catch(() => false);
      }
      if (record !== undefined) return readRecord(this.key, record, this.settings);
      // No result: its loader died, or could not leave it. Take the lock again (it is free by now).
    }
  }

  /**
   * Runs the loader under the key's lock (renewed meanwhile), leaves its result for the waiters and
   * releases. The writes and the release are not waited for one by one: the store applies the
   * commands of one connection in order, and the result's key shares the lock's hash tag (one server,
   * on a Cluster too), so a waiter the release lets in finds the result written.
   */
  private async loadHolding(lock: Lock): Promise<T> {
    this.loading = true;
    let record: string | undefined;
    let failed = false;
    try {
      // An earlier load's result must not answer the waiters of this one if this process dies.
      this.keep(this.values.delete(this.names.result));
      const value = await this.loader();
      record = valueRecord(this.key, value, this.settings);
      return value;
    } catch (thrown) {
      failed = true;
      record = errorRecord(thrown);
      throw thrown;
    } finally {
      if (record !== undefined) {
        this.keep(this.values.set(this.names.result, record, RESULT_TTL));
        const { cacheErrorsFor } = this.settings;
        if (failed && cacheErrorsFor > 0) this.keep(this.values.set(this.names.error, record, cacheErrorsFor));
      }
      await lock.unlock().catch(() => false);
    }
  }

  /** A write for the waiters, not waited for: its failure only costs them a load of their own. */
  private keep(write: Promise<void>): void {
    write.catch((failure: unknown) =>
      this.logger.warn(
        `Single-flight "${this.key}": the result could not be left for other processes, which will load again: ${errorMessage(failure)}`,
      ),
    );
  }
}
