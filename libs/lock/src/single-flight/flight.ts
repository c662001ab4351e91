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

/** The flights of `load` and those of `getOrLoad`: one key in each never shares a lock or a result. */
export type FlightKind = 'load' | 'cache';

/** Where a flight of `key` keeps its lock and its records on the store. */
export function flightNames(kind: FlightKind, key: string): { lock: string; result: string; error: string } {
  const prefix = kind === 'load' ? 'single-flight' : 'single-flight-cache';
  return { lock: `${prefix}:${key}`, result: `${prefix}:${key}`, error: `${prefix}-error:${key}` };
}

/** A flight's loader, told the lock it runs under (to check that it still holds it before it writes). */
export type FlightLoader<T> = (lock: Lock) => T | Promise<T>;

/** One caller of a flight: settled by the flight's outcome, unless it left first. */
interface Caller<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

/**
 * One load of a key as this process sees it: the callers of the process share it (one promise, no
 * command of their own). Across processes the key's lock decides who loads: the process that takes
 * it to write runs the loader, leaves the result on the store and releases; the others wait for it
 * to read — the release lets them all in at once — and read the result. A reader that finds none (the
 * loader's process died, or gave up) waits in the lock's line to write, and loads in its turn unless a
 * result came meanwhile.
 */
export class Flight<T> {
  private readonly callers = new Set<Caller<T>>();
  /** Aborted when every caller of this process gave up: it stops waiting, and a load it runs stops counting. */
  private readonly abandoned = new AbortController();
  private readonly names: ReturnType<typeof flightNames>;
  /** `performance.now()` when it began (see `joinableWithin`). */
  private readonly startedAt = performance.now();

  constructor(
    kind: FlightKind,
    private readonly key: string,
    private readonly loader: FlightLoader<T>,
    private readonly settings: ResolvedSingleFlightOptions<T>,
    private readonly locks: LockService,
    private readonly values: SharedValues,
    private readonly logger: LockLogger,
    /** Called when the flight is over for this process (settled, or abandoned by its last caller): once or twice. */
    private readonly ended: () => void,
    /** Told once of a value this process received from another's load (not of one it loaded). */
    private readonly received?: (value: T) => void,
  ) {
    this.names = flightNames(kind, key);
    // One reaction for every caller, however many come and go (each kept none of its own).
    this.fly().then(
      (value) => this.settle((caller) => caller.resolve(value)),
      (error: unknown) => this.settle((caller) => caller.reject(error)),
    );
  }

  /**
   * Whether a caller that waits `timeout` ms may join it: not once it has run longer than that. A
   * flight that late may never end (a loader that hangs), and callers that keep joining it would keep
   * it — and the key's lock — alive for ever; such a caller starts a flight of its own, which waits in
   * the key's line, and the old one ends when the callers it had give up.
   */
  joinableWithin(timeout: number): boolean {
    return performance.now() - this.startedAt <= timeout;
  }

