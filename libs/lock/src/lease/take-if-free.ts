import { LockBackendError } from '../lock.errors.js';
import type { LockStore, TakenIfFree } from '../store/store.js';
import type { LeaseCall } from './acquire-lease.js';
import type { LeaseGrant, LeaseKeeping } from './held-lease.js';
import { lineOf } from './local-line.js';
import { driftOf } from './store-capabilities.js';
import { untilAborted } from './wait-for-lease.js';

/** A release that undoes an attempt, or leaves the line (`ReleaseOptions.undo`). */
export const UNDO = { undo: true } as const;

/** Whether a lease of `leaseMs` on `store` that began no earlier than `sentAt` still runs by this process's clock. */
export function stillRunsOn(store: LockStore, sentAt: number, leaseMs: number): boolean {
  return performance.now() < sentAt + leaseMs - driftOf(store, leaseMs);
}

/**
 * The store's one-command acquisition of free leases (`LockStore.acquireIfFree`, or for several ids
 * `acquireAllIfFree`, all or none), for a caller with nobody of this process ahead of it: no turn,
 * line or timer. `'held'` when one lease has an owner (see `TakenIfFree`), `undefined` when they
 * were not taken for another reason (or the store has no such command): the caller waits in line as
 * usual. A failure to reach the store before `deadline` is left to the wait loop, which retries it;
 * if the lost reply took a lease, its first attempt finds the lease its own. At or after `deadline`
 * (`timeout: 0`: one attempt, this one) the failure is the caller's.
 */
export async function takeIfFree<Request>(
  keeping: Pick<LeaseKeeping, 'store' | 'releases'>,
  call: Omit<LeaseCall<Request>, 'id'>,
  ids: readonly string[],
  token: string,
  deadline: number,
): Promise<LeaseGrant | 'held' | undefined> {
  const take = freeTakeOf(keeping.store, call, ids, token);
  if (take === undefined) return undefined;
  const { policy } = call;
  policy.signal?.throwIfAborted();
  const giveBack = () => giveBackAll(keeping, call, ids, token);
  const sentAt = performance.now();
  let taken: TakenIfFree | undefined;
  try {
    taken = await untilAborted(take(), policy.signal);
  } catch (error) {
    return unanswered(error, { ids, deadline, signal: policy.signal, giveBack });
  }
  if (taken !== 'taken') return taken === 'held' ? 'held' : undefined;
  if (policy.signal?.aborted || !stillRunsOn(keeping.store, sentAt, policy.ttl)) {
    // Taken as the caller gave up, or its answer came after its lease ran out (see `ranOutOnArrival`).
    await giveBack();
    policy.signal?.throwIfAborted();
    return undefined;
  }
  return { token, ownToken: policy.token !== undefined, ttl: policy.ttl, sentAt, serverTtl: policy.ttl, elapsed: 0 };
}

/** The store's one command for free `ids` (one, or all or none), or `undefined` when it has none. */
function freeTakeOf<Request>(
  store: LockStore,
  { kind, request, policy }: Omit<LeaseCall<Request>, 'id'>,
  ids: readonly string[],
  token: string,
): (() => Promise<TakenIfFree | undefined>) | undefined {
  if (ids.length === 1) {
    // A closure, not `bind`: a bound function costs more to make and to call, once per uncontended attempt.
    if (store.acquireIfFree === undefined) return undefined;
    return () => store.acquireIfFree?.(kind, ids[0], request, token, policy.ttl) ?? Promise.resolve(undefined);
  }
  if (store.acquireAllIfFree === undefined) return undefined;
  return async () => {
    const all = await store.acquireAllIfFree?.(kind, ids, request, token, policy.ttl, policy.signal);
    return all === undefined ? undefined : all ? 'taken' : 'not taken';
  };
}

/**
 * What a take whose command failed or was given up on comes to. Aborted with the command in flight (a
 * frozen server): its answer is not awaited, and the release sent after it on the same connection
 * undoes what it may still take. Unanswered (a frozen server, a lost reply): the command may still run.
 * One key's wait loop finds it its own at its first attempt; several keys' step may take keys the
 * one-by-one wait never reaches (it gives up at the first), and a caller out of time makes no attempt
 * after this one: what it may take is given back after it, on the same connection.
 */
function unanswered(
  error: unknown,
  {
    ids,
    deadline,
    signal,
    giveBack,
  }: { ids: readonly string[]; deadline: number; signal?: AbortSignal | undefined; giveBack: () => Promise<unknown> },
): undefined {
  if (signal?.aborted && error === signal.reason) {
    void giveBack();
    throw error;
  }
  if (!(error instanceof LockBackendError && error.transient)) throw error;
  const attemptsAgain = performance.now() < deadline;
  if (ids.length > 1 || !attemptsAgain) void giveBack();
  if (!attemptsAgain) throw error;
  return undefined;
}

/**
 * Gives back what a take may have taken. One the store cannot be reached for (its connection dropped)
 * is retried in the background until the lease the command may have taken would have run out, as a
 * failed release is.
 */
function giveBackAll<Request>(
  { store, releases }: Pick<LeaseKeeping, 'store' | 'releases'>,
  { kind, policy }: Omit<LeaseCall<Request>, 'id'>,
  ids: readonly string[],
  token: string,
): Promise<boolean[]> {
  return Promise.all(
    ids.map((id) =>
      store.release(kind, id, token, UNDO).catch((error: unknown) => {
        if (error instanceof LockBackendError && error.transient) {
          const retried = () => store.release(kind, id, token, UNDO);
          releases.retry({ kind, id, token }, retried, performance.now() + policy.ttl);
        }
        return false;
      }),
    ),
  );
}

/**
 * The leases of several calls (one kind, request and policy; one token), all free, taken in one step
 * of the store, all or none (`takeIfFree`): only when nobody of this process holds or waits for any
 * of them. `undefined` when they were not all taken: the caller takes them one by one.
 */
export async function acquireAllIfFree<Request>(
  keeping: Pick<LeaseKeeping, 'store' | 'lines' | 'watchdog' | 'releases'>,
  calls: readonly LeaseCall<Request>[],
  token: string,
): Promise<LeaseGrant | undefined> {
  const ids = calls.map((call) => call.id);
  const { kind } = calls[0];
  const { lines, watchdog } = keeping;
  if (ids.some((id) => lines.contended(lineOf(kind, id)) || watchdog.holds(lineOf(kind, id)))) {
    return undefined;
  }
  const taken = await takeIfFree(keeping, calls[0], ids, token, performance.now() + calls[0].policy.timeout);
  return taken === 'held' ? undefined : taken;
}
