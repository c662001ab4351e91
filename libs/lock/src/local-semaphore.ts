import { InvalidArgumentError } from './lock.errors.js';

/** setTimeout's longest delay; a longer one would fire at once. */
const LONGEST_TIMER = 2 ** 31 - 1;

interface Waiter {
  resolve(acquired: boolean): void;
  timer?: NodeJS.Timeout;
}

/**
 * A counting semaphore inside one process, after OpenResty's `ngx.semaphore`: `wait()` takes a
 * resource or queues, `post()` adds resources and hands them to waiters first come, first
 * served. Waiting never blocks the event loop, and no timer holds the process open.
 */
export class LocalSemaphore {
  private resources: number;
  /** A Set keeps insertion order (FIFO) and lets a timed-out waiter leave from the middle. */
  private readonly waiters = new Set<Waiter>();

  constructor(resources = 0) {
    if (!Number.isInteger(resources) || resources < 0) {
      throw new RangeError(`LocalSemaphore needs a whole number of resources ≥ 0, got ${resources}`);
    }
    this.resources = resources;
  }

  /**
   * Takes one resource: `true` at once when one is free, else after queueing until `post()`
   * hands one over; `false` when `timeout` ms pass first (`0` = do not wait).
   */
  async wait(timeout = 0): Promise<boolean> {
    if (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout < 0) {
      throw new InvalidArgumentError('timeout', `must be a finite number ≥ 0, got ${String(timeout)}`);
    }
    if (this.resources > 0) {
      this.resources--;
      return true;
    }
    if (timeout === 0) return false;
    return new Promise<boolean>((resolve) => {
      const waiter: Waiter = { resolve };
      waiter.timer = setTimeout(
        () => {
          this.waiters.delete(waiter);
          resolve(false);
        },
        Math.min(timeout, LONGEST_TIMER),
      ).unref();
      this.waiters.add(waiter);
    });
  }

  /** Adds `n` resources, handing them to queued waiters in the order they came. */
  post(n = 1): void {
    if (!Number.isInteger(n) || n < 1) {
      throw new RangeError(`post() needs a whole number ≥ 1, got ${n}`);
    }
    this.resources += n;
    for (const waiter of this.waiters) {
      if (this.resources === 0) break;
      this.resources--;
      this.waiters.delete(waiter);
      clearTimeout(waiter.timer);
      waiter.resolve(true);
    }
  }

  /** Resources left; negative: that many waiters are queued. */
  count(): number {
    return this.resources > 0 ? this.resources : -this.waiters.size || 0;
  }
}
