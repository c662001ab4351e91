import type { Cluster, Redis } from 'ioredis';
import { LockBackendError } from '../../lock.errors.js';
import { hashTagged, toMillis } from './key-layout.js';
import { backendErrorOf, unansweredError } from './backend-messages.js';
import {
  acquireLockScript,
  acquirePermitScript,
  countPermitsScript,
  extendLockScript,
  extendPermitScript,
  forceReleaseLockScript,
  inspectLockScript,
  leaseRunsOutIn,
  listPermitsScript,
  publishingSharded,
  type RedisScript,
  releaseLockScript,
  releasePermitScript,
} from './redis.scripts.js';
import { WakeUps } from './wake-ups.js';
import type {
  Attempt,
  AttemptOptions,
  LeaseKind,
  LeaseRenewal,
  LockInspection,
  LockStore,
  Successor,
  Turn,
} from '../store.js';

export interface RedisStoreOptions {
  /** Prefix of every key, e.g. `lock:`. */
  keyPrefix: string;
  /** Longest time one command may take before it fails with `LockBackendError`. */
  commandTimeout: number;
  /** `close()` quits the client only when the module created it; a client passed in stays open. */
  ownsClient: boolean;
  /** After a granted attempt or a handover, `WAIT replicas timeout`: a lease the replicas did not acknowledge is given back. */
  waitForReplicas?: { replicas: number; timeout: number } | undefined;
  /** How long a fence counter outlives the last fence drawn from it (ms). */
  fenceCounterTtl: number;
}

/**
 * Leases on Redis: `SET NX PX` and compare-by-token Lua scripts, called by SHA.
 *
 * Key layout: the lock for `key` is `<prefix>{<key>}`, its companions (the fence counter, …)
 * `<prefix>{<key>}:<suffix>`. Semaphore `name` is the sorted set `<prefix>sem:{<name>}`, companions
 * `<prefix>sem:{<name>}:<suffix>`. The user's key or name is the hash tag, so that one lock or
 * semaphore lives in one cluster slot — unless it holds `{` or `}`, which could end the tag early
 * or make it empty (`}abc`): then the tag is a digest of the key, followed by the key itself,
 * `<prefix>{<digest>}<key>`, so that distinct keys still never share a Redis key.
 */
export class RedisStore implements LockStore {
  private closed = false;
  /** The client's socket is corked until the end of this tick (see `shareWrite`). */
  private corked = false;
  private readonly wakeUps: WakeUps;
  private readonly deadlines: CommandDeadlines;
  /**
   * A lease handed to a waiter lasts this long until the waiter extends it to its own ttl: long
   * enough for the message and the extension to arrive, short enough that a lease handed to a
   * waiter that is gone meanwhile returns to the line soon.
   */
  readonly handoverLease: number;

  constructor(
    private readonly client: Redis | Cluster,
    private readonly options: RedisStoreOptions,
  ) {
    this.wakeUps = new WakeUps(client);
    this.deadlines = new CommandDeadlines(options.commandTimeout);
    // Whole ms: it goes to PX.
    this.handoverLease = Math.ceil(Math.max(1_000, 2 * options.commandTimeout));
  }

  acquireLock(key: string, token: string, ttl: number, options: AttemptOptions): Promise<Attempt> {
    return this.attempt(acquireLockScript, 'lock', key, [token, toMillis(ttl)], options);
  }

  releaseLock(key: string, token: string, successor?: Successor): Promise<boolean> {
    return this.release(releaseLockScript, 'lock', key, token, successor);
  }

  async extendLock(key: string, token: string, ttl: number): Promise<boolean> {
    return Number(await this.runScript(extendLockScript, key, [this.lockKey(key)], [token, toMillis(ttl)])) === 1;
  }

  async isLocked(key: string): Promise<boolean> {
    return Number(await this.run(key, 'EXISTS', () => this.client.exists(this.lockKey(key)))) === 1;
  }

  acquirePermit(name: string, token: string, limit: number, ttl: number, options: AttemptOptions): Promise<Attempt> {
    return this.attempt(acquirePermitScript, 'semaphore', name, [token, limit, toMillis(ttl)], options);
  }

  releasePermit(name: string, token: string, successor?: Successor): Promise<boolean> {
    return this.release(releasePermitScript, 'semaphore', name, token, successor);
  }

