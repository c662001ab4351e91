import { AsyncLocalStorage } from 'node:async_hooks';
import type { LeaseKind } from './store/store.js';

/** A lock or permit a call chain can hold: distributed leases, and permits of a `LocalSemaphore`. */
export interface ChainLease {
  /** `false` once released. */
  readonly active: boolean;
}

export type ChainLeaseKind = LeaseKind | 'local-semaphore';

/**
 * The leases held by the current async call chain, so that a nested `withLock` / `withPermit`
 * or decorated call on the same key joins the lease its caller holds instead of waiting for
 * it (a deadlock). Another chain sees its own map and waits as usual.
 */
const leasesOfChain = new AsyncLocalStorage<ReadonlyMap<string, ChainLease>>();

/** The lease on `kind`/`id` that this call chain holds and has not released, if any. */
export function leaseHeldByChain(kind: ChainLeaseKind, id: string): ChainLease | undefined {
  const lease = leasesOfChain.getStore()?.get(entryOf(kind, id));
  // A continuation that outlives the block (a timer started inside it) must not reuse a released lease.
  return lease?.active ? lease : undefined;
}

/** Runs `fn` with `lease` recorded as held by this call chain (and every chain it starts). */
export function runHolding<T>(kind: ChainLeaseKind, id: string, lease: ChainLease, fn: () => T): T {
  const held = new Map(leasesOfChain.getStore());
  held.set(entryOf(kind, id), lease);
  return leasesOfChain.run(held, fn);
}

function entryOf(kind: ChainLeaseKind, id: string): string {
  return `${kind}\0${id}`;
}
