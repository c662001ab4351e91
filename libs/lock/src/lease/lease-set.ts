import type { ChainLease, HoldTicket } from './lease-chain.js';

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
 * Takes one lease per key of `runs` (`keyRuns`), in that order: each run of several keys at
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
 * The tickets of a call chain that holds several leases, as one (`withLock(keys)`, `@WithLock([…])`): its
 * code runs as the holder of each (a nested call on one of them joins it), sees them through one handle
 * (`handleOf` their handles: a lock on several keys), and leaves them all.
 */
export function ticketOfAll<L extends ChainLease>(
  tickets: readonly HoldTicket<L>[],
  handleOf: (handles: readonly object[]) => object,
): HoldTicket<L> {
  return {
    lease: tickets[0].lease,
    handle: handleOf(tickets.map((ticket) => ticket.handle)),
    run: <T>(fn: () => T): T => tickets.reduceRight<() => T>((inner, ticket) => () => ticket.run(inner), fn)(),
    leave: async () => void (await Promise.all(tickets.map((ticket) => ticket.leave()))),
  };
}