  openTurn(kind: LeaseKind, id: string, token: string): Turn {
    const turn = this.wakeUps.openTurn(this.channelOf(kind, id), token);
    const { waitForReplicas } = this.options;
    if (!waitForReplicas) return turn;
    return {
      close: () => turn.close(),
      // A lease handed over counts only once the replicas have it too (see `attempt`).
      wait: async (wait, signal) => {
        const fence = await turn.wait(wait, signal);
        if (fence === 0 || (await this.acknowledged(id, waitForReplicas))) return fence;
        await this.release(kind === 'lock' ? releaseLockScript : releasePermitScript, kind, id, token).catch(
          () => undefined,
        );
        return 0;
      },
    };
  }

  async extendPermit(name: string, token: string, ttl: number): Promise<boolean> {
    return (
      Number(await this.runScript(extendPermitScript, name, [this.semaphoreKey(name)], [token, toMillis(ttl)])) === 1
    );
  }

  async countPermits(name: string): Promise<number> {
    return Number(await this.runScript(countPermitsScript, name, [this.semaphoreKey(name)], []));
  }

  async extendLeases(leases: readonly LeaseRenewal[]): Promise<(boolean | LockBackendError)[]> {
    const extend = (lease: LeaseRenewal) =>
      lease.kind === 'lock'
        ? this.extendLock(lease.id, lease.token, lease.ttl)
        : this.extendPermit(lease.id, lease.token, lease.ttl);
    if (leases.length === 1 || this.isCluster()) {
      // A cluster pipeline must stay in one slot; there ioredis batches the separate commands itself.
      return Promise.all(leases.map((lease) => extend(lease).catch((error: LockBackendError) => error)));
    }
    const pipeline = this.client.pipeline();
    for (const { kind, id, token, ttl } of leases) {
      const script = kind === 'lock' ? extendLockScript : extendPermitScript;
      pipeline.evalsha(script.sha, script.numberOfKeys, this.mainKey(kind, id), token, toMillis(ttl));
    }
    const replies = await this.run(leases[0].id, 'renewal pipeline', () => pipeline.exec());
    return Promise.all(
      leases.map(async (lease, i) => {
        const [error, answer] = replies?.[i] ?? [new Error('no reply'), null];
        if (error === null) return Number(answer) === 1;
        // The script cache was lost (restart, failover, SCRIPT FLUSH): this one goes alone, by EVAL.
        if (error.message.startsWith('NOSCRIPT')) return extend(lease).catch((failure: LockBackendError) => failure);
        return this.backendError(error, 'renewal', lease.id);
      }),
    );
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeUps.close();
    if (!this.options.ownsClient) return;
    if (this.client.status === 'ready') {
      // QUIT lets replies already on their way arrive; bounded, because a stopped server never answers.
      await this.withTimeout(this.client.quit(), 'QUIT', '').catch(() => undefined);
    }
    this.client.disconnect();
  }

  /**
   * Every Redis key one lock or semaphore touches, all in one cluster slot: its own key, its fence
   * counter, its line of fair waiters, the liveness of all its waiters, and for a semaphore the limit
   * each waiter asked for.
   */
  keysOf(kind: LeaseKind, id: string): string[] {
    const main = this.mainKey(kind, id);
    const keys = [main, `${main}:fence`, `${main}:line`, `${main}:alive`];
    // A semaphore's waiters each ask for their own limit.
    return kind === 'lock' ? keys : [...keys, `${main}:limits`];
  }

  /** The wake-up channel of a lock or semaphore, in the slot of its keys (for sharded pub/sub). */
  channelOf(kind: LeaseKind, id: string): string {
    return `${this.mainKey(kind, id)}:wake`;
  }

  /** Subscribed wake-up channels right now (they are dropped shortly after their last waiter left). */
  get subscribedChannels(): number {
    return this.wakeUps.subscribedChannels;
  }

  /** A lock's or permit's release; a lease it handed to `successor` is delivered to its turn here. */
  private async release(
    script: RedisScript,
    kind: LeaseKind,
    id: string,
    token: string,
    successor?: Successor,
  ): Promise<boolean> {
    const args = [token, this.handoverLease, this.channelOf(kind, id), this.options.fenceCounterTtl];
    if (successor !== undefined) args.push(successor.token, successor.jump ? '1' : '0');
    let handedFence = 0;
    try {
      // 0 or 1: whether it was held; [1, fence]: held, and handed to the successor.
      const reply = (await this.runScript(script, id, this.keysOf(kind, id), args)) as Integer | [Integer, Integer];
      if (!Array.isArray(reply)) return Number(reply) === 1;
      handedFence = Number(reply[1]);
      return Number(reply[0]) === 1;
    } finally {
      if (successor !== undefined) this.deliverToSuccessor(script, kind, id, successor, handedFence);
    }
  }

