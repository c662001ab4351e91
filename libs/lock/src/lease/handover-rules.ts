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

/**
 * A lease a holder of this process passes to a waiter of it without a command (`LocalLines.passHere`):
 * the store's lease as it stands, under the token of the holder that took it from the store.
 */
export interface LocalPass {
  storeToken: string;
  /** What it was taken asking: passed only to a waiter asking the same. */
  request: unknown;
  /** `performance.now()` at which the acquire, or the last extension that succeeded, was sent. */
  sentAt: number;
  /** How long the store's lease runs from `sentAt`. */
  serverTtl: number;
  /**
   * `performance.now()` up to which the lease is surely ours, and at which it is renewed next, as its
   * holder knew them (an extension whose answer was lost may have shortened it: never more than that).
   */
  validUntil: number;
  extendAt: number;
  /** The passes without a command it has made in a row since it was taken from the store, this one included. */
  passesInARow: number;
}

/**
 * Whether a lease that is surely ours until `validUntil` still has enough of its `serverTtl` left to be
 * passed on within the process: a third, the share a renewal restores and a handover read late must
 * still have (`acceptedHandover`). Less, and the release goes through the store, whose handover grants
 * a lease anew.
 */
export function leftToPass(validUntil: number, serverTtl: number): boolean {
  return validUntil - performance.now() >= serverTtl / 3;
}

/** The releasing holder passed the lease through the store: the waiter's turn is told right after. */
const PASSED_BY_STORE = Symbol('passed by the store');

/** What a waiter for a pass is told by the releasing holder of its process (`LocalLines.awaitsPass`). */
export interface PassListener {
  /** The release did not pass the lease to it. */
  notPassed(): void;
  /** The holder passed it its lease, as it stands on the store, without a command: it is the waiter's now. */
  passedHere(pass: LocalPass): void;
  /** The holder's release passed it the lease through the store, which tells its turn. */
  passedByStore(): void;
}

/**
 * Waits up to `limit` ms for a lease passed on by a release of this process: resolves with it — a
 * `LocalPass` when the holder passed it without a command, the `Handover` told on `turn` when its
 * release passed it through the store — or `null` when the release did not pass it, or when the time
 * is up. Nothing is subscribed meanwhile: the holder tells the waiter itself. Rejects with the
 * signal's reason on abort (from then on nothing is passed to it).
 */
export async function waitForPass(
  turn: Turn,
  limit: number,
  listen: (listener: PassListener | undefined) => void,
  signal?: AbortSignal,
): Promise<Handover | LocalPass | null> {
  const told = await toldOfPass(limit, listen, signal);
  if (told !== PASSED_BY_STORE) return told;
  return turn.wait({ limit, step: limit }, signal);
}

/** How the releasing holder said it went (`PassListener`), or `null` after `limit` ms. */
function toldOfPass(
  limit: number,
  listen: (listener: PassListener | undefined) => void,
  signal?: AbortSignal,
): Promise<LocalPass | typeof PASSED_BY_STORE | null> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const stop = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      listen(undefined);
    };
    const end = (outcome: LocalPass | typeof PASSED_BY_STORE | null) => {
      stop();
      resolve(outcome);
    };
    const onAbort = () => {
      stop();
      reject(signal!.reason);
    };
    const timer = setTimeout(() => end(null), limit);
    signal?.addEventListener('abort', onAbort, { once: true });
    listen({
      notPassed: () => end(null),
      passedHere: (pass) => end(pass),
      passedByStore: () => end(PASSED_BY_STORE),
    });
  });
}
