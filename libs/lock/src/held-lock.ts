import { HeldLease } from './lease/held-lease.js';
import { LeaseShare } from './lease/lease-share.js';
import { InvalidArgumentError } from './lock.errors.js';
import type { LockMode } from './options/call-options.js';

/** A held lock. Its lease runs out after `ttl` unless it is renewed (`autoExtend`, or `expire()`). */
export interface Lock {
  /** The key; for a lock on several keys, the first of `keys`. */
  readonly key: string;
  /** Every key it holds, without repeats, in the order they were taken (`[key]` for one key). */
  readonly keys: readonly string[];
  /** `'write'`: held alone; `'read'`: beside other readers of the key (`LockOptions.mode`). */
  readonly mode: LockMode;
  /** Owner token: 128 random bits, fresh for every acquisition, unless the caller supplied one. */
  readonly token: string;
  /** Milliseconds spent waiting before the lock was acquired (exactly 0 when it was free). */
  readonly elapsed: number;
  /**
   * The lock's fence: strictly greater than the fence of every earlier holder of this key, by any
   * owner in any process — a protected resource that refuses writes with a fence lower than the
   * highest it has seen refuses the late writes of a holder that lost its lease. Drawn on the first
   * call while the lock is ours (one round trip; a lock handed over by a release came with it), the
   * same number after that. Rejects with `LockLostError` when the lock is not ours any more. On
   * several keys: the fence of `key`, the first key's by default.
   */
  fence(key?: string): Promise<number>;
  /** Aborted with a `LockLostError` once the lease is known to be lost (also by an `unlock()` that finds it gone); never by an `unlock()` that frees it. */
  readonly signal: AbortSignal;
  /** Milliseconds the lease is still guaranteed to be ours (0 once unlocked or lost). */
  readonly validity: number;
  /** `true`: released by us; `false`: no longer ours (expired or taken). Never deletes another owner's lock. */
  unlock(): Promise<boolean>;
  /** Resets the remaining lease to `ttl` (default: its current ttl: the one it was taken with, or the last given to `expire()`); `false` if no longer ours. */
  expire(ttl?: number): Promise<boolean>;
  /** `await using lock = await locks.lock('key')` unlocks at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * A lock as its holder sees it: a held lease of `lockKind` under a lock's names — its `key` (one:
 * `keys` is `[key]`), its `mode` (the request it was taken with), `unlock()` for its release.
 */
export class HeldLock extends HeldLease<LockMode> implements Lock {
  get key(): string {
    return this.id;
  }

  get keys(): readonly string[] {
    return [this.id];
  }

  get mode(): LockMode {
    return this.request;
  }

  override fence(key?: string): Promise<number> {
    return key === undefined || key === this.id ? super.fence() : notThisLocksKey(key);
  }

  unlock(): Promise<boolean> {
    return this.release();
  }

  /** How one holder of a call chain sees it: `unlock()` ends that holder's share only. */
  shareWith(leave: () => Promise<boolean>): LockShare {
    return new LockShare(this, leave);
  }
}

/** One holder's share of a lock held by several holders of a call chain (see `LeaseShare`). */
export class LockShare extends LeaseShare<LockMode> implements Lock {
  get key(): string {
    return this.lease.id;
  }

  get keys(): readonly string[] {
    return [this.lease.id];
  }

  get mode(): LockMode {
    return this.lease.request;
  }

  override fence(key?: string): Promise<number> {
    return key === undefined || key === this.lease.id ? super.fence() : notThisLocksKey(key);
  }

  unlock(): Promise<boolean> {
    return this.leave();
  }
}

/**
 * Several keys held as one lock (`Lock` with `keys`): every key's own lock, renewed by the watchdog
 * like any other, seen together. `key` and `token` are the first key's; `validity` the shortest;
 * `signal` aborts as soon as any key's lease is lost; `unlock()` and `expire()` act on every key and
 * say `true` only when every key was still held.
 */
export class LockSet implements Lock {
  private lostController?: AbortController;

  constructor(
    /** Each key's lock, or its holder's share of it, in the order they were taken. */
    private readonly locks: readonly Lock[],
    /** Whole ms spent waiting for all of them. */
    readonly elapsed: number,
  ) {}

  get key(): string {
    return this.locks[0].key;
  }

  get keys(): readonly string[] {
    return this.locks.map((lock) => lock.key);
  }

  get mode(): LockMode {
    return this.locks[0].mode;
  }

  get token(): string {
    return this.locks[0].token;
  }

  get validity(): number {
    return Math.min(...this.locks.map((lock) => lock.validity));
  }

  /** Made on first use: aborted with the first loss among the keys. */
  get signal(): AbortSignal {
    if (this.lostController === undefined) {
      const controller = new AbortController();
      this.lostController = controller;
      for (const { signal } of this.locks) {
        if (signal.aborted) controller.abort(signal.reason);
        else signal.addEventListener('abort', () => controller.abort(signal.reason), { once: true });
      }
    }
    return this.lostController.signal;
  }

  /** The fence of `key`'s lock, the first key's by default. */
  fence(key: string = this.key): Promise<number> {
    const lock = this.locks.find((each) => each.key === key);
    if (lock === undefined) {
      return Promise.reject(new InvalidArgumentError('key', `"${key}" is not one of this lock's keys`));
    }
    return lock.fence();
  }

  async unlock(): Promise<boolean> {
    return (await Promise.all(this.locks.map((lock) => lock.unlock()))).every(Boolean);
  }

  async expire(ttl?: number): Promise<boolean> {
    return (await Promise.all(this.locks.map((lock) => lock.expire(ttl)))).every(Boolean);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await Promise.all(this.locks.map((lock) => lock[Symbol.asyncDispose]()));
  }
}

function notThisLocksKey(key: string): Promise<never> {
  return Promise.reject(new InvalidArgumentError('key', `"${key}" is not this lock's key`));
}
