import type { Handover, Turn } from '../store/store.js';
import type { HandedLease } from './wait-for-lease.js';

/** A handed lease's fence, for its grant: none for a pass of this process (`PASSED_WITHOUT_FENCE`). */
export function fenceOf(handed: number | undefined): { fence?: number } {
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
export async function waitForPass(
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
