import { LockBackendError } from '../../lock.errors.js';
import { LONGEST_DURATION } from '../../options/durations.js';
import { sleep } from '../../util/sleep.js';
import type { Attempt, AttemptOptions, Inspection, LockStore, SharedValues, TakenIfFree, Turn } from '../store.js';
import type { StoreKind } from '../store-kind.js';

/** One holder of a lease. */
interface Holder {
  /** What it asked for (the kind's request), which the kind's admission rule reads. */
  request: unknown;
  /** The last fence drawn for it (`fence`), if any. */
  fence?: number;
  /** `performance.now()` at which its lease ends. */
  deadline: number;
  /** Frees the lease at its deadline so that waiters wake; unref'd, it never holds the process open. */
  expiry?: NodeJS.Timeout;
}

/** The holders of one lease, by token. */
type Holders = Map<string, Holder>;

/**
 * The embedded store: the same lease semantics as `RedisStore`, inside one process, for every kind
 * of lease (the kind's `admits` decides who may hold it beside whom). Waiters are woken the moment a
 * lease is released or expires. Being one process, it needs no line of its own for fair waiting: the
 * waiters of a process already queue in order before they attempt (see `lease/local-line.ts`), and
 * nothing is ever handed over.
 */
export class MemoryStore implements LockStore {
  /** Holders by kind and id (`leaseKeyOf`). */
  private readonly leases = new Map<string, Holders>();
  /** The open turns of waiters, by lease: each told of every release (and of a waiter that left). */
  private readonly releaseListeners = new Map<string, Set<() => void>>();
  /** Callers refused that still wait, by lease and token: what they asked for, and until when they count. */
  private readonly waiters = new Map<string, Map<string, { request: unknown; until: number }>>();
  private lastFence = 0;
  private closed = false;
  /** Shared values by name, each with the `performance.now()` at which it runs out. */
  private readonly sharedValues = new Map<string, { value: string; until: number }>();
  /** How many values there were after the last sweep of the run-out ones. */
  private valuesAfterSweep = 0;

  readonly values: SharedValues = {
    get: async (name) => {
      this.refuseWhenClosed(name);
      const entry = this.sharedValues.get(name);
      if (entry === undefined || entry.until > performance.now()) return entry?.value;
      this.sharedValues.delete(name);
      return undefined;
    },
    set: async (name, value, ttl) => {
      this.refuseWhenClosed(name);
      this.sharedValues.set(name, { value, until: performance.now() + ttl });
      // Run-out values nobody reads again are swept once their number doubled: memory stays bounded.
      if (this.sharedValues.size < Math.max(64, 2 * this.valuesAfterSweep)) return;
      const now = performance.now();
      for (const [other, { until }] of this.sharedValues) if (until <= now) this.sharedValues.delete(other);
      this.valuesAfterSweep = this.sharedValues.size;
    },
    delete: async (name) => {
      this.refuseWhenClosed(name);
      this.sharedValues.delete(name);
    },
  };

  async acquire<Request>(
    kind: StoreKind<Request>,
    id: string,
    request: Request,
    token: string,
    ttl: number,
    { liveness }: AttemptOptions,
  ): Promise<Attempt> {
    const holders = this.liveHolders(kind, id);
    const lease = leaseKeyOf(kind, id);
    if (!holders.has(token)) {
      const others = [...holders.values()];
      const waiting = this.waitingFor(lease, token);
      if (
        !kind.admits(
          others.map((holder) => holder.request as Request),
          request,
          waiting as Request[],
        )
      ) {
        // Refused: it waits, and holds back who its kind says (until it is granted, gives up, or stops attempting).
        if (liveness > 0) this.waiterMap(lease).set(token, { request, until: performance.now() + liveness });
        const firstDeadline = Math.min(...others.map((holder) => holder.deadline));
        return { granted: false, retryIn: others.length > 0 ? firstDeadline - performance.now() : 0 };
      }
    }
    this.waiters.get(lease)?.delete(token);
    this.hold(kind, id, token, { request, deadline: performance.now() + ttl });
    return { granted: true, retryIn: 0 };
  }

