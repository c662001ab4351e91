import type { LeaseKind } from '../kinds/lease-kind.js';
import type { Successor } from '../store/store.js';
import type { LocalPass, PassListener } from './handover-rules.js';

interface QueuedWaiter {
  /** Gives the turn to this waiter. */
  start(): void;
}

/**
 * The waiter of this process whose turn it is: it waits on the store, in the store's own line
 * across processes.
 */
interface Head {
  token: string;
  /** The ttl it asked for. */
  ttl: number;
  /** What it asked for (the kind's request). */
  request: unknown;
  /** `performance.now()` at which it started waiting. */
  since: number;
  /** Set while it waits for a holder of this process to pass it the lease: tells it how that went. */
  listener?: PassListener;
  /**
   * The lease a release of this process passed it: its fence, when that release was sent, and whether
   * nobody else waited in the store's line then.
   */
  pass?: { fence: number; sentAt: number; nobodyElseInLine?: boolean };
}

/** A strict waiter of this process standing in the store's line. */
interface StrictWaiter {
  token: string;
  ttl: number;
  request: unknown;
  /** The lease a release of this process passed it, and when that release was sent. */
  pass?: { fence: number; sentAt: number };
}

/**
 * A waiter of this process paused on the store (`StoreWaiter.pause`) that a holder of this process may
 * pass the lease to without a command: an unordered one (`fair: false`), which barges by its contract.
 */
export interface PausedWaiter {
  token: string;
  request: unknown;
  passedHere(pass: LocalPass): void;
}

interface Line {
  /** The waiters after the head, in order of arrival. */
  waiting: QueuedWaiter[];
  head?: Head;
  /** `performance.now()` at which this process last took the lease from the store's line (or found it free). */
  tenureStart: number;
  /**
   * An attempt during this tenure found nobody in the store's line: every waiter of this process may be
   * passed the lease ahead of it, within the cohort's bound, whenever it arrived.
   */
  lineSeenEmpty: boolean;
  /** Leases passed from one waiter of this process to the next since `tenureStart`. */
  passes: number;
  /** The waiter the last release of this process passed the lease to. */
  passedTo?: string;
  /** The token of the lease a waiter of this line took and has not released yet. */
  holder?: string;
  /** `performance.now()` by which the holder's lease has run out on the store, unless renewed. */
  holderRunsOutBy: number;
}

/**
 * At most this many times in a row a lease goes from a holder to a waiter of its own process ahead
 * of the store's line: waiters of other processes wait at most that many extra sections.
 */
export const MAX_PASSES_IN_A_ROW = 16;

/**
 * The fair waiters of one module in this process, per lease, in order of arrival: only the first of
 * each line (the head) waits on the store (and in the store's own line, across processes); the
 * others wait here, without a timer or a round trip each, until the one before them is done.
 *
 * A release in this process passes the lease straight to the head when the head was already waiting
 * when this process took the lease from the store (a cohort, as NUMA locks batch the waiters of one
 * node): it costs the release alone — no message to another process, no attempt — and waiters of
 * other processes, which arrived later than the head or are served after a bounded run of such
 * passes, keep their order between processes.
 */
export class LocalLines {
  private readonly lines = new Map<string, Line>();
  /** The strict waiters of this process standing in the store's line of each lease, oldest first. */
  private readonly strictWaiters = new Map<string, StrictWaiter[]>();
  /**
   * The store's tokens of the leases passed on within this process, by line, until the lease leaves it:
   * the store holds the lease under such a token, but the holder it was made for no longer does.
   */
  private readonly passedOnTokens = new Map<string, Set<string>>();
  /** The waiters of this process paused on the store for each lease that a pass may reach, oldest first. */
  private readonly paused = new Map<string, PausedWaiter[]>();
  /** How many callers of this process are on the waiters' path of each lease now, fair or not. */
  private readonly trying = new Map<string, number>();

  /**
   * Whether a caller of this process is on the waiters' path of `line` (`arrive`): a newcomer then
   * joins them rather than try a free lease ahead of them.
   */
  contended(line: string): boolean {
    return this.trying.has(line);
  }

