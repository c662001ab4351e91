import type { LeaseKind } from '../kinds/lease-kind.js';
import type { AcquirePolicy } from '../options/call-options.js';
import { LockBackendError } from '../lock.errors.js';
import type { Handover, LockStore, TakenIfFree, Turn } from '../store/store.js';
import { driftOf, type LeaseGrant, type LeaseKeeping } from './held-lease.js';
import { lineOf } from './local-line.js';
import { createOwnerToken } from './owner-token.js';
import { turnOf } from './store-capabilities.js';
import { type HandedLease, untilAborted, waitForLease } from './wait-for-lease.js';

/** A release that undoes an attempt, or leaves the line (`ReleaseOptions.undo`). */
const UNDO = { undo: true } as const;

/** No lease within the timeout: how long it waited, and why the store refused when no holder was the reason. */
export interface NotGranted {
  waited: number;
  refusal?: string;
}

/** One lease to take, its options checked and resolved by the public method that was called. */
export interface LeaseCall<Request = unknown> {
  readonly kind: LeaseKind<Request>;
  /** The lock key or semaphore name. */
  readonly id: string;
  /** What the caller asks for beyond the lease (a semaphore's limit). */
  readonly request: Request;
  readonly policy: AcquirePolicy;
}

/**
 * Takes the lease of `call`. When nobody of this process holds or tries for it, one plain command
 * takes it if it is free (`takeIfFree`); else a fair request first waits for its turn among this process's
 * waiters, then every request runs the shared wait loop. Resolves with the grant, or with how long it
 * waited when the timeout passed; the caller turns that into its kind's error.
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
  if (!lines.contended(line) && !keeping.watchdog.holds(call.kind, call.id)) {
    const taken = await takeIfFree(keeping, call, [call.id], token, start + call.policy.timeout);
    // Held, for a caller out of time (`timeout: 0`: this was its one attempt) that cannot be the
    // holder (a fresh token): an attempt now would be refused too.
    const outOfTime = performance.now() >= start + call.policy.timeout;
    if (taken === 'held' && outOfTime && call.policy.token === undefined) return { waited: performance.now() - start };
    if (taken !== undefined && taken !== 'held') return taken;
  }
  lines.arrive(line);
  try {
    return await waitInLines(keeping, call, { token, line, start }, commandTimeout);
  } finally {
    lines.depart(line);
  }
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
async function takeIfFree<Request>(
  { store, releases }: Pick<LeaseKeeping, 'store' | 'releases'>,
  { kind, request, policy }: Omit<LeaseCall<Request>, 'id'>,
  ids: readonly string[],
  token: string,
  deadline: number,
): Promise<LeaseGrant | 'held' | undefined> {
  const take: (() => Promise<TakenIfFree | undefined>) | undefined =
    ids.length === 1
      ? store.acquireIfFree?.bind(store, kind, ids[0], request, token, policy.ttl)
      : store.acquireAllIfFree &&
        (async () => {
          const all = await store.acquireAllIfFree?.(kind, ids, request, token, policy.ttl, policy.signal);
          return all === undefined ? undefined : all ? 'taken' : 'not taken';
        });
  if (take === undefined) return undefined;
  policy.signal?.throwIfAborted();
  // One the store cannot be reached for (its connection dropped) is retried in the background until
  // the lease the command may have taken would have run out, as a failed release is.
  const giveBack = () =>
    Promise.all(
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
  const sentAt = performance.now();
  let taken: TakenIfFree | undefined;
  try {
    taken = await untilAborted(take(), policy.signal);
  } catch (error) {
    if (policy.signal?.aborted && error === policy.signal.reason) {
      // Aborted with the command in flight (a frozen server): its answer is not awaited, and the
      // release sent after it on the same connection undoes what it may still take.
      void giveBack();
      throw error;
    }
    if (error instanceof LockBackendError && error.transient) {
      // Unanswered (a frozen server, a lost reply): the command may still run. One key's wait loop
      // finds it its own at its first attempt; several keys' step may take keys the one-by-one wait
      // never reaches (it gives up at the first), and a caller out of time makes no attempt after
      // this one: what it may take is given back after it, on the same connection.
      const attemptsAgain = performance.now() < deadline;
      if (ids.length > 1 || !attemptsAgain) void giveBack();
      if (!attemptsAgain) throw error;
      return undefined;
    }
    throw error;
  }
  if (taken !== 'taken') return taken === 'held' ? 'held' : undefined;
  if (policy.signal?.aborted || !stillRunsOn(store, sentAt, policy.ttl)) {
    // Taken as the caller gave up, or its answer came after its lease ran out (see `ranOutOnArrival`).
    await giveBack();
    policy.signal?.throwIfAborted();
    return undefined;
  }
  return { token, ttl: policy.ttl, sentAt, serverTtl: policy.ttl, elapsed: 0 };
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
  if (ids.some((id) => lines.contended(lineOf(kind, id)) || watchdog.holds(kind, id))) {
    return undefined;
  }
  const taken = await takeIfFree(keeping, calls[0], ids, token, performance.now() + calls[0].policy.timeout);
  return taken === 'held' ? undefined : taken;
}

/** Whether a lease of `leaseMs` on `store` that began no earlier than `sentAt` still runs by this process's clock. */
function stillRunsOn(store: LockStore, sentAt: number, leaseMs: number): boolean {
  return performance.now() < sentAt + leaseMs - driftOf(store, leaseMs);
}

