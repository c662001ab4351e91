import { AsyncLocalStorage } from 'node:async_hooks';
import type { LeaseKind } from '../store/store.js';

/** A lease a call chain can hold: a lock, a permit, or a permit of a `LocalSemaphore`. */
export interface ChainLease {
  /** Neither released nor lost. */
  readonly held: boolean;
  /** Gives the lease back; never throws (a failure is logged, the lease runs out on its own). */
  releaseQuietly(): Promise<void>;
}

export type ChainLeaseKind = LeaseKind | 'local-semaphore';

/**
 * One lease shared by the holders of a call chain: the outer `withLock` and every nested
 * `withLock` / decorated call on the same key that the chain starts, awaited or not. The lease
 * is given back when the last holder is done, so a nested call that outlives the outer one
 * (an event listener, a fire-and-forget call) still holds the lock while it runs.
 */
class SharedHold<L extends ChainLease> {
  private holders = 0;

  constructor(
    readonly entry: HoldEntry,
    readonly lease: L,
  ) {}

  /** Open to new holders: someone still holds it, and the lease is neither released nor lost. */
  get open(): boolean {
    return this.holders > 0 && this.lease.held;
  }

  enter(): HoldTicket<L> {
    this.holders++;
    let left = false;
    return {
      lease: this.lease,
      run: (fn) => runWithHold(this, fn),
      leave: async () => {
        if (left) return;
        left = true;
        if (--this.holders === 0) await this.lease.releaseQuietly();
      },
    };
  }
}

/** One holder's share of a lease: run code as its holder, then leave (once). */
export interface HoldTicket<L extends ChainLease> {
  readonly lease: L;
  /** Runs `fn` (and every chain it starts) as a holder of the lease, so that nested calls join it. */
  run<T>(fn: () => T): T;
  /** This holder is done; the last one to leave releases the lease. */
  leave(): Promise<void>;
}

/** Which lease of the chain: a kind and a key (or semaphore name). */
export interface HoldEntry {
  kind: ChainLeaseKind;
  id: string;
}

/** The holds of the current async call chain, innermost last. Another chain sees its own. */
const holdsOfChain = new AsyncLocalStorage<ReadonlyMap<string, SharedHold<ChainLease>>>();

/**
 * Joins the lease this call chain holds on `entry`, or takes a new one with `acquire`. The join
 * happens synchronously, before anything is awaited, so that an outer holder cannot give the
 * lease back between the start of a nested call and its joining.
 */
export function enterHold<L extends ChainLease>(entry: HoldEntry, acquire: () => Promise<L>): Promise<HoldTicket<L>> {
  const held = holdsOfChain.getStore()?.get(keyOf(entry));
  if (held?.open) return Promise.resolve(held.enter() as HoldTicket<L>);
  return acquire().then((lease) => new SharedHold(entry, lease).enter());
}

/**
 * Runs `fn` holding the lease on `entry` (joined or new) and leaves afterwards, whatever `fn` did.
 * The one implementation of "reuse the lease the chain holds, else acquire, run, release".
 */
export async function holdDuring<L extends ChainLease, T>(
  entry: HoldEntry,
  acquire: () => Promise<L>,
  fn: (lease: L) => T | Promise<T>,
): Promise<T> {
  const ticket = await enterHold(entry, acquire);
  try {
    return await ticket.run(() => fn(ticket.lease));
  } finally {
    await ticket.leave();
  }
}

/** The lease on `entry` this chain holds, or with no `id` the innermost open lease of `kind`. */
export function leaseOfChain(kind: ChainLeaseKind, id?: string): ChainLease | undefined {
  const holds = holdsOfChain.getStore();
  if (holds === undefined) return undefined;
  if (id !== undefined) {
    const hold = holds.get(keyOf({ kind, id }));
    return hold?.open ? hold.lease : undefined;
  }
  let innermost: ChainLease | undefined;
  for (const hold of holds.values()) if (hold.entry.kind === kind && hold.open) innermost = hold.lease;
  return innermost;
}

function runWithHold<T>(hold: SharedHold<ChainLease>, fn: () => T): T {
  const holds = new Map(holdsOfChain.getStore());
  const key = keyOf(hold.entry);
  // Re-inserted so that it counts as the innermost hold.
  holds.delete(key);
  holds.set(key, hold);
  return holdsOfChain.run(holds, fn);
}

function keyOf({ kind, id }: HoldEntry): string {
  return `${kind}\0${id}`;
}
