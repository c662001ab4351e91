import { enterHold, type HoldTicket } from './lease/lease-chain.js';
import { LocalSemaphore } from './local-semaphore.js';
import { InvalidArgumentError, SemaphoreTimeoutError } from './lock.errors.js';

/** A resource taken from a `LocalSemaphore`; `release()` posts it back once. */
export class LocalPermit {
  private released = false;

  constructor(
    readonly name: string,
    private readonly semaphore: LocalSemaphore,
  ) {}

  get held(): boolean {
    return !this.released;
  }

  async release(): Promise<boolean> {
    if (this.released) return false;
    this.released = true;
    this.semaphore.post();
    return true;
  }

  /** The same as `release()`, which cannot fail. */
  async releaseQuietly(): Promise<void> {
    await this.release();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/**
 * The in-process semaphores of one module, by name (`@Semaphore(limit, { scope: 'local' })`): one
 * `LocalSemaphore` per name, created with its limit on first use. Arguments are checked by the caller.
 */
export class LocalSemaphores {
  private readonly semaphores = new Map<string, { limit: number; semaphore: LocalSemaphore }>();

  /** The semaphore of `name`, made with `limit` resources on first use. One name keeps one limit. */
  of(name: string, limit: number): LocalSemaphore {
    const existing = this.semaphores.get(name);
    if (existing === undefined) {
      const semaphore = new LocalSemaphore(limit);
      this.semaphores.set(name, { limit, semaphore });
      return semaphore;
    }
    if (existing.limit !== limit) {
      throw new InvalidArgumentError('limit', `local semaphore "${name}" has limit ${existing.limit}, not ${limit}`);
    }
    return existing.semaphore;
  }

  /** A permit of `name`: waits up to `timeout`, then rejects with `SemaphoreTimeoutError`. */
  async acquire(name: string, limit: number, timeout: number): Promise<LocalPermit> {
    const semaphore = this.of(name, limit);
    const start = performance.now();
    if (!(await semaphore.wait(timeout))) {
      throw new SemaphoreTimeoutError(name, limit, performance.now() - start, timeout);
    }
    return new LocalPermit(name, semaphore);
  }

  /** Joins the permit of `name` the call chain holds, or waits for one, as a holder that must `leave()`. */
  enter(name: string, limit: number, timeout: number): Promise<HoldTicket<LocalPermit>> {
    this.of(name, limit);
    return enterHold({ kind: 'local-semaphore', id: name, scope: this }, () => this.acquire(name, limit, timeout));
  }
}