/**
 * The waiters' path, for `token` since `start`: the local `line` (fair), then the store's attempts,
 * lines and handovers.
 */
async function waitInLines<Request>(
  { store, lines }: Pick<LeaseKeeping, 'store' | 'lines'>,
  call: LeaseCall<Request>,
  { token, line, start }: { token: string; line: string; start: number },
  commandTimeout: number,
): Promise<LeaseGrant | NotGranted> {
  const { kind, id, request, policy } = call;
  const { fair, signal } = policy;
  // Undoes an attempt whose answer was lost or is not wanted, or leaves the line (see `giveBack`).
  const release = () => store.release(kind, id, token, UNDO);

  // The cohort (`fair: true`) queues in this process first; a single attempt (timeout 0) nowhere. A
  // strict waiter, and a waiter that one release admits together with the others asking the same (a
  // lock's readers), stand in the store's own line instead, where the store keeps one: queued here,
  // readers would start one round trip after another.
  const inStoreLine =
    policy.timeout > 0 &&
    (fair === 'strict' || (fair === true && store.keepsLine === true && kind.admittedTogether(request)));
  let leaveLocalLine: (() => void) | null = null;
  let queuedLocally = false;
  if (fair === true && !inStoreLine && policy.timeout > 0) {
    queuedLocally = lines.isBusy(line);
    leaveLocalLine = await lines.enter(line, start + policy.timeout, signal);
    if (leaveLocalLine === null) return { waited: performance.now() - start };
  }
  // Opened before the first attempt: a lease handed over while an attempt is on its way is kept.
  const turn = turnOf(store, kind, id, token);
  if (leaveLocalLine) lines.waitsOnStore(line, token, policy.ttl, request, start);
  const leaveStoreLine = inStoreLine ? lines.standsInStoreLine(line, token, policy.ttl, request) : undefined;
  try {
    // A waiter attempts again at least every maxStep (plus a command's time): it stays alive that long, twice over.
    const liveness = 2 * (policy.maxStep + commandTimeout);
    // The latest attempt answered "wait": when it was sent, and the last fence issued when it ran. A
    // handover message with a fence above that came after it, so its lease began after that send time;
    // one at or below it was undone before that attempt ran (it would have found the lease its own).
    let toldToWaitAt = -Infinity;
    let fenceAtWait = Infinity;
    let refusal: string | undefined;
    const stillRuns = (sentAt: number, leaseMs: number) => stillRunsOn(store, sentAt, leaseMs);
    // A grant whose answer came back after its lease ran out may already be someone else's lease:
    // it is given back, and the wait goes on (as Redlock does with a validity ≤ 0).
    const ranOutOnArrival = async (sentAt: number, leaseMs: number): Promise<boolean> => {
      if (stillRuns(sentAt, leaseMs)) return false;
      await release().catch(() => undefined);
      return true;
    };
    // A holder of this process passes the lease to this waiter, which asks to hold it alone, when it
    // releases (see LocalLines): wait for that rather than join the store's line, until its lease runs
    // out at the latest (a holder that never releases passes nothing). The release is sent after this
    // wait began. (Not for a request that may share the lease: another of its holders may leave now.)
    const passBy = leaveLocalLine && kind.exclusive(request) ? lines.expectsPassBy(line, token) : undefined;
    if (passBy !== undefined) {
      const waitStart = performance.now();
      const limit = Math.max(0, Math.min(policy.maxStep, start + policy.timeout - waitStart, passBy + 1 - waitStart));
      const passed = await waitForPass(turn, limit, (notPassed) => lines.onNotPassed(line, token, notPassed), signal);
      if (passed !== null) {
        if (signal?.aborted) {
          // Passed as the caller gave up: nobody will use it.
          await release().catch(() => undefined);
          throw signal.reason;
        }
        const sentAt = lines.passSentAt(line, token, passed.fence) ?? waitStart;
        // Read after its lease ran out (a late answer): not taken, the attempts below find out.
        if (stillRuns(sentAt, passed.lease)) {
          lines.won(line, token, performance.now() + passed.lease);
          return {
            token,
            ttl: policy.ttl,
            ...fenceOf(passed.fence),
            sentAt,
            serverTtl: passed.lease,
            elapsed: performance.now() - start,
          };
        }
      }
    }
    const won = await waitForLease(
      {
        attempt: async (join, inLine) => {
          const sentAt = performance.now();
          const options = { fair: fair !== false, liveness: join ? liveness : 0, inLine, signal };
          const answer = await store.acquire(kind, id, request, token, policy.ttl, options);
          if (!answer.granted) {
            toldToWaitAt = sentAt;
            fenceAtWait = answer.lastFence ?? 0;
            refusal = answer.refusal;
            return answer;
          }
          if (!(await ranOutOnArrival(sentAt, policy.ttl))) return answer;
          // Nobody else held it: a timeout now must not blame another owner.
          refusal = lateGrant(performance.now() - sentAt, policy.ttl);
          return { granted: false, retryIn: 0 };
        },
        pause: async (wait, pauseSignal) => {
          const handover = await turn.wait(wait, pauseSignal);
          if (handover === null) return null;
          const passedAt = lines.passSentAt(line, token, handover.fence);
          const refused = { at: toldToWaitAt, lastFence: fenceAtWait };
          return acceptedHandover({ ...handover, passedAt }, refused, stillRuns);
        },
        release,
      },
      { ...policy, timeout: Math.max(0, start + policy.timeout - performance.now()) },
      signal,
    );
    if (won === null) return { waited: performance.now() - start, ...(refusal ? { refusal } : {}) };
    // The lease began before its answer came: it runs out on the store by now + its ttl there (for
    // one handed over, the lease its releaser wrote).
    const storeTtl = won.serverTtl ?? policy.ttl;
    if (leaveLocalLine) lines.won(line, token, performance.now() + storeTtl);
    return {
      token,
      ttl: policy.ttl,
      ...fenceOf(won.fence),
      sentAt: won.sentAt,
      serverTtl: won.serverTtl ?? policy.ttl,
      elapsed: won.elapsed === 0 && !queuedLocally ? 0 : performance.now() - start,
    };
  } finally {
    turn.close();
    leaveLocalLine?.();
    leaveStoreLine?.();
  }
}

