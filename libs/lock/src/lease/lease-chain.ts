import { AsyncLocalStorage } from 'node:async_hooks';

/** A lease a call chain can hold: a lease of any kind, or a permit of a `LocalSemaphore`. */
export interface ChainLease {
  /** Neither released nor lost. */
  readonly held: boolean;
  /** Gives the lease back: `true` if it was still ours. */
  release(): Promise<boolean>;
  /** Gives the lease back; never throws (a failure is logged, the lease runs out on its own). */
  releaseQuietly(): Promise<void>;
  /** Renews the lease from now on, whatever it was taken with: holders outlive the one that took it. */
  keepExtending?(): void;
  /** What one holder sees of the lease: the same lease, whose `unlock()` / `release()` ends only its own share. */
  shareWith?(leave: () => Promise<boolean>): object;
}

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

  /** Still held by a holder of the chain (possibly lost meanwhile: its holders may want to see that). */
  get current(): boolean {
    return this.holders > 0;
  }

  enter(): HoldTicket<L> {
    this.holders++;
    let left = false;
    const leave = async (quietly: boolean): Promise<boolean> => {
      if (left) return false;
      left = true;
      if (--this.holders > 0) {
        // Holders outlive the one that took the lease (perhaps with autoExtend: false): keep it alive for them.
        this.lease.keepExtending?.();
        return true;
      }
      if (!quietly) return this.lease.release();
      await this.lease.releaseQuietly();
      return true;
    };
    return {
      lease: this.lease,
      handle: this.lease.shareWith?.(() => leave(false)) ?? this.lease,
      run: (fn) => runWithHold(this, fn),
      leave: async () => void (await leave(true)),
    };
  }
}

/** One holder's share of a lease: run code as its holder, then leave (once). */
export interface HoldTicket<L extends ChainLease> {
  readonly lease: L;
  /** The lease as this holder's code sees it: its `unlock()` / `release()` leaves this holder's share only. */
  readonly handle: object;
  /** Runs `fn` (and every chain it starts) as a holder of the lease, so that nested calls join it. */
  run<T>(fn: () => T): T;
  /** This holder is done; the last one to leave releases the lease. */
  leave(): Promise<void>;
}

/** Which lease of the chain: a kind (its name: `lock`, `semaphore`, `local-semaphore`) and a key, of one store. */
export interface HoldEntry {
  kind: string;
  id: string;
  /** The store (or service) the lease belongs to: two applications in one process never share a lease. */
  scope: object;
}

/** The holds of the current async call chain, innermost last. Another chain sees its own. */
const holdsOfChain = new AsyncLocalStorage<ReadonlyMap<string, SharedHold<ChainLease>>>();

/**
 * Joins the lease this call chain holds on `entry`, or takes a new one with `acquire`. The join
 * happens synchronously, before anything is awaited, so that an outer holder cannot give the
 * lease back between the start of a nested call and its joining. `mayJoin` throws when the call
 * must not join the lease held (a write inside a read of the same key): the call rejects at once.
 */
export function enterHold<L extends ChainLease>(
  entry: HoldEntry,
  acquire: () => Promise<L>,
  mayJoin?: (held: L) => void,
): Promise<HoldTicket<L>> {
  const held = holdsOfChain.getStore()?.get(keyOf(entry));
  if (held?.open) {
    try {
      mayJoin?.(held.lease as L);
    } catch (refusal) {
      return Promise.reject(refusal);
    }
    return Promise.resolve(held.enter() as HoldTicket<L>);
  }
  return acquire().then((lease) => new SharedHold(entry, lease).enter());
}

/** Runs `fn` as the holder of the ticket `entered` gives, and leaves afterwards, whatever `fn` did. */
export async function runHolding<L extends ChainLease, H, T>(
  entered: Promise<HoldTicket<L>>,
  fn: (handle: H) => T | Promise<T>,
): Promise<T> {
  const ticket = await entered;
  try {
    return await ticket.run(() => fn(ticket.handle as H));
  } finally {
    await ticket.leave();
  }
}

/** The lease this call chain holds on `entry` and may still share (neither released nor lost), if any. */
export function heldByChain(entry: HoldEntry): ChainLease | undefined {
  const held = holdsOfChain.getStore()?.get(keyOf(entry));
  return held?.open ? held.lease : undefined;
}

/** The lease of `kind` on `id` (or with no `id` the innermost one) that this chain holds, lost or not. */
export function leaseOfChain(kind: string, id?: string): ChainLease | undefined {
  const holds = holdsOfChain.getStore();
  let innermost: ChainLease | undefined;
  for (const hold of holds?.values() ?? []) {
    const matches = hold.entry.kind === kind && (id === undefined || hold.entry.id === id);
    if (matches && hold.current) innermost = hold.lease;
  }
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

const scopeIds = new WeakMap<object, number>();
let lastScopeId = 0;

function keyOf({ kind, id, scope }: HoldEntry): string {
  let scopeId = scopeIds.get(scope);
  if (scopeId === undefined) scopeIds.set(scope, (scopeId = ++lastScopeId));
  return `${scopeId}\0${kind}\0${id}`;
}