  /**
   * One caller's wait for the result: its own `timeout` and `signal` end its wait only. A wait in the
   * background (`background`: nobody awaits it) does not keep the process alive.
   */
  join(timeout: number, signal: AbortSignal | undefined, background = false): Promise<T> {
    const start = performance.now();
    return new Promise<T>((resolve, reject) => {
      const leave = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        this.callers.delete(caller);
      };
      const caller: Caller<T> = {
        resolve: (value) => (leave(), resolve(value)),
        reject: (error) => (leave(), reject(error)),
      };
      const gaveUp = (error: unknown): void => {
        leave();
        reject(error);
        if (this.callers.size === 0) this.abandon();
      };
      const aborted = (): void => gaveUp(signal!.reason);
      const timer = setTimeout(
        () => gaveUp(new LoadTimeoutError(this.key, performance.now() - start, timeout)),
        timeout,
      );
      if (background) timer.unref();
      this.callers.add(caller);
      signal?.addEventListener('abort', aborted, { once: true });
    });
  }

  private settle(each: (caller: Caller<T>) => void): void {
    for (const caller of [...this.callers]) each(caller);
    this.ended();
  }

  /**
   * Every caller of this process gave up: it stops waiting for another's load, a load it runs gives
   * its lock back (another process may load, and this one's result, should it come, is not left), and
   * a caller that comes now starts a flight of its own rather than join one that is ending.
   */
  private abandon(): void {
    this.abandoned.abort(new LoadTimeoutError(this.key, 0, 0));
    this.ended();
  }

  private async fly(): Promise<T> {
    const { lockTtl, cacheErrorsFor } = this.settings;
    const signal = this.abandoned.signal;
    if (cacheErrorsFor > 0) {
      const cached = await this.values.get(this.names.error);
      if (cached !== undefined) return readRecord(this.key, cached, this.settings);
    }
    const free = await this.locks.tryLock(this.names.lock, { ttl: lockTtl, autoExtend: true });
    if (free !== null) return this.loadHolding(free);
    // Another process loads (or its waiters read what it loaded): wait until its release lets us read.
    const reading = await this.locks.lock(this.names.lock, {
      mode: 'read',
      // Held for one read: a reader whose process dies keeps the next load waiting this long at most.
      ttl: Math.min(lockTtl, READ_TTL),
      timeout: LONGEST_DURATION,
      signal,
    });
    const record = await this.readResult(reading);
    if (record !== undefined) return this.receive(record);
    // No result: its loader died or gave up. Wait in the lock's line to write — not in a loop of
    // attempts beside the other readers — and load in turn, unless a load came first.
    const writing = await this.locks.lock(this.names.lock, {
      ttl: lockTtl,
      autoExtend: true,
      timeout: LONGEST_DURATION,
      signal,
    });
    const meanwhile = await this.values.get(this.names.result).catch(async (error: unknown) => {
      await writing.unlock().catch(() => false);
      throw error;
    });
    if (meanwhile === undefined) return this.loadHolding(writing);
    await writing.unlock().catch(() => false);
    return this.receive(meanwhile);
  }

  /** The value (or error) of another process's load, from its record. */
  private receive(record: string): T {
    const value = readRecord(this.key, record, this.settings);
    this.received?.(value);
    return value;
  }

  /** The result the loader left, read under `reading`, which is released at once (not waited for). */
  private async readResult(reading: Lock): Promise<string | undefined> {
    try {
      return await this.values.get(this.names.result);
    } finally {
      // A failure of the release only makes the read lease run out.
      void reading.unlock().catch(() => false);
    }
  }

  /**
   * Runs the loader under the key's lock (renewed meanwhile), leaves its result for the waiters and
   * releases. The writes and the release are not waited for one by one: the store applies the
   * commands of one connection in order, and the result's key shares the lock's hash tag (one server,
   * on a Cluster too), so a waiter the release lets in finds the result written. Abandoned by every
   * caller of this process meanwhile — even before the lock was taken — the lock is given back at
   * once: a loader that never ends holds the key no longer than its callers wait, and what it returns
   * late is nobody's. A result is left only while the lock is still held: a loader whose lease ran out
   * (its process froze) must not write over the result of the load that came after it. The callers
   * are answered once the release is: a call after theirs finds the key free, and loads again.
   */
  private async loadHolding(lock: Lock): Promise<T> {
    const signal = this.abandoned.signal;
    const release = (): void => void lock.unlock().catch(() => false);
    if (signal.aborted) {
      release();
      throw signal.reason;
    }
    signal.addEventListener('abort', release, { once: true });
    let record: string | undefined;
    let failed = false;
    try {
      // An earlier load's result must not answer the waiters of this one if this process dies.
      this.keep(this.values.delete(this.names.result));
      const value = await this.loader(lock);
      record = valueRecord(this.key, value, this.settings);
      return value;
    } catch (thrown) {
      failed = true;
      record = errorRecord(thrown, this.settings.maxValueBytes);
      throw thrown;
    } finally {
      signal.removeEventListener('abort', release);
      if (record !== undefined && !signal.aborted && lock.validity > 0) {
        this.keep(this.values.set(this.names.result, record, RESULT_TTL));
        const { cacheErrorsFor } = this.settings;
        if (failed && cacheErrorsFor > 0) this.keep(this.values.set(this.names.error, record, cacheErrorsFor));
      }
      if (!signal.aborted) await lock.unlock().catch(() => false);
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
