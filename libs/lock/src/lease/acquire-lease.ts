import type { LockStore } from '../store/store.js';
import type { LeaseCall, LeaseGrant, LeaseKeeping, NotGranted } from './held-lease.js';
import { fenceOf } from './handover-rules.js';
import { lineOf } from './local-line.js';
import { createOwnerToken } from './owner-token.js';
import { keepsLine, turnOf } from './store-capabilities.js';
import { StoreWaiter } from './store-waiter.js';
import { takeIfFree } from './take-if-free.js';
import { waitForLease, type WonLease } from './wait-for-lease.js';

export type { LeaseCall, NotGranted } from './held-lease.js';

/** One caller on the waiters' path: its owner token, its process's line of the lease, and when it asked. */
interface Waiter {
  token: string;
  line: string;
  start: number;
}

/** Where a waiter of this process queues, besides the store: its process's local line, or the store's own. */
interface Place {
  /** Queued in this process's line (`fair: true`): a holder of this process may pass it the lease. */
  local: boolean;
  /** Stands in the store's own line without queuing here (`'strict'`, or readers where the store keeps a line). */
  inStoreLine: boolean;
  /** Others of this process were waiting before it. */
  queuedBehind: boolean;
}

/**
 * Takes the lease of `call`. When nobody of this process holds or tries for it, one plain command
 * takes it if it is free (`takeIfFree`) — the caller first in its process's line meanwhile, so that
 * callers arriving during that command queue behind it; else the caller takes the waiters' path
 * (`waitInLines`). Resolves with the grant, or with how long it waited when the timeout passed; the
 * caller turns that into its kind's error.
 */
export async function acquireLease<Request>(
  keeping: Pick<LeaseKeeping, 'store' | 'lines' | 'watchdog' | 'releases'>,
  call: LeaseCall<Request>,
  commandTimeout: number,
): Promise<LeaseGrant | NotGranted> {
  const { lines } = keeping;
  const start = performance.now();
  const token = call.policy.token ?? createOwnerToken();
  const line = lineOf(call.kind, call.id);
  const uncontended = !lines.contended(line) && !keeping.watchdog.holds(line);
  const place = placeOf(keeping.store, call, lines.isBusy(line));
  lines.arrive(line);
  let leaveLocalLine: (() => void) | undefined;
  try {
    if (uncontended) {
      leaveLocalLine = place.local ? lines.enterFirst(line) : undefined;
      const taken = await takeIfFree(keeping, call, [call.id], token, start + call.policy.timeout);
      // Held, for a caller out of time (`timeout: 0`: this was its one attempt) that cannot be the
      // holder (a fresh token): an attempt now would be refused too.
      if (taken === 'held' && call.policy.token === undefined) {
        const waited = performance.now() - start;
        if (waited >= call.policy.timeout) return { waited };
      }
      if (taken !== undefined && taken !== 'held') {
        // A new tenure of this process: the callers that queued meanwhile may be passed the lease.
        if (leaveLocalLine) lines.won(line, token, taken.sentAt + taken.serverTtl);
        return taken;
      }
    }
    return await waitInLines(keeping, call, { token, line, start }, place, leaveLocalLine, commandTimeout);
  } finally {
    leaveLocalLine?.();
    lines.depart(line);
  }
}

/**
 * The waiters' path: 1. wait for its turn in its process's line, when it queues there (unless it is
 * first there already: `entered`); 2. open its turn on the store and say where it waits; 3. take a
 * lease a holder of its process passes it, when one may; 4. else attempt and wait on the store
 * (`waitForLease`): lines, wake-ups, handovers.
 */
async function waitInLines<Request>(
  keeping: Pick<LeaseKeeping, 'store' | 'lines'>,
  call: LeaseCall<Request>,
  waiter: Waiter,
  place: Place,
  entered: (() => void) | undefined,
  commandTimeout: number,
): Promise<LeaseGrant | NotGranted> {
  const { store, lines } = keeping;
  const { kind, id, request, policy } = call;
  const leaveLocalLine =
    place.local && entered === undefined
      ? await lines.enter(waiter.line, waiter.start + policy.timeout, policy.signal)
      : entered;
  if (leaveLocalLine === null) return { waited: performance.now() - waiter.start };
  const turn = turnOf(store, kind, id, waiter.token);
  if (place.local) lines.waitsOnStore(waiter.line, waiter.token, policy.ttl, request, waiter.start);
  const leaveStoreLine = place.inStoreLine
    ? lines.standsInStoreLine(waiter.line, waiter.token, policy.ttl, request)
    : undefined;
  try {
    const storeWaiter = new StoreWaiter(keeping, call, waiter.token, waiter.line, waiter.start, turn, commandTimeout);
    // Not for a request that may share the lease: another of its holders may leave now.
    const passed = place.local && kind.exclusive(request) ? await storeWaiter.passedByHolderHere() : null;
    if (passed !== null) return passed;
    const timeLeft = Math.max(0, waiter.start + policy.timeout - performance.now());
    const won = await waitForLease(storeWaiter, { ...policy, timeout: timeLeft }, policy.signal);
    if (won === null) return notGranted(waiter.start, storeWaiter.refusal);
    return grantOf(keeping, call, waiter, won, place);
  } finally {
    turn.close();
    leaveLocalLine?.();
    leaveStoreLine?.();
  }
}

/**
 * Where a caller of `call` queues. The cohort (`fair: true`) queues in this process first; a single
 * attempt (timeout 0) nowhere. A strict waiter, and a waiter that one release admits together with
 * the others asking the same (a lock's readers), stand in the store's own line instead, where the store
 * keeps one: queued here, readers would start one round trip after another.
 */
function placeOf<Request>(store: LockStore, { kind, request, policy }: LeaseCall<Request>, busy: boolean): Place {
  const { fair, timeout } = policy;
  const inStoreLine =
    timeout > 0 && (fair === 'strict' || (fair === true && keepsLine(store) && kind.admittedTogether(request)));
  const local = fair === true && !inStoreLine && timeout > 0;
  return { local, inStoreLine, queuedBehind: local && busy };
}

/**
 * The grant of a lease the wait loop won. It began before its answer came: it runs out on the store by
 * now + its ttl there (for one handed over, the lease its releaser wrote). One a holder of this process
 * passed while it paused keeps that holder's store token and count of passes.
 */
function grantOf<Request>(
  { lines }: Pick<LeaseKeeping, 'lines'>,
  { policy }: LeaseCall<Request>,
  { token, line, start }: Waiter,
  won: WonLease,
  place: Place,
): LeaseGrant {
  const serverTtl = won.serverTtl ?? policy.ttl;
  if (place.local) lines.won(line, token, performance.now() + serverTtl);
  const elapsed = won.elapsed === 0 && !place.queuedBehind ? 0 : performance.now() - start;
  const { sentAt, storeToken, passesInARow, times } = won;
  const grant = { token, ownToken: policy.token !== undefined, ttl: policy.ttl, sentAt, serverTtl, elapsed };
  if (storeToken !== undefined) return { ...grant, storeToken, passesInARow, times, handedOver: 'process' };
  // Handed over by a release, which came with a fence (an attempt draws none).
  return won.fence === undefined ? grant : { ...grant, ...fenceOf(won.fence), handedOver: 'store' };
}

function notGranted(start: number, refusal: string | undefined): NotGranted {
  return { waited: performance.now() - start, ...(refusal ? { refusal } : {}) };
}
