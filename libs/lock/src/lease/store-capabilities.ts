import { errorMessage, LockBackendError } from '../lock.errors.js';
import { driftMargin } from '../options/durations.js';
import type { LeaseExtension, LockStore, Turn } from '../store/store.js';
import type { StoreKind } from '../store/store-kind.js';
import { sleep } from '../util/sleep.js';

/*
 * What the core asks of a store beyond its required members, each capability with its plain
 * fallback, in one place: a store offers what its backend does well (docs/ARCHITECTURE.md, "Adding a
 * store"), and the core never asks which store it has. The one-command takes of free leases
 * (`acquireIfFree`, `acquireAllIfFree`) are asked for by their one caller, `take-if-free.ts`.
 */

/** The drift margin of a lease of `ttl` on `store`: its own rule (Redlock's `driftFactor`), else 1 % + 2 ms. */
export function driftOf(store: LockStore, ttl: number): number {
  return store.clockDrift?.(ttl) ?? driftMargin(ttl);
}

/**
 * Refuses a ttl the store cannot hold (Redlock: one above its quarantine) before it becomes a lease's
 * renewal ttl; a store checks the ttl of an attempt itself. Without the capability, any ttl the
 * durations allow.
 */
export function checkTtlOn(store: LockStore, ttl: number): void {
  store.checkTtl?.(ttl);
}

/**
 * Whether the store keeps one line of waiters across processes (Redis): waiters let in together
 * (readers) then stand in it rather than queue in their process. Without it, each process's own line.
 */
export function keepsLine(store: LockStore): boolean {
  return store.keepsLine === true;
}

/** Calls `onLost` whenever the store's connection closes (see `LockStore.watchConnection`); returns the stop. */
export function watchConnectionOf(store: LockStore, onLost: () => void): () => void {
  return store.watchConnection?.(onLost) ?? (() => undefined);
}

/** How many hold the lease `id`: the store's own count, else its inspection's holders. */
export async function countOf(store: LockStore, kind: StoreKind, id: string): Promise<number> {
  if (store.count !== undefined) return store.count(kind, id);
  const { ttls, holders } = await store.inspect(kind, id);
  return holders?.length ?? ttls.length;
}

/** Renews many leases (the watchdog's tick): in one step when the store can, else one `extend` each. */
export function extendAll(
  store: LockStore,
  extensions: readonly LeaseExtension[],
): Promise<(boolean | LockBackendError)[]> {
  if (store.extendAll !== undefined) return store.extendAll(extensions);
  return Promise.all(
    extensions.map(({ kind, id, token, ttl }) =>
      store.extend(kind, id, token, ttl).catch((error: unknown) => asBackendError(error, id)),
    ),
  );
}

/**
 * The turn of the waiter `token` on the lease `id`: the store's, which hears of releases, else one that
 * only waits the backoff step (and never promises a handover).
 */
export function turnOf(store: LockStore, kind: StoreKind, id: string, token: string): Turn {
  return store.openTurn?.(kind, id, token) ?? STEPPING_TURN;
}

const STEPPING_TURN: Turn = {
  wait: async (wait, signal) => {
    await sleep(Math.max(0, wait.step), signal);
    return null;
  },
  close: () => undefined,
};

/**
 * The order in which several leases are taken, in runs that one step of the store may take together:
 * the store's, else sorted, one a run. Every process of a deployment runs the same store, so all take
 * overlapping keys in one order and none waits for a key another holds while holding one it wants.
 */
export function keyRuns(store: LockStore, ids: readonly string[]): string[][] {
  return store.keyOrder?.(ids) ?? [...ids].sort().map((id) => [id]);
}

function asBackendError(error: unknown, id: string): LockBackendError {
  return error instanceof LockBackendError ? error : new LockBackendError(errorMessage(error), id, { cause: error });
}