  /** Held by nobody (and the kind admits `request` alone): taken. */
  async acquireIfFree<Request>(
    kind: StoreKind<Request>,
    id: string,
    request: Request,
    token: string,
    ttl: number,
  ): Promise<TakenIfFree> {
    // A lease with holders may still admit this request (a semaphore's free permit): the attempt tells.
    if (this.liveHolders(kind, id).size > 0 || !kind.admits([], request)) return 'not taken';
    this.hold(kind, id, token, { request, deadline: performance.now() + ttl });
    return 'taken';
  }

  /** Every one held by nobody, with nobody waiting (and the kind admits `request` alone): all taken. */
  async acquireAllIfFree<Request>(
    kind: StoreKind<Request>,
    ids: readonly string[],
    request: Request,
    token: string,
    ttl: number,
  ): Promise<boolean> {
    const free = (id: string) =>
      this.liveHolders(kind, id).size === 0 && this.waitingFor(leaseKeyOf(kind, id), token).length === 0;
    if (!kind.admits([], request) || !ids.every(free)) return false;
    for (const id of ids) this.hold(kind, id, token, { request, deadline: performance.now() + ttl });
    return true;
  }

  /** Sorted, in one run: one step takes any leases of this one process. */
  keyOrder(ids: readonly string[]): string[][] {
    return [[...ids].sort()];
  }

  async fence(kind: StoreKind, id: string, token: string): Promise<number> {
    const holder = this.liveHolders(kind, id).get(token);
    if (holder === undefined) return 0;
    holder.fence = this.nextFence();
    return holder.fence;
  }

  async release(kind: StoreKind, id: string, token: string): Promise<boolean> {
    const lease = leaseKeyOf(kind, id);
    // A waiter that held others back gave up: they may go in now.
    if (this.waiters.get(lease)?.delete(token)) this.tellReleased(lease);
    if (!this.liveHolders(kind, id).has(token)) return false;
    this.free(kind, id, token);
    return true;
  }

  async extend(kind: StoreKind, id: string, token: string, ttl: number): Promise<boolean> {
    const holder = this.liveHolders(kind, id).get(token);
    if (holder === undefined) return false;
    this.hold(kind, id, token, { ...holder, deadline: performance.now() + ttl });
    return true;
  }

  /**
   * Releases here never hand a lease over; they wake every waiter, so a wait lasts up to its limit. A
   * release from the moment the turn opens is kept for it: a `wait()` after it returns at once.
   */
  openTurn(kind: StoreKind, id: string): Turn {
    const lease = leaseKeyOf(kind, id);
    const listeners = this.releaseListeners.get(lease) ?? new Set<() => void>();
    this.releaseListeners.set(lease, listeners);
    let released = false;
    let wakeWaiting: (() => void) | undefined;
    const onRelease = () => {
      released = true;
      wakeWaiting?.();
    };
    listeners.add(onRelease);
    return {
      wait: async ({ limit }, signal) => {
        signal?.throwIfAborted();
        if (!released) {
          const woken = new Promise<void>((resolve) => (wakeWaiting = resolve));
          await sleep(limit, signal, woken).finally(() => (wakeWaiting = undefined));
        }
        released = false;
        return null;
      },
      close: () => {
        listeners.delete(onRelease);
        if (listeners.size === 0 && this.releaseListeners.get(lease) === listeners) this.releaseListeners.delete(lease);
      },
    };
  }

  async count(kind: StoreKind, id: string): Promise<number> {
    return this.liveHolders(kind, id).size;
  }

  /**
   * The holders' lease ttls, soonest first, what each asked for, and the highest fence drawn by them,
   * if any (nothing is kept once they are gone).
   */
  async inspect(kind: StoreKind, id: string): Promise<Inspection> {
    const now = performance.now();
    const holders = [...this.liveHolders(kind, id).values()].sort((a, b) => a.deadline - b.deadline);
    const ttls = holders.map((holder) => Math.ceil(holder.deadline - now));
    const requests = holders.map((holder) => holder.request);
    const fences = holders.flatMap((holder) => (holder.fence === undefined ? [] : [holder.fence]));
    return { ttls, holders: requests, ...(fences.length === 0 ? {} : { fence: Math.max(...fences) }) };
  }

