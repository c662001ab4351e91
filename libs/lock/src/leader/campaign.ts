import type { Lock } from '../held-lock.js';
import { errorMessage, LockLostError, LockTimeoutError } from '../lock.errors.js';
import { validateSignal } from '../options/call-options.js';
import type { LockLogger } from '../lock-logger.js';
import type { LockService } from '../lock.service.js';
import { sleep } from '../util/sleep.js';
import type { ResolvedCampaignOptions } from './campaign-options.js';

/** One process's campaign for a name, as `LeaderService.campaign` returns it. */
export interface Leadership {
  /** The name campaigned for. */
  readonly name: string;
  /**
   * Whether this process leads now: it holds the name's lease and, by its own clock, the lease has
   * not run out (a process frozen past its lease reads `false` the moment it runs again).
   */
  readonly isLeader: boolean;
  /**
   * The term of the current leadership — a fence of the name's lock: strictly above the term of
   * every earlier leader, in any process — or `undefined` when this process does not lead. Write it
   * beside what the leader writes, and refuse writes with a lower term than the highest seen.
   */
  readonly term: number | undefined;
  /** When the current leadership began (`Date.now()` then), or `undefined` when this process does not lead. */
  readonly since: number | undefined;
  /** Of the current leadership: aborts (with a `LockLostError`) the moment it is lost or resigned; `undefined` when not leading. */
  readonly signal: AbortSignal | undefined;
  /**
   * Resolves once this process leads (at once if it does); rejects if the campaign is resigned first,
   * or with `signal`'s reason once it aborts (`AbortSignal.timeout(ms)` to wait a while only).
   */
  whenLeader(signal?: AbortSignal): Promise<void>;
  /** Stops campaigning: gives the leadership up if it holds it (the next leader is woken at once). */
  resign(): Promise<void>;
}

/** A leadership while it lasts: the name's lock, its term, and the signal users see. */
interface Tenure {
  readonly lock: Lock;
  readonly term: number;
  readonly since: number;
  readonly ended: AbortController;
}

/**
 * Campaigns for `name` through the public lock API until resigned: waits in the line of the name's
 * lock (woken when the leader releases it), leads while it holds it (renewed by the watchdog, lost
 * by its signal), and campaigns again after losing it or after the store failed — no restart needed.
 */
export class Campaign implements Leadership {
  private tenure?: Tenure;
  private readonly stopping = new AbortController();
  private readonly electionWaiters = new Set<{ resolve(): void; reject(error: unknown): void }>();
  /** The store failure last logged while campaigning, until an attempt gets an answer again. */
  private storeTrouble?: string;
  private readonly finished: Promise<void>;

  constructor(
    readonly name: string,
    private readonly key: string,
    private readonly locks: LockService,
    readonly settings: ResolvedCampaignOptions,
    private readonly logger: LockLogger,
    private readonly service: {
      /** Calls its argument whenever the store's connection closes; returns the stop (`LockStore.watchConnection`). */
      watchConnection(onLost: () => void): () => void;
      /** This campaign resigned: the service forgets it. */
      resigned(): void;
      /** A leadership began, or ended: the service counts it (telemetry). */
      leadershipBegan(): void;
      leadershipEnded(): void;
    },
  ) {
    // Every step catches what it expects; anything else ends the campaign with a line in the log.
    this.finished = this.campaign().catch((error: unknown) =>
      this.logger.error(`Campaign for "${name}" stopped: ${errorMessage(error)}`),
    );
  }

  get isLeader(): boolean {
    const tenure = this.tenure;
    return tenure !== undefined && !tenure.ended.signal.aborted && tenure.lock.validity > 0;
  }

  get term(): number | undefined {
    return this.isLeader ? this.tenure?.term : undefined;
  }

  get since(): number | undefined {
    return this.isLeader ? this.tenure?.since : undefined;
  }

  get signal(): AbortSignal | undefined {
    return this.tenure?.ended.signal;
  }