  /** A caller takes the waiters' path of `line`, until it `depart`s. */
  arrive(line: string): void {
    this.trying.set(line, (this.trying.get(line) ?? 0) + 1);
  }

  depart(line: string): void {
    const count = this.trying.get(line) ?? 0;
    if (count <= 1) this.trying.delete(line);
    else this.trying.set(line, count - 1);
  }

  /** Whether a waiter of this process holds the turn of `line` now (a newcomer would queue). */
  isBusy(line: string): boolean {
    return this.lines.has(line);
  }

  /**
   * Makes the caller the first of `line`, which nobody of this process is in (`isBusy` is false): its
   * turn at once, `leave` as from `enter`.
   */
  enterFirst(line: string): () => void {
    this.lines.set(line, {
      waiting: [],
      tenureStart: -Infinity,
      lineSeenEmpty: false,
      passes: 0,
      holderRunsOutBy: Infinity,
    });
    return this.leaver(line);
  }

  /**
   * Resolves with `leave` once it is the caller's turn (at once when nobody of this process waits),
   * or with `null` when `deadline` (`performance.now()`) passes first. Rejects on abort. The caller
   * must call `leave()` when it stops waiting, won or not, so that the next one gets its turn.
   */
  enter(line: string, deadline: number, signal?: AbortSignal): Promise<(() => void) | null> {
    const existing = this.lines.get(line);
    if (existing === undefined) return Promise.resolve(this.enterFirst(line));
    const { waiting } = existing;
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        dropOut();
        reject(signal!.reason);
      };
      const turn: QueuedWaiter = {
        start: () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          resolve(this.leaver(line));
        },
      };
      const dropOut = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const index = waiting.indexOf(turn);
        if (index >= 0) waiting.splice(index, 1);
      };
      const timer = setTimeout(
        () => {
          dropOut();
          resolve(null);
        },
        Math.max(0, deadline - performance.now()),
      );
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      waiting.push(turn);
    });
  }

  /** The head of `line` waits on the store now, as `token` asking `ttl` and `request`, since `since`. */
  waitsOnStore(line: string, token: string, ttl: number, request: unknown, since: number): void {
    const state = this.lines.get(line);
    if (state) state.head = { token, ttl, request, since };
  }

  /**
   * The head of `line` took the lease (passed on by a release of this process, or from the store),
   * which runs out on the store by `runsOutBy` unless renewed.
   */
  won(line: string, token: string, runsOutBy: number): void {
    const state = this.lines.get(line);
    if (state === undefined) return;
    state.holder = token;
    state.holderRunsOutBy = runsOutBy;
    if (state.passedTo === token) {
      state.passes++;
    } else {
      state.tenureStart = performance.now();
      // Passed by a release that saw nobody else in the store's line: as if an attempt had found none.
      state.lineSeenEmpty = state.head?.token === token && state.head.pass?.nobodyElseInLine === true;
      state.passes = 0;
    }
    state.passedTo = undefined;
  }

  /**
   * Whether the head `token` of `line`, which may not count on a pass (`expectsPassBy`), could be passed
   * the lease here if nobody of another process stood in the store's line ahead of it: a holder of this
   * process holds it, with passes of this tenure left.
   */
  passableIfNobodyWaits(line: string, token: string): boolean {
    const state = this.lines.get(line);
    return state?.head?.token === token && this.heldHere(line) && state.passes < MAX_PASSES_IN_A_ROW;
  }

  /**
   * An attempt found nobody in the store's line of `line` while a holder of this process held it: from
   * now until the lease leaves this process, its waiters may be passed the lease ahead of that line
   * whenever they arrived, within the cohort's bound (`MAX_PASSES_IN_A_ROW`) — which also bounds what a
   * waiter of another process that joins the line later waits.
   */
  nobodyInStoreLine(line: string): void {
    const state = this.lines.get(line);
    if (state !== undefined) state.lineSeenEmpty = true;
  }

  /** Whether a holder of this process holds `line`'s lease now, by the lease it was last known to have. */
  heldHere(line: string): boolean {
    const state = this.lines.get(line);
    return state?.holder !== undefined && performance.now() < state.holderRunsOutBy;
  }

  /** The holder `token` of `line` renewed its lease: it runs out on the store by `runsOutBy` now. */
  extended(line: string, token: string, runsOutBy: number): void {
    const state = this.lines.get(line);
    if (state?.holder === token) state.holderRunsOutBy = runsOutBy;
  }

  /**
   * When the head `token` of `line` may count on the lease being passed to it by the holder of this
   * process (it was waiting when this process took the lease), rather than join the store's line: by
   * when the holder's lease runs out, after which nobody passes it (a holder that never releases).
   * `undefined` when it may not.
   */
  expectsPassBy(line: string, token: string): number | undefined {
    const state = this.lines.get(line);
    if (state?.head?.token !== token || state.holder === undefined || !this.mayJump(state, state.head))
      return undefined;
    return state.holderRunsOutBy;
  }

  /** While the head `token` of `line` waits for a pass (`listener` set), the releasing holder tells it how it went. */
  awaitsPass(line: string, token: string, listener: PassListener | undefined): void {
    const head = this.lines.get(line)?.head;
    if (head?.token === token) head.listener = listener;
  }

  /**
   * A release of `line` by `holder` passes `pass` — the store's lease as it stands, no command — to the
   * head, when the head waits for a pass from this process (`awaitsPass`), may go ahead of the store's
   * line (`expectsPassBy`), and asks what the lease was taken for; else to the oldest unordered waiter
   * paused on the store that asks the same (`pausesOnStore`). `false`: nothing was passed.
   */
  passHere(line: string, holder: string, pass: LocalPass): boolean {
    const passed = this.passToHead(line, holder, pass) || this.passToPaused(line, holder, pass);
    if (passed) this.passedOn(line).add(pass.storeToken);
    return passed;
  }

  /**
   * Whether the store holds a lease of `line` under `token` that was passed on within this process: a
   * by-token call with it must not touch the lease its holder now holds under another token.
   */
  isPassedOn(line: string, token: string): boolean {
    return this.passedOnTokens.get(line)?.has(token) ?? false;
  }

  /** The lease the store holds under `storeToken` left this process: released through the store, lost, or given back. */
  leaseLeft(line: string, storeToken: string): void {
    const tokens = this.passedOnTokens.get(line);
    if (tokens === undefined || !tokens.delete(storeToken)) return;
    if (tokens.size === 0) this.passedOnTokens.delete(line);
  }

  private passedOn(line: string): Set<string> {
    let tokens = this.passedOnTokens.get(line);
    if (tokens === undefined) this.passedOnTokens.set(line, (tokens = new Set()));
    return tokens;
  }

  /**
   * `waiter` pauses on the store for `line` until the returned function is called: a release of this
   * process may pass it the lease meanwhile (`passHere`).
   */
  pausesOnStore(line: string, waiter: PausedWaiter): () => void {
    const waiters = this.paused.get(line);
    if (waiters === undefined) this.paused.set(line, [waiter]);
    else waiters.push(waiter);
    return () => this.unpause(line, waiter);
  }

  private passToHead(line: string, holder: string, pass: LocalPass): boolean {
    const state = this.lines.get(line);
    const head = state?.head;
    const listener = head?.listener;
    if (state === undefined || head === undefined || listener === undefined || head.token === holder) return false;
    if (head.request !== pass.request || !this.mayJump(state, head)) return false;
    if (state.holder === holder) state.holder = undefined;
    state.passedTo = head.token;
    listener.passedHere(pass);
    return true;
  }

  /** To the oldest waiter paused on the store that asks the same. */
  private passToPaused(line: string, holder: string, pass: LocalPass): boolean {
    const waiter = this.paused.get(line)?.find((each) => each.token !== holder && each.request === pass.request);
    if (waiter === undefined) return false;
    this.unpause(line, waiter);
    const state = this.lines.get(line);
    if (state?.holder === holder) state.holder = undefined;
    if (state !== undefined) state.passedTo = waiter.token;
    waiter.passedHere(pass);
    return true;
  }

  private unpause(line: string, waiter: PausedWaiter): void {
    const waiters = this.paused.get(line);
    const index = waiters?.indexOf(waiter) ?? -1;
    if (waiters === undefined || index < 0) return;
    if (waiters.length === 1) this.paused.delete(line);
    else waiters.splice(index, 1);
  }

  /**
   * Whom a release of `line` by `holder` should pass the lease to: the head, when it may go ahead
   * of the store's line (`jump`), or else only when nobody else waits there.
   */
  successor(line: string, holder: string): Successor | undefined {
    const state = this.lines.get(line);
    if (state?.holder === holder) state.holder = undefined;
    const head = state?.head;
    if (state === undefined || head === undefined || head.token === holder) return this.strictSuccessor(line, holder);
    const jump = this.mayJump(state, head);
    // The release is sent right after this: the lease it may pass does not start before now.
    const sentAt = performance.now();
    return {
      token: head.token,
      jump,
      ttl: head.ttl,
      request: head.request,
      passed: firstCallOnly((fence, nobodyElseInLine) => {
        if (fence === 0) return head.listener?.notPassed();
        head.pass = { fence, sentAt, nobodyElseInLine };
        // Passed ahead of the line: one more pass of this tenure. Passed as first in line (or with
        // nobody there): as good as taken from the store's line, a new tenure.
        if (jump) state.passedTo = head.token;
        head.listener?.passedByStore();
      }),
    };
  }

  /**
   * A strict waiter (`fair: 'strict'`) of this process stands in the store's line of `line` as
   * `token`, asking `ttl` and `request`, until the returned function is called. It queues nowhere here: a release
   * of this process names the oldest of them as its successor, which gets the lease only if it is
   * first in the store's line (or nobody is), in the release itself, without a message.
   */
  standsInStoreLine(line: string, token: string, ttl: number, request: unknown): () => void {
    const waiter: StrictWaiter = { token, ttl, request };
    const waiters = this.strictWaiters.get(line);
    if (waiters === undefined) this.strictWaiters.set(line, [waiter]);
    else waiters.push(waiter);
    return () => {
      const left = this.strictWaiters.get(line);
      const index = left?.indexOf(waiter) ?? -1;
      if (left === undefined || index < 0) return;
      if (left.length === 1) this.strictWaiters.delete(line);
      else left.splice(index, 1);
    };
  }

  /**
   * When the release that passed the lease to `token` (the head of `line`, or one of its strict waiters)
   * was sent, if one did; `fence` is what its turn was told.
   */
  passSentAt(line: string, token: string, fence: number): number | undefined {
    const head = this.lines.get(line)?.head;
    const waiter = head?.token === token ? head : this.strictWaiters.get(line)?.find((each) => each.token === token);
    return waiter?.pass?.fence === fence ? waiter.pass.sentAt : undefined;
  }

  /** The oldest strict waiter of `line` other than the releasing `holder`, which may not go ahead of the store's line. */
  private strictSuccessor(line: string, holder: string): Successor | undefined {
    const oldest = this.strictWaiters.get(line)?.find((waiter) => waiter.token !== holder);
    if (oldest === undefined) return undefined;
    // The release is sent right after this: the lease it may pass does not start before now.
    const sentAt = performance.now();
    return {
      token: oldest.token,
      jump: false,
      ttl: oldest.ttl,
      request: oldest.request,
      passed: firstCallOnly((fence) => {
        if (fence !== 0) oldest.pass = { fence, sentAt };
      }),
    };
  }

  private mayJump(state: Line, head: Head): boolean {
    const cameFirst = head.since < state.tenureStart || state.lineSeenEmpty;
    return cameFirst && state.passes < MAX_PASSES_IN_A_ROW;
  }

  private leaver(line: string): () => void {
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const state = this.lines.get(line);
      if (state === undefined) return;
      state.head = undefined;
      const next = state.waiting.shift();
      if (next) next.start();
      else this.lines.delete(line);
    };
  }
}

/** The local line of a lease. */
export function lineOf(kind: LeaseKind, id: string): string {
  return `${kind.name}\0${id}`;
}

/** A successor is told once: by the store during its release, else by the core after it (`HeldLease.release`). */
function firstCallOnly(passed: Successor['passed']): Successor['passed'] {
  let told = false;
  return (fence, nobodyElseInLine) => {
    if (told) return;
    told = true;
    passed(fence, nobodyElseInLine);
  };
}