  /** Tells `successor` how the release that named it went; a lease it was handed goes to its turn. */
  private deliverToSuccessor(
    script: RedisScript,
    kind: LeaseKind,
    id: string,
    successor: Successor,
    fence: number,
  ): void {
    successor.passed(fence);
    if (fence > 0 && !this.wakeUps.handOver(this.channelOf(kind, id), successor.token, fence)) {
      // The successor stopped waiting while the release was on its way: nobody will use its lease.
      this.release(script, kind, id, successor.token).catch(() => undefined);
    }
  }

  private async attempt(
    script: RedisScript,
    kind: LeaseKind,
    id: string,
    args: (string | number)[],
    { fair, liveness, inLine }: AttemptOptions,
  ): Promise<Attempt> {
    args.push(
      fair ? '1' : '0',
      Math.ceil(liveness),
      inLine ? '1' : '0',
      this.handoverLease,
      this.channelOf(kind, id),
      this.options.fenceCounterTtl,
    );
    // The fence when granted; else [ms the holder's lease still runs, the last fence issued].
    const reply = (await this.runScript(script, id, this.keysOf(kind, id), args)) as Integer | [Integer, string];
    if (Array.isArray(reply)) return { fence: 0, retryIn: leaseRunsOutIn(reply[0]), lastFence: Number(reply[1]) };
    const fence = Number(reply);
    const { waitForReplicas } = this.options;
    if (waitForReplicas && !(await this.acknowledged(id, waitForReplicas))) {
      // Not on enough replicas in time: a failover could lose it, and a primary that was failed over
      // while it was away (it has no replicas left) grants what the new primary may have given
      // someone else. Given back: the caller's wait goes on.
      await this.release(kind === 'lock' ? releaseLockScript : releasePermitScript, kind, id, String(args[0]));
      const refusal = `fewer than ${waitForReplicas.replicas} replica(s) acknowledged it within ${waitForReplicas.timeout} ms (waitForReplicas)`;
      return { fence: 0, retryIn: 0, lastFence: fence, refusal };
    }
    return { fence, retryIn: 0 };
  }

  /**
   * Whether `replicas` replicas acknowledge, within `timeout` ms, every write of this connection so
   * far (WAIT): the lease just written by it, or, for one handed over by another connection, at
   * least that this primary still has its replicas.
   */
  private async acknowledged(
    id: string,
    { replicas, timeout }: { replicas: number; timeout: number },
  ): Promise<boolean> {
    const count = await this.run(id, 'WAIT', () => (this.client as Redis).wait(replicas, timeout)).catch(() => 0);
    return Number(count) >= replicas;
  }

  /** `<prefix>{<key>}` for a lock, `<prefix>sem:{<name>}` for a semaphore (see the class comment for braces). */
  private mainKey(kind: LeaseKind, id: string): string {
    return `${this.options.keyPrefix}${kind === 'lock' ? '' : 'sem:'}${hashTagged(id)}`;
  }

  private lockKey(key: string): string {
    return this.mainKey('lock', key);
  }

  private semaphoreKey(name: string): string {
    return this.mainKey('semaphore', name);
  }

  private isCluster(): boolean {
    return (this.client as { isCluster?: boolean }).isCluster === true;
  }

  private runScript(chosen: RedisScript, key: string, keys: string[], args: (string | number)[]): Promise<unknown> {
    const script = this.wakeUps.sharded ? publishingSharded(chosen) : chosen;
    return this.run(key, script.name, (timedOut) =>
      this.client.evalsha(script.sha, script.numberOfKeys, ...keys, ...args).catch((error: unknown) => {
        // The server lost its script cache (restart, failover, SCRIPT FLUSH): EVAL runs and caches it again —
        // unless the caller already gave up on this command: resent that late, it would come after the
        // caller's next commands (a release sent again after a new lock with the same token).
        if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT') || timedOut()) throw error;
        return this.client.eval(script.source, script.numberOfKeys, ...keys, ...args);
      }),
    );
  }