  whenLeader(signal?: AbortSignal): Promise<void> {
    try {
      validateSignal(signal);
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.isLeader) return Promise.resolve();
    if (this.stopping.signal.aborted) return Promise.reject(this.resignation());
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      // A wait given up (its signal aborted) is forgotten, not kept until the next election.
      const givenUp = (): void => {
        this.electionWaiters.delete(waiter);
        reject(signal!.reason);
      };
      const settled = (): void => signal?.removeEventListener('abort', givenUp);
      const waiter = {
        resolve: () => (settled(), resolve()),
        reject: (error: unknown) => (settled(), reject(error)),
      };
      signal?.addEventListener('abort', givenUp, { once: true });
      this.electionWaiters.add(waiter);
    });
  }

  async resign(): Promise<void> {
    if (!this.stopping.signal.aborted) this.stopping.abort(this.resignation());
    this.service.resigned();
    await this.finished;
  }

  private async campaign(): Promise<void> {
    while (!this.stopping.signal.aborted) {
      const lock = await this.attempt();
      const term = lock && (await this.drawTerm(lock));
      if (lock === undefined || term === undefined) continue;
      await this.lead(lock, term);
    }
    for (const waiter of this.electionWaiters) waiter.reject(this.resignation());
    this.electionWaiters.clear();
  }

  /** One wait in the name's line: the lock, or `undefined` (another leads, resigned, or the store failed). */
  private async attempt(): Promise<Lock | undefined> {
    const { ttl, timeout, retryDelay } = this.settings;
    try {
      const lock = await this.locks.lock(this.key, { ttl, timeout, autoExtend: true, signal: this.stopping.signal });
      this.storeAnswers();
      return this.stopping.signal.aborted ? this.giveBack(lock) : lock;
    } catch (error) {
      if (this.stopping.signal.aborted) return undefined;
      // Waited a whole attempt while another led: wait again at once. (A refusal is the store's trouble.)
      if (error instanceof LockTimeoutError && error.refusal === undefined) {
        this.storeAnswers();
        return undefined;
      }
      this.storeFails(error);
      await sleep(retryDelay, this.stopping.signal).catch(() => undefined);
      return undefined;
    }
  }

  /** The term of a new leadership: the lock's fence. Without one, the lock is given back. */
  private async drawTerm(lock: Lock): Promise<number | undefined> {
    try {
      const term = await lock.fence();
      return this.stopping.signal.aborted ? this.giveBack(lock) : term;
    } catch (error) {
      this.storeFails(error);
      await this.giveBack(lock);
      await sleep(this.settings.retryDelay, this.stopping.signal).catch(() => undefined);
      return undefined;
    }
  }

  /** Leads until the lock is lost or the campaign resigned; then tells, and gives the lock back. */
  private async lead(lock: Lock, term: number): Promise<void> {
    const tenure: Tenure = { lock, term, since: Date.now(), ended: new AbortController() };
    this.tenure = tenure;
    // Whatever happens while it leads, the leadership ends here and its lock is given back: a campaign
    // must never stop while it holds the lock (renewed for ever, nobody else could lead).
    let end: { reason: LockLostError; why: string } | undefined;
    try {
      this.logger.log(`Leading "${this.name}" (term ${term})`);
      this.service.leadershipBegan();
      for (const waiter of this.electionWaiters) waiter.resolve();
      this.electionWaiters.clear();
      this.tell('onElected', () => this.settings.onElected?.(term, tenure.ended.signal));
      end = await this.endOf(lock);
    } finally {
      const { reason, why } = end ?? { reason: this.resignation(), why: 'the campaign failed' };
      tenure.ended.abort(reason);
      this.tenure = undefined;
      this.service.leadershipEnded();
      this.logger.log(`No longer leading "${this.name}" (term ${term}): ${why}`);
      // Resigned: the release wakes the next leader at once. Lost: the lease is released if it is ours
      // after all (Redis back in time), without waiting on a store that may still be away.
      if (reason.reason === 'released') await lock.unlock().catch(() => false);
      else void lock.unlock().catch(() => false);
      this.tell('onRevoked', () => this.settings.onRevoked?.(reason));
    }
  }

  /**
   * Why a leadership ends: its lock's loss, the campaign's resignation, the store's connection
   * closing, or its lease running out by this process's clock, whichever comes first. A server
   * restarted without persistence lost the lease, and another process may lead as soon as it
   * reconnects: a leader stops at once rather than at its next renewal. A renewal answered after the
   * lease ran out here (a slow reply path) would bring the lock's validity back: the leadership has
   * ended all the same — `isLeader` never turns true again within one leadership.
   */
  private endOf(lock: Lock): Promise<{ reason: LockLostError; why: string }> {
    const stopping = this.stopping.signal;
    return new Promise((resolve) => {
      let stopWatching = (): void => undefined;
      const ranOut = setInterval(() => {
        if (lock.validity <= 0) ended('expired');
      }, validityCheckEvery(this.settings.ttl)).unref();
      const ended = (cause?: 'connection closed' | 'expired'): void => {
        clearInterval(ranOut);
        lock.signal.removeEventListener('abort', aborted);
        stopping.removeEventListener('abort', aborted);
        stopWatching();
        if (cause !== undefined) {
          const lost = cause === 'expired' ? 'expired' : 'taken';
          const reason = new LockLostError('lock', this.key, lock.token, lost, `The leadership of "${this.name}"`);
          const why =
            cause === 'expired' ? "its lease ran out by this process's clock" : 'the connection to the store closed';
          return resolve({ reason, why });
        }
        const reason = lock.signal.aborted ? (lock.signal.reason as LockLostError) : this.resignation();
        resolve({ reason, why: reason.message });
      };
      const aborted = (): void => ended();
      if (lock.signal.aborted || stopping.aborted) return ended();
      lock.signal.addEventListener('abort', aborted);
      stopping.addEventListener('abort', aborted);
      stopWatching = this.service.watchConnection(() => ended('connection closed'));
    });
  }

  private async giveBack(lock: Lock): Promise<undefined> {
    await lock.unlock().catch(() => false);
    return undefined;
  }

  private resignation(): LockLostError {
    return new LockLostError('lock', this.key, '', 'released', `The leadership of "${this.name}"`);
  }

  /** Calls a user's callback: what it returns is not waited for; a throw or a rejection is logged. */
  private tell(callback: 'onElected' | 'onRevoked', call: () => unknown): void {
    const failed = (error: unknown): void =>
      this.logger.warn(`${callback} of "${this.name}" threw: ${errorMessage(error)}`);
    try {
      const answer = call();
      if (answer instanceof Promise) answer.catch(failed);
    } catch (error) {
      failed(error);
    }
  }

  private storeFails(error: unknown): void {
    const message = errorMessage(error);
    if (this.storeTrouble !== undefined) return;
    this.storeTrouble = message;
    this.logger.warn(
      `Campaign for "${this.name}" cannot reach the store, trying again every ${this.settings.retryDelay} ms: ${message}`,
    );
  }

  private storeAnswers(): void {
    if (this.storeTrouble === undefined) return;
    this.storeTrouble = undefined;
    this.logger.log(`Campaign for "${this.name}" reaches the store again`);
  }
}

/** How often a leader looks whether its lease ran out by its own clock: a twentieth of it, 10–100 ms. */
function validityCheckEvery(ttl: number): number {
  return Math.min(100, Math.max(10, ttl / 20));
}
