import type { LockBackendError } from '../lock.errors.js';
import type { StoreKind } from './store-kind.js';

/** What `LockStore.acquireIfFree` did with a lease. */
export type TakenIfFree = 'taken' | 'held' | 'not taken';

/**
 * Where leases live: the contract every store keeps, for every kind of lease (`StoreKind`). The memory
 * store (one process), one Redis (a server, Sentinel, a Cluster) and Redlock implement it with the
 * same semantics; `LockModule.forRoot({ store })` takes any other object that does. The lease core
 * (`lease/`) keeps the wait loop, the local lines and the held leases, and never talks to a backend.
 *
 * Seven members are required. The rest are capabilities the core asks for by their presence, each with
 * a plain fallback: a store offers what its backend does well. Every method works on the user's own key
 * or name (`id`): the layout is the store's business. Every failure to reach the backend rejects with
 * `LockBackendError` (`BACKEND_UNAVAILABLE` when trying again may help, waits retry it). See
 * docs/ARCHITECTURE.md, "Adding a store", and the contract suite every store runs.
 */
export interface LockStore {
  /**
   * One attempt to take the lease `id` of `kind` for `token` for `ttl` ms, asking `request`: granted, or
   * told how long the holder's lease still runs. Idempotent for one token: a token that holds the lease
   * already (an earlier attempt whose reply was lost, a handover whose message was lost) is granted
   * again, its lease restarted. No fence is drawn (`fence` draws one when the holder asks).
   */
  acquire<Request>(
    kind: StoreKind<Request>,
    id: string,
    request: Request,
    token: string,
    ttl: number,
    options: AttemptOptions,
  ): Promise<Attempt>;

  /**
   * Gives the lease back only if `token` holds it (to `options.successor`, or to the store's own next
   * waiter, or freed with a wake-up for the others): `true` when it held it. A token that does not
   * hold it leaves the store's line if it stood in it.
   */
  release(kind: StoreKind, id: string, token: string, options?: ReleaseOptions): Promise<boolean>;

  /** Resets the lease of `token` to `ttl` ms only if `token` holds it. */
  extend(kind: StoreKind, id: string, token: string, ttl: number): Promise<boolean>;

  /**
   * Draws the fence of the lease `token` holds on `id`: greater than every fence drawn for this lease
   * before, by any owner. Drawn only while the lease is held, and an exclusive lease begins only after
   * the previous one ended, so fences increase in the order the leases were held. 0 when `token` does
   * not hold the lease (expired or taken): nothing is drawn.
   */
  fence(kind: StoreKind, id: string, token: string): Promise<number>;

  /** The lease `id` as it stands now; read-only. */
  inspect(kind: StoreKind, id: string): Promise<Inspection>;

  /**
   * Releases the lease `id` whoever holds it, as its holder's release would (to the next waiter, or
   * freed with a wake-up). `false` when it was not held.
   */
  forceRelease(kind: StoreKind, id: string): Promise<boolean>;

  /** Releases what the store opened (connections it created, timers); idempotent. */
  close(): Promise<void>;

  // ---- Capabilities, asked for by presence ----

  /**
   * The one-command take of a free lease (an uncontended caller's only round trip): takes the lease `id`
   * for `token` for `ttl` ms if nobody holds it — ahead of any waiter in the store's line, where waiters
   * wait while it is free only after a holder died. `'taken'`; `'held'`: an `acquire` now would be
   * refused too (an owner holds it whom `request` may not join, perhaps `token`: the command cannot
   * tell) — a caller with no time to wait stops there, so a free permit beside a holder, or a reader
   * beside readers, is never `'held'`; `'not taken'` for any other reason (the caller goes on to
   * `acquire`); `undefined`: no such command for this kind or request. Without it, the caller's first
   * attempt is an `acquire`.
   */
  acquireIfFree?<Request>(
    kind: StoreKind<Request>,
    id: string,
    request: Request,
    token: string,
    ttl: number,
  ): Promise<TakenIfFree | undefined>;

  /**
   * Several free leases of one run of `keyOrder`, all or none, in one step: `true` when every one was
   * free and is now `token`'s; `false` (nothing taken) when one was held or had waiters; `undefined` when
   * the store takes no such leases that way. Without it, the keys are taken one by one.
   */
  acquireAllIfFree?<Request>(
    kind: StoreKind<Request>,
    ids: readonly string[],
    request: Request,
    token: string,
    ttl: number,
    /** The caller's: once aborted, a command the server did not run is not sent again. */
    signal?: AbortSignal,
  ): Promise<boolean | undefined>;

