import { InvalidArgumentError } from '../lock.errors.js';
import type { LockMode } from '../options/call-options.js';
import { slotOf } from '../store/redis/key-layout.js';
import type { ChainLease, HoldTicket } from './lease-chain.js';

/** What a lease set reads and calls of each of its leases: a held lease, or one holder's share of it. */
export interface HeldKey {
  readonly key: string;
  readonly mode: LockMode;
  readonly token: string;
  readonly elapsed: number;
  readonly signal: AbortSignal;
  readonly validity: number;
  fence(): Promise<number>;
  unlock(): Promise<boolean>;
  expire(ttl?: number): Promise<boolean>;
  /** Releases it; a failure is logged, not thrown. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * The one order every caller takes several keys in: by cluster hash slot, then by key. Two callers
 * that want overlapping keys take them in the same order, so neither can hold one the other waits for
 * while it waits for one the other holds: no deadlock, whatever order the keys were given in.
 */
export function inTakingOrder(keys: readonly string[]): string[] {
  const slots = new Map(keys.map((key) => [key, slotOf(key)]));
  return [...keys].sort((a, b) => slots.get(a)! - slots.get(b)! || (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * `keys` in taking order, cut into runs that one step of the store can take together
 * (`takesTogether`: on a Redis Cluster the keys of one hash slot, which the taking order keeps side
 * by side; on one server or in memory, all of them).
 */
export function takenTogether(keys: readonly string[], takesTogether: (a: string, b: string) => boolean): string[][] {
  const runs: string[][] = [];
  for (const key of keys) {
    const run = runs.at(-1);
    if (run !== undefined && takesTogether(run[0], key)) run.push(key);
    else runs.push([key]);
  }
  return runs;
}

/** How `takeInOrder` takes leases: a run of keys all at once when all are free, else one key. */
export interface TakeSteps<L> {
  /**
   * The leases of every key of `run`, all free, in one step; `undefined` when that did not take them
   * (none taken). `timeLeft` as for `one`: with none left, a failure to reach the store is thrown.
   */
  all(run: readonly string[], timeLeft: number): Promise<L[] | undefined>;
  /** The lease of `key`, waiting at most `timeLeft` ms for it. */
  one(key: string, timeLeft: number): Promise<L>;
  /** Gives a lease back; must not throw. */
  giveBack(lease: L): Promise<void>;
}

/**
 * Takes one lease per key of `runs` (`takenTogether`), in that order: each run of several keys at
 * once if all of it is free (all or none), else key by key — each told how much of `timeout` is
 * left — holding the earlier ones while it waits for the next. If one cannot be taken (a timeout, an
 * abort, a failure), every lease taken so far is given back and the error is thrown.
 */
export async function takeInOrder<L>(runs: readonly string[][], timeout: number, steps: TakeSteps<L>): Promise<L[]> {
  const start = performance.now();
  const taken: L[] = [];
  try {
    const timeLeft = () => Math.max(0, timeout - (performance.now() - start));
    for (const run of runs) {
      const all = run.length > 1 ? await steps.all(run, timeLeft()) : undefined;
      if (all !== undefined) taken.push(...all);
      else for (const key of run) taken.push(await steps.one(key, timeLeft()));
    }
    return taken;
  } catch (error) {
    await Promise.all(taken.map((lease) => steps.giveBack(lease)));
    throw error;
  }
}

/**
 * Several keys held as one lock (`Lock` with `keys`): every key's own lease, renewed by the watchdog
 * like any other, seen together. `key` and `token` are the first key's; `validity` the shortest;
 * `signal` aborts as soon as any key's lease is lost; `unlock()` and `expire()` act on every key and
 * say `true` only when every key was still held.
 */
export class LeaseSet {
  private lostController?: AbortController;

  constructor(
    private readonly leases: readonly HeldKey[],
    /** Whole ms spent waiting for all of them. */
    readonly elapsed: number,
  ) {}

  get key(): string {
    return this.leases[0].key;
  }

  get keys(): readonly string[] {
    return this.leases.map((lease) => lease.key);
  }

  get mode(): LockMode {
    return this.leases[0].mode;
  }

  get token(): string {
    return this.leases[0].token;
  }

  get validity(): number {
    return Math.min(...this.leases.map((lease) => lease.validity));
  }

  /** Made on first use: aborted with the first loss among the keys. */
  get signal(): AbortSignal {
    if (this.lostController === undefined) {
      const controller = new AbortController();
      this.lostController = controller;
      for (const { signal } of this.leases) {
        if (signal.aborted) controller.abort(signal.reason);
        else signal.addEventListener('abort', () => controller.abort(signal.reason), { once: true });
      }
    }
    return this.lostController.signal;
  }

  /** The fence of `key`'s lease, the first key's by default. */
  fence(key: string = this.key): Promise<number> {
    const lease = this.leases.find((each) => each.key === key);
    if (lease === undefined) {
      return Promise.reject(new InvalidArgumentError('key', `"${key}" is not one of this lock's keys`));
    }
    return lease.fence();
  }

  async unlock(): Promise<boolean> {
    return (await Promise.all(this.leases.map((lease) => lease.unlock()))).every(Boolean);
  }

  async expire(ttl?: number): Promise<boolean> {
    return (await Promise.all(this.leases.map((lease) => lease.expire(ttl)))).every(Boolean);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await Promise.all(this.leases.map((lease) => lease[Symbol.asyncDispose]()));
  }
}

/**
 * The tickets of a call chain that holds several keys, as one (`withLock(keys)`, `@WithLock([…])`):
 * its code runs as the holder of each key (a nested call on one of them joins it), sees them as one
 * `LeaseSet` of its shares, and leaves them all.
 */
export function ticketOfAll<L extends ChainLease>(tickets: readonly HoldTicket<L>[], elapsed: number): HoldTicket<L> {
  return {
    lease: tickets[0].lease,
    handle: new LeaseSet(
      tickets.map((ticket) => ticket.handle as HeldKey),
      elapsed,
    ),
    run: <T>(fn: () => T): T => tickets.reduceRight<() => T>((inner, ticket) => () => ticket.run(inner), fn)(),
    leave: async () => void (await Promise.all(tickets.map((ticket) => ticket.leave()))),
  };
}