  /** Runs one store operation: a closed store, a timeout and every client error become `LockBackendError`. */
  private async run<T>(key: string, operation: string, command: (timedOut: () => boolean) => Promise<T>): Promise<T> {
    if (this.closed) throw new LockBackendError('The Redis lock store is closed', key, { retryable: false });
    this.shareWrite();
    const deadline = performance.now() + this.options.commandTimeout;
    try {
      return await this.withTimeout(
        command(() => performance.now() >= deadline),
        operation,
        key,
      );
    } catch (error) {
      throw this.backendError(error, operation, key);
    }
  }

  /**
   * Commands sent in the same tick leave in one write: the socket is corked until the next tick.
   * Concurrent callers then share a syscall here and a read on the server; a lone command waits
   * for nothing but the end of the current tick. (A cluster client has a socket per node: not corked.)
   */
  private shareWrite(): void {
    if (this.corked || this.isCluster()) return;
    const { stream } = this.client as Redis;
    if (stream === undefined || this.client.status !== 'ready') return;
    stream.cork();
    this.corked = true;
    process.nextTick(() => {
      this.corked = false;
      stream.uncork();
    });
  }

  /** `BACKEND_ERROR` for a reply error that would only come again, else `BACKEND_UNAVAILABLE` (see backend-messages.ts). */
  private backendError(error: unknown, operation: string, key: string): LockBackendError {
    return backendErrorOf(error, operation, key);
  }

  // Inspection and operators' tools.

  async inspectLock(key: string): Promise<LockInspection> {
    const keys = this.keysOf('lock', key).slice(0, 2);
    const [pttl, fence] = (await this.runScript(inspectLockScript, key, keys, [])) as [number, string];
    // -2: no lock; -1: a key without expiry, which nest-lock never writes (a lease that never runs out).
    if (Number(pttl) === -2) return { held: false, ttl: 0, ...(fence === '' ? {} : { fence: Number(fence) }) };
    const ttl = Number(pttl) === -1 ? Number.POSITIVE_INFINITY : leaseRunsOutIn(pttl);
    return { held: true, ttl, ...(fence === '' ? {} : { fence: Number(fence) }) };
  }

  async listPermits(name: string): Promise<number[]> {
    const remaining = (await this.runScript(listPermitsScript, name, [this.semaphoreKey(name)], [])) as number[];
    return remaining.map(Number);
  }

  async forceReleaseLock(key: string): Promise<boolean> {
    const args = [this.handoverLease, this.channelOf('lock', key), this.options.fenceCounterTtl];
    return Number(await this.runScript(forceReleaseLockScript, key, this.keysOf('lock', key), args)) === 1;
  }

  private withTimeout<T>(command: Promise<T>, operation: string, key: string): Promise<T> {
    return this.deadlines.bound(command, () => unansweredError(operation, key, this.options.commandTimeout));
  }
}

/**
 * Bounds every command in flight by the same timeout with one timer for all of them rather than
 * one each: commands are bounded in the order they were sent, so their deadlines come in that
 * order too, and the timer only ever waits for the oldest.
 */
class CommandDeadlines {
  private readonly inFlight = new Set<{ deadline: number; expire(): void }>();
  private timer?: NodeJS.Timeout;

  constructor(private readonly timeout: number) {}

  /** `command`, or the error `timedOut()` makes if it has not settled within the timeout. */
  bound<T>(command: Promise<T>, timedOut: () => Error): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry = { deadline: performance.now() + this.timeout, expire: () => reject(timedOut()) };
      this.inFlight.add(entry);
      // unref: a command in flight holds its socket, which keeps the process alive anyway.
      this.timer ??= setTimeout(() => this.expireDue(), this.timeout).unref();
      // Its late rejection after a timeout is handled here, never unhandled.
      command.then(
        (value) => {
          this.inFlight.delete(entry);
          resolve(value);
        },
        (error: unknown) => {
          this.inFlight.delete(entry);
          reject(error);
        },
      );
    });
  }

  private expireDue(): void {
    this.timer = undefined;
    const now = performance.now();
    for (const entry of this.inFlight) {
      if (entry.deadline > now) {
        this.timer = setTimeout(() => this.expireDue(), entry.deadline - now).unref();
        return;
      }
      this.inFlight.delete(entry);
      entry.expire();
    }
  }
}

/** An integer reply: a number, or a string when the client was made with ioredis's `stringNumbers`. */
type Integer = number | string;