  /**
   * The order in which every caller takes several leases, cut into runs that one step of
   * `acquireAllIfFree` can take together (on a Redis Cluster: the keys of one hash slot). Every process
   * of a deployment must get the same order for the same ids (no two callers each hold a key the other
   * waits for). Without it: sorted, one key a run.
   */
  keyOrder?(ids: readonly string[]): string[][];

  /**
   * Opens the turn of the waiter `token` for the lease `id`: from now until `close()`, a release that
   * wakes it, or hands the lease to it, is kept for it even while its attempt is on its way — one that
   * comes between an attempt and `wait()` makes that wait return at once. Where the store cannot be
   * sure to hear of a release (Redis before its first wait has subscribed), a wait lasts no longer
   * than `wait.step`. Without it, a waiter looks again after its backoff step.
   */
  openTurn?(kind: StoreKind, id: string, token: string): Turn;

  /**
   * The store keeps the fair waiters' line itself, across processes (Redis): a waiter may stand in it
   * without queuing in its process first, and a release hands the lease to the first in line. Where it
   * does not (the memory store, Redlock), the waiters of each process queue there, in order of arrival.
   */
  readonly keepsLine?: boolean;

  /** How many hold the lease `id` right now; read-only. Without it: counted from `inspect`. */
  count?(kind: StoreKind, id: string): Promise<number>;

  /**
   * Renews many leases in one round trip (the watchdog's tick): for each, `true` if renewed, `false` if
   * no longer held by its token, or the `LockBackendError` that extension met. Without it: one `extend` each.
   */
  extendAll?(extensions: readonly LeaseExtension[]): Promise<(boolean | LockBackendError)[]>;

  /**
   * The margin a holder takes off a lease of `ttl` ms for clock drift, when the store has its own rule
   * (Redlock's `driftFactor`); without it, `ttl × 0.01 + 2 ms`.
   */
  clockDrift?(ttl: number): number;

  /**
   * Refuses with `InvalidArgumentError` a lease length this store cannot keep safely (Redlock: one
   * longer than its quarantine), before anything is sent.
   */
  checkTtl?(ttl: number): void;

  /**
   * Calls `onLost` each time the store's connection closes — a server restarted without persistence
   * lost every lease it held, and a holder cannot tell that case from a short break until it asks
   * again — and returns what stops the calls. Without it, nobody is told (a leader then finds out at
   * its next renewal).
   */
  watchConnection?(onLost: () => void): () => void;

  /**
   * Short-lived values beside the leases, shared by every process on the store (what a single-flight
   * load hands its waiters). Without it, `SingleFlightService` cannot pass a value between processes
   * and refuses to load.
   */
  readonly values?: SharedValues;
}

/** Text values by name, each for a while (`LockStore.values`); a failure rejects with `LockBackendError`. */
export interface SharedValues {
  /** The value of `name`, or `undefined` when there is none (never set, deleted, or run out). */
  get(name: string): Promise<string | undefined>;
  /** Sets the value of `name` for `ttl` ms, replacing any. */
  set(name: string, value: string, ttl: number): Promise<void>;
  delete(name: string): Promise<void>;
}

/** How a release goes (`LockStore.release`). */
export interface ReleaseOptions {
  /** A waiter of the releasing process that may take the lease over in the same step (see `Successor`). */
  successor?: Successor;
  /**
   * The caller may not hold the lease: it undoes an attempt whose answer was lost (a timeout) or is not
   * wanted (an abort, a lease that ran out on arrival), or leaves the line. The store must apply it
   * after that attempt, whatever happened meanwhile: on Redis it goes on the same connection, by the
   * script's text, which a server that lost its script cache still runs.
   */
  undo?: boolean;
}

/** A lease as `inspect` finds it. */
export interface Inspection {
  /** Milliseconds each holder's lease still runs, soonest first (empty when nobody holds it). */
  ttls: number[];
  /** The last fence issued for the lease, when the store knows it. */
  fence?: number;
  /**
   * What each holder asked for (the kind's request: a lock's mode), when the store knows it; on Redis,
   * a lock's holders even where `ttls` has one lease for all its readers.
   */
  holders?: readonly unknown[];
}