/** Why a grant was not taken: its answer came back after its lease had run out by this process's clock. */
function lateGrant(roundTrip: number, ttl: number): string {
  return `it was granted, but the answer came back ${Math.round(roundTrip)} ms after the attempt was sent, when its lease of ${ttl} ms had run out (less its clock-drift margin): the lease was given back (a longer ttl leaves room for a slow round trip)`;
}

/** A handed lease's fence, for its grant: none for a pass of this process (`PASSED_WITHOUT_FENCE`). */
function fenceOf(handed: number | undefined): { fence?: number } {
  return handed !== undefined && handed > 0 ? { fence: handed } : {};
}

/**
 * Whether a lease handed to a waiter is taken as its own, and from when it counts — the handover
 * rules. `handed` came on the waiter's turn: its fence, and its lease as the releaser wrote it (whose
 * settings may differ from the waiter's); `handed.passedAt` is when the release of this process that
 * passed it was sent, if one did (`LocalLines.passSentAt`); `refused` is the waiter's latest attempt
 * that was told to wait: when it was sent, and the last fence issued when it ran.
 *
 * - Passed by a release of this process: its lease began after that release was sent.
 * - Told by a message: its lease began after the refused attempt was sent, if its fence is above the
 *   last fence that attempt saw; a fence at or below it was handed over before that attempt ran,
 *   which found the lease someone else's — the message is stale.
 * - Either way, only while a third of the handover lease at least still runs by this waiter's clock
 *   (`stillRuns`): a handover read late, or after a lease this waiter gave back, is not taken, and
 *   one read so late that its holder would start with next to no validity is confirmed instead.
 *
 * `null`: not taken; the next attempt, sent at once, finds out (a lease still its own is granted
 * again, for its whole ttl from that attempt, with a new fence).
 */
export function acceptedHandover(
  handed: Handover & { passedAt?: number | undefined },
  refused: { at: number; lastFence: number },
  stillRuns: (sentAt: number, leaseMs: number) => boolean,
): HandedLease | null {
  const { fence, lease, passedAt } = handed;
  const worthTaking = (sentAt: number) => stillRuns(sentAt - lease / 3, lease);
  if (passedAt !== undefined) {
    return worthTaking(passedAt) ? { fence, sentAt: passedAt, serverTtl: lease } : null;
  }
  if (fence > refused.lastFence && worthTaking(refused.at)) {
    return { fence, sentAt: refused.at, serverTtl: lease };
  }
  return null;
}

/** Ends a wait for a pass that the release did not make (an abort reason, never thrown to a caller). */
const NOT_PASSED = Symbol('not passed');

/**
 * Waits on `turn` for up to `limit` ms for a lease passed on by a release of this process: resolves
 * with it, or `null` when the release did not pass it (`onNotPassed`), on a wake-up, or when the
 * time is up. Rejects with the signal's reason on abort.
 */
async function waitForPass(
  turn: Turn,
  limit: number,
  onNotPassed: (notPassed: (() => void) | undefined) => void,
  signal?: AbortSignal,
): Promise<Handover | null> {
  const ended = new AbortController();
  const forwardAbort = () => ended.abort(signal!.reason);
  if (signal?.aborted) throw signal.reason;
  signal?.addEventListener('abort', forwardAbort, { once: true });
  onNotPassed(() => ended.abort(NOT_PASSED));
  try {
    return await turn.wait({ limit, step: limit }, ended.signal);
  } catch (error) {
    if (error === NOT_PASSED) return null;
    throw error;
  } finally {
    signal?.removeEventListener('abort', forwardAbort);
    onNotPassed(undefined);
  }
}