  async forceRelease(kind: StoreKind, id: string): Promise<boolean> {
    const holders = this.liveHolders(kind, id);
    if (holders.size === 0) return false;
    for (const token of [...holders.keys()]) this.free(kind, id, token);
    return true;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.waiters.clear();
    this.sharedValues.clear();
    for (const holders of this.leases.values()) for (const holder of holders.values()) clearTimeout(holder.expiry);
    this.leases.clear();
    for (const lease of [...this.releaseListeners.keys()]) this.tellReleased(lease);
  }

  private refuseWhenClosed(id: string): void {
    if (this.closed) throw new LockBackendError('The memory lock store is closed', id, { retryable: false });
  }

  /** What the callers still waiting for `lease` asked for, but `token`'s (expired waits dropped). */
  private waitingFor(lease: string, token: string): unknown[] {
    const waiting = this.waiters.get(lease);
    if (waiting === undefined) return [];
    const now = performance.now();
    const requests: unknown[] = [];
    for (const [waiter, { request, until }] of waiting) {
      if (until <= now) waiting.delete(waiter);
      else if (waiter !== token) requests.push(request);
    }
    if (waiting.size === 0) this.waiters.delete(lease);
    return requests;
  }

  private waiterMap(lease: string): Map<string, { request: unknown; until: number }> {
    let waiting = this.waiters.get(lease);
    if (waiting === undefined)
      this.waiters.set(lease, (waiting = new Map<string, { request: unknown; until: number }>()));
    return waiting;
  }

  /** The unexpired holders of a lease, expired ones dropped: the deadline is checked as well as the timer, which may fire late. */
  private liveHolders(kind: StoreKind, id: string): Holders {
    this.refuseWhenClosed(id);
    const holders = this.leases.get(leaseKeyOf(kind, id)) ?? new Map<string, Holder>();
    const now = performance.now();
    for (const [token, holder] of holders) if (holder.deadline <= now) this.free(kind, id, token);
    return holders;
  }

  private hold(kind: StoreKind, id: string, token: string, holder: Holder): void {
    const lease = leaseKeyOf(kind, id);
    const holders = this.leases.get(lease) ?? new Map<string, Holder>();
    this.leases.set(lease, holders);
    clearTimeout(holders.get(token)?.expiry);
    holders.set(token, holder);
    this.armExpiry(holder, () => holders.get(token) === holder && this.free(kind, id, token));
  }

  private free(kind: StoreKind, id: string, token: string): void {
    const lease = leaseKeyOf(kind, id);
    const holders = this.leases.get(lease);
    clearTimeout(holders?.get(token)?.expiry);
    holders?.delete(token);
    if (holders?.size === 0) this.leases.delete(lease);
    this.tellReleased(lease);
  }

  private tellReleased(lease: string): void {
    for (const onRelease of [...(this.releaseListeners.get(lease) ?? [])]) onRelease();
  }

  /**
   * Fences from the clock, as on Redis: the clock in microseconds, or one more than the last fence
   * when that is ahead. So they increase for every lease of the store (one number for all: nothing
   * to keep per key), and across restarts of the process.
   */
  private nextFence(): number {
    const micros = Math.floor((performance.timeOrigin + performance.now()) * 1_000);
    this.lastFence = Math.max(this.lastFence + 1, micros);
    return this.lastFence;
  }

  /**
   * Frees a holder at its deadline so that waiters wake, never before: Node fires a delay above
   * 2^31−1 ms at once, so a longer lease (reachable only by calling the store directly: the
   * services refuse such a ttl) is re-armed until its deadline, as is a timer that fires early.
   */
  private armExpiry(holder: Holder, onExpiry: () => void): void {
    const remaining = holder.deadline - performance.now();
    if (remaining <= 0) {
      onExpiry();
      return;
    }
    holder.expiry = setTimeout(
      () => this.armExpiry(holder, onExpiry),
      Math.min(Math.ceil(remaining), LONGEST_DURATION),
    ).unref();
  }
}

function leaseKeyOf(kind: StoreKind, id: string): string {
  return `${kind.name}\0${id}`;
}