export interface AttemptOptions {
  /** Serve waiters in order of arrival, and hand the lease to the first on release. */
  fair: boolean;
  /**
   * Not granted: wait in line (and be woken), for `liveness` ms unless the next attempt comes
   * sooner; a waiter that stops attempting drops out after that. `0`: a last attempt, no waiting.
   */
  liveness: number;
  /** This waiter joined the line on an earlier attempt (a first attempt has nothing to leave). */
  inLine: boolean;
  /**
   * Not granted: join the store's line (`keepsLine`) only if a fair waiter stands in it already; with
   * nobody there, stay out and answer `nobodyInLine`. Asked by a waiter whose own process holds the
   * lease, which passes it on in the process: only a waiter of another process that came first must
   * be served first. A store that keeps no line ignores it.
   */
  joinOnlyBehindOthers?: boolean;
  /**
   * The caller's: once it aborts, the caller undoes the attempt (`release` with `undo`), and nothing
   * of this attempt may be sent again after that.
   */
  signal?: AbortSignal | undefined;
}

/**
 * A waiter of this process, with its turn open, that a release may hand the lease to directly: the
 * store hands it over in the same step and tells the waiter's turn itself, without a message. A
 * successor that is gone by then gets the lease given back at once. A store that hands nothing over
 * ignores it: once the release returns, the core tells the successor nothing was passed.
 */
export interface Successor {
  token: string;
  /** It may go ahead of the waiters in the store's line; else it gets the lease only when it is first there, or nobody waits. */
  jump: boolean;
  /** The ttl it asked for: the lease handed to it lasts no longer until it extends it. */
  ttl: number;
  /** What it asked for (the kind's request: a lock's mode, a semaphore's limit). */
  request: unknown;
  /**
   * Called by the store before its release returns: with `PASSED_WITHOUT_FENCE` when it handed it the
   * lease (before its turn is told), or 0 when it did not (or failed). Only the first call counts.
   * `nobodyElseInLine`: a store that keeps a line (`keepsLine`) saw nobody else waiting in it once the
   * lease was handed over.
   */
  passed(fence: number, nobodyElseInLine?: boolean): void;
}

/** One waiter's view of the releases of one lease (`LockStore.openTurn`). */
export interface Turn {
  /**
   * Waits for a release: up to `wait.limit` ms while the store is sure to be told of one, up to
   * `wait.step` ms while it may not be (not subscribed yet, or the subscription was lost). Resolves
   * with the `Handover` when the lease was handed to this waiter (it holds it now, until it extends
   * it), else with `null` once woken or when the time is up. Rejects with the signal's reason on abort.
   */
  wait(wait: TurnWait, signal?: AbortSignal): Promise<Handover | null>;
  close(): void;
}

/**
 * A lease a release handed to a waiter, as its turn is told. The releasing process wrote it, with its
 * own settings: the waiter counts the lease as written, never by its own settings.
 */
export interface Handover {
  /** The lease's fence when a message told it; `PASSED_WITHOUT_FENCE` when a release of its own process passed it. */
  fence: number;
  /**
   * How long the lease runs from when the release wrote it (ms): the releaser's handover lease, or the
   * waiter's ttl when that is shorter. The waiter extends it to its own ttl before it runs out.
   */
  lease: number;
}

/** How long one wait for a release may last (ms). */
export interface TurnWait {
  /** While a release is sure to wake the waiter: the waiter's own bounds (deadline, holder's lease, liveness). */
  limit: number;
  /** While it may not be: the backoff step (never more than `limit`). */
  step: number;
}

/** The answer to one attempt. */
export interface Attempt {
  /** The token holds the lease now. */
  granted: boolean;
  /** Not granted: ms the holder's lease (the first to run out) still runs by itself; ≤ 0 unknown. */
  retryIn: number;
  /**
   * Not granted: a bound of every fence the lease had issued when this attempt ran (0 if unknown),
   * whether or not its counter is still kept. A handover message whose fence is above it came after
   * this attempt; one at or below it is stale.
   */
  lastFence?: number;
  /** Not granted, and it stayed out of the store's line: nobody stood in it (`joinOnlyBehindOthers`). */
  nobodyInLine?: boolean;
  /**
   * Not granted for another reason than a holder: why, for the timeout's message (e.g. Redlock
   * masters still in quarantine, replicas that did not acknowledge the lease).
   */
  refusal?: string;
}

/** One lease to renew: which, whose, for how long. */
export interface LeaseExtension {
  kind: StoreKind;
  id: string;
  token: string;
  ttl: number;
}

/**
 * What a waiter's turn is told when a release of its own process passed it the lease (`Successor`):
 * no fence is drawn for such a pass (its holder draws one when it asks), and the process knows when
 * the release was sent, so it needs none to tell a fresh pass from a stale one.
 */
export const PASSED_WITHOUT_FENCE = -1;

/** Injection token of the active `LockStore`. */
export const LockStore = Symbol('LockStore');
