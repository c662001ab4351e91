import type { Cluster, Redis } from 'ioredis';
import { LockBackendError } from '../../lock.errors.js';
import type {
  Attempt,
  AttemptOptions,
  Handover,
  Inspection,
  LockStore,
  LeaseExtension,
  ReleaseOptions,
  SharedValues,
  Successor,
  TakenIfFree,
  Turn,
} from '../store.js';
import type { StoreKind } from '../store-kind.js';
import { backendErrorOf, misconfiguredError, unansweredError } from './backend-messages.js';
import { CommandDeadlines } from './command-deadlines.js';
import { type ConnectionState, connectionStateOf } from './connection-state.js';
import { hashTagged, slotOrder, toMillis } from './key-layout.js';
import {
  acquireAllIfFreeArgv,
  acquireArgv,
  extendArgv,
  fenceArgv,
  forceReleaseArgv,
  leaseKeysOf,
  NO_ARGV,
  releaseArgv,
  type ScriptArg,
  type SuccessorArgs,
  wakeChannelOf,
} from './redis-layout.js';
import { type Integer, leaseRunsOutIn } from './replies.js';
import type { CompiledScript, RedisScript } from './script.js';
import { WakeUps } from './wake-ups.js';

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
 * Leases of every kind on one Redis (a server, Sentinel's primary, or a Cluster): the kind's Lua
 * scripts (`StoreKind.redis`), called by SHA, bounded by `commandTimeout`, with wake-ups on a
 * channel per lease.
 *
 * Key layout: the lease `id` of a kind lives at `<prefix><namespace>{<id>}` (the lock
 * `lock:{order:42}`, the semaphore `lock:sem:{reports}`), its companions at `…:<suffix>`, its
 * wake-up channel at `…:wake`: one hash tag, one cluster slot. A key with a brace, or longer than
 * 200 bytes, gets a digest as its tag (see `key-layout.ts`).
 */
export class RedisStore implements LockStore {
  private closed = false;
  /** The client's socket is corked until the end of this tick (see `shareWrite`). */
  private corked = false;
  private readonly wakeUps: WakeUps;
  private readonly deadlines: CommandDeadlines;
  private readonly connection: ConnectionState;
  /**
   * A lease this store's releases hand to a waiter lasts this long until the waiter extends it to its
   * own ttl: long enough for the message and the extension to arrive, short enough that a lease handed
   * to a waiter that is gone meanwhile returns to the line soon. Whole ms: it goes to PX. A waiter of
   * another process, whose own may differ, is told the lease as written (`Handover.lease`).
   */
  readonly handoverLease: number;
  readonly keepsLine = true;

  constructor(
    private readonly client: Redis | Cluster,
    private readonly options: RedisStoreOptions,
  ) {
    this.wakeUps = new WakeUps(client);
    this.deadlines = new CommandDeadlines(options.commandTimeout);
    this.connection = connectionStateOf(client);
    this.handoverLease = Math.ceil(Math.max(1_000, 2 * options.commandTimeout));
  }

  async acquire<Request>(
    kind: StoreKind<Request>,
    id: string,
    request: Request,
    token: string,
    ttl: number,
    { fair, liveness, inLine, joinOnlyBehindOthers = false, signal }: AttemptOptions,
  ): Promise<Attempt> {
    const lease = this.mainKey(kind, id);
    const argv = acquireArgv({
      token,
      ttl: toMillis(ttl),
      fair,
      liveness: Math.ceil(liveness),
      inLine,
      handoverMs: this.handoverLease,
      channel: wakeChannelOf(lease),
      fenceCounterTtl: this.options.fenceCounterTtl,
      process: this.wakeUps.process,
      joinOnlyBehindOthers,
      request: kind.redis.requestArgs(request),
    });
    // 1 when granted; else [ms the holder's lease still runs, the last fence issued, 1 if it stayed out
    // of an empty line].
    const reply = (await this.runScript(kind, 'acquire', id, kind.redis.acquire, argv, signal, lease)) as
      Integer | [Integer, string, Integer?];
    if (Array.isArray(reply)) {
      const refused = { granted: false, retryIn: leaseRunsOutIn(reply[0]), lastFence: Number(reply[1]) };
      return reply[2] === 1 ? { ...refused, nobodyInLine: true } : refused;
    }
    return this.granted(kind, id, token);
  }

  /** At `<prefix>value:{<name>}`, with PX: every value runs out. */
  readonly values: SharedValues = {
    get: async (name) =>
      (await this.run(name, `read the value "${name}"`, () => this.client.get(this.valueKey(name)))) ?? undefined,
    set: async (name, value, ttl) => {
      await this.run(name, `write the value "${name}"`, () =>
        this.client.set(this.valueKey(name), value, 'PX', toMillis(ttl)),
      );
    },
    delete: async (name) => {
      await this.run(name, `delete the value "${name}"`, () => this.client.del(this.valueKey(name)));
    },
  };

  watchConnection(onLost: () => void): () => void {
    const lost = (): void => onLost();
    this.client.on('close', lost);
    return () => void this.client.off('close', lost);
  }

  /** `SET <lease> <token> NX PX <ttl>`, for a kind whose lease is its owner's token. */
  async acquireIfFree<Request>(
    kind: StoreKind<Request>,
    id: string,
    request: Request,
    token: string,
    ttl: number,
  ): Promise<TakenIfFree | undefined> {
    if (!kind.redis.takenBySetNx(request)) return undefined;
    const lease = this.mainKey(kind, id);
    const answer = await this.run(
      id,
      () => kind.purposes.acquire(id),
      () => this.client.set(lease, token, 'PX', toMillis(ttl), 'NX'),
    );
    // The lease key exists only while someone holds it (a writer, or readers).
    if (answer !== 'OK') return 'held';
    if (this.options.waitForReplicas === undefined) return 'taken';
    return (await this.granted(kind, id, token)).granted ? 'taken' : 'not taken';
  }

  /** Several free leases of one slot by the kind's `acquireAllIfFree` script: all or none. */
  async acquireAllIfFree<Request>(
    kind: StoreKind<Request>,
    ids: readonly string[],
    request: Request,
    token: string,
    ttl: number,
    signal?: AbortSignal,
  ): Promise<boolean | undefined> {
    const script = kind.redis.acquireAllIfFree;
    if (script === undefined || !kind.redis.takenBySetNx(request)) return undefined;
    const keys = ids.flatMap((id) => this.keysOf(kind, id, script.numberOfKeys));
    const all = ids.join('", "');
    const purpose = () => kind.purposes.acquire(all);
    // The caller's signal: after an abort the script is not sent again on NOSCRIPT (see `runScript`).
    const argv = acquireAllIfFreeArgv({ token, ttl: toMillis(ttl) });
    const taken = await this.evalScript(ids[0], purpose, script, keys, argv, signal);
    if (Number(taken) !== 1) return false;
    const { waitForReplicas } = this.options;
    if (waitForReplicas === undefined || (await this.acknowledged(ids[0], waitForReplicas))) return true;
    await Promise.all(ids.map((id) => this.release(kind, id, token)));
    return false;
  }

  /**
   * By hash slot, then by key (the same order on one server and on a Cluster, so that processes of both
   * kinds of one deployment agree); one run on one server, whose one step reaches every key, and a run
   * per slot on a Cluster.
   */
  keyOrder(ids: readonly string[]): string[][] {
    return slotOrder(ids, this.isCluster());
  }

  /** A release; a lease it handed to `successor` is delivered to its turn here. */
  async release(kind: StoreKind, id: string, token: string, options?: ReleaseOptions): Promise<boolean> {
    if (options?.undo) return this.undo(kind, id, token);
    const successor = options?.successor;
    const lease = this.mainKey(kind, id);
    const argv = this.releaseArgvOf(
      lease,
      token,
      successor && {
        token: successor.token,
        jump: successor.jump,
        ttl: toMillis(successor.ttl),
        request: kind.redis.requestArgs(successor.request),
      },
    );
    let handover: Handover | null = null;
    let nobodyElseInLine = false;
    try {
      // 0 or 1: whether it was held; [that, PASSED_WITHOUT_FENCE, ms, 1 if nobody else waits in line?]:
      // handed to the successor for ms.
      const reply = (await this.runScript(kind, 'release', id, kind.redis.release, argv, undefined, lease)) as
        Integer | [Integer, Integer, Integer, Integer?];
      if (!Array.isArray(reply)) return Number(reply) === 1;
      handover = { fence: Number(reply[1]), lease: Number(reply[2]) };
      nobodyElseInLine = reply[3] === 1;
      return Number(reply[0]) === 1;
    } finally {
      if (successor !== undefined) this.deliverToSuccessor(kind, id, successor, handover, nobodyElseInLine);
    }
  }

  /**
   * The release script sent by its text (EVAL), never by SHA: it follows the attempt it undoes on the
   * same connection, and a server that lost its script cache meanwhile (a restart, a failover, SCRIPT
   * FLUSH) runs it all the same — by SHA it would answer NOSCRIPT, too late to be sent again, and the
   * attempt (a plain SET NX needs no script) would keep the lease for its whole ttl.
   */
  private async undo(kind: StoreKind, id: string, token: string): Promise<boolean> {
    const script = kind.redis.release;
    const { source } = this.compiled(script);
    const lease = this.mainKey(kind, id);
    const keys = leaseKeysOf(lease, kind.redis.companions, script.numberOfKeys);
    const argv = this.releaseArgvOf(lease, token);
    const reply = await this.run(
      id,
      () => kind.purposes.release(id),
      () => this.client.eval(source, script.numberOfKeys, ...keys, ...argv),
    );
    return Number(reply) === 1;
  }

  async extend(kind: StoreKind, id: string, token: string, ttl: number): Promise<boolean> {
    const argv = extendArgv({ token, ttl: toMillis(ttl) });
    return Number(await this.runScript(kind, 'extend', id, kind.redis.extend, argv)) === 1;
  }

  async fence(kind: StoreKind, id: string, token: string): Promise<number> {
    const argv = fenceArgv({ token, fenceCounterTtl: this.options.fenceCounterTtl });
    return Number(await this.runScript(kind, 'fence', id, kind.redis.fence, argv));
  }

  async extendAll(extensions: readonly LeaseExtension[]): Promise<(boolean | LockBackendError)[]> {
    const extend = ({ kind, id, token, ttl }: LeaseExtension) => this.extend(kind, id, token, ttl);
    if (extensions.length === 1 || this.isCluster()) {
      // A cluster pipeline must stay in one slot; there ioredis batches the separate commands itself.
      return Promise.all(extensions.map((extension) => extend(extension).catch((error: LockBackendError) => error)));
    }
    const pipeline = this.client.pipeline();
    for (const { kind, id, token, ttl } of extensions) {
      const script = this.compiled(kind.redis.extend);
      const { numberOfKeys } = kind.redis.extend;
      const argv = extendArgv({ token, ttl: toMillis(ttl) });
      pipeline.evalsha(script.sha, numberOfKeys, ...this.keysOf(kind, id, numberOfKeys), ...argv);
    }
    const first = extensions[0];
    const replies = await this.run(first.id, `renew the leases of "${first.id}" and others`, () => pipeline.exec());
    return Promise.all(
      extensions.map(async (extension, i) => {
        const [error, answer] = replies?.[i] ?? [new Error('no reply'), null];
        if (error === null) return Number(answer) === 1;
        // The script cache was lost (restart, failover, SCRIPT FLUSH): this one goes alone, by EVAL.
        if (error.message.startsWith('NOSCRIPT'))
          return extend(extension).catch((failure: LockBackendError) => failure);
        return backendErrorOf(error, extension.kind.purposes.extend(extension.id), extension.id);
      }),
    );
  }

  openTurn(kind: StoreKind, id: string, token: string): Turn {
    const turn = this.wakeUps.openTurn(this.channelOf(kind, id), token);
    const { waitForReplicas } = this.options;
    if (!waitForReplicas) return turn;
    return {
      close: () => turn.close(),
      // A lease handed over counts only once the replicas have it too (see `acquire`).
      wait: async (wait, signal) => {
        const handover = await turn.wait(wait, signal);
        if (handover === null || (await this.acknowledged(id, waitForReplicas))) return handover;
        await this.release(kind, id, token).catch(() => undefined);
        return null;
      },
    };
  }

  async count(kind: StoreKind, id: string): Promise<number> {
    return Number(await this.runScript(kind, 'count', id, kind.redis.count, NO_ARGV));
  }

  async inspect(kind: StoreKind, id: string): Promise<Inspection> {
    return kind.redis.readInspection(await this.runScript(kind, 'inspect', id, kind.redis.inspect, NO_ARGV));
  }

  async forceRelease(kind: StoreKind, id: string): Promise<boolean> {
    const script = kind.redis.forceRelease;
    if (script === undefined) throw new Error(`${kind.name} leases have no forced release`);
    const argv = forceReleaseArgv({
      handoverMs: this.handoverLease,
      channel: this.channelOf(kind, id),
      fenceCounterTtl: this.options.fenceCounterTtl,
    });
    return Number(await this.runScript(kind, 'forceRelease', id, script, argv)) === 1;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeUps.close();
    if (!this.options.ownsClient) return;
    this.connection.stop();
    if (this.client.status === 'ready') {
      // QUIT lets replies already on their way arrive; bounded, because a stopped server never answers.
      await this.waitAtMost(this.client.quit());
    }
    this.client.disconnect();
  }

  /**
   * Every Redis key of the lease `id` of `kind`, all in one cluster slot: the lease, then its
   * companions (only the first `count` keys, when a script takes no more).
   */
  keysOf(kind: StoreKind, id: string, count = 1 + kind.redis.companions.length): string[] {
    return leaseKeysOf(this.mainKey(kind, id), kind.redis.companions, count);
  }

  /**
   * The wake-up channel of a lease, in the slot of its keys (for sharded pub/sub): each process
   * listens on `<channel>:<process>`, where releases tell its own waiters (see `WakeUps`).
   */
  channelOf(kind: StoreKind, id: string): string {
    return wakeChannelOf(this.mainKey(kind, id));
  }

  /** The release script's ARGV for `token` on the lease at key `lease`, with its successor if it names one. */
  private releaseArgvOf(lease: string, token: string, successor?: SuccessorArgs): ScriptArg[] {
    return releaseArgv({
      token,
      handoverMs: this.handoverLease,
      channel: wakeChannelOf(lease),
      fenceCounterTtl: this.options.fenceCounterTtl,
      successor,
    });
  }

  /** The token holds the lease now: granted, once enough replicas have it when the module asks for that. */
  private async granted(kind: StoreKind, id: string, token: string): Promise<Attempt> {
    const { waitForReplicas } = this.options;
    if (waitForReplicas && !(await this.acknowledged(id, waitForReplicas))) {
      // Not on enough replicas in time: a failover could lose it, and a primary that was failed over
      // while it was away (it has no replicas left) grants what the new primary may have given
      // someone else. Given back: the caller's wait goes on. A handover message that came before this
      // attempt is not taken (no last fence can say which came later): the next attempt finds out.
      await this.release(kind, id, token);
      const refusal = `fewer than ${waitForReplicas.replicas} replica(s) acknowledged it within ${waitForReplicas.timeout} ms (waitForReplicas)`;
      return { granted: false, retryIn: 0, lastFence: Number.POSITIVE_INFINITY, refusal };
    }
    return { granted: true, retryIn: 0 };
  }

  /** Tells `successor` how the release that named it went; a lease it was handed goes to its turn. */
  private deliverToSuccessor(
    kind: StoreKind,
    id: string,
    successor: Successor,
    handover: Handover | null,
    nobodyElseInLine: boolean,
  ): void {
    successor.passed(handover?.fence ?? 0, nobodyElseInLine);
    if (handover !== null && !this.wakeUps.handOver(this.channelOf(kind, id), successor.token, handover)) {
      // The successor stopped waiting while the release was on its way: nobody will use its lease.
      this.release(kind, id, successor.token).catch(() => undefined);
    }
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
    const count = await this.run(id, `WAIT "${id}"`, () => (this.client as Redis).wait(replicas, timeout)).catch(
      () => 0,
    );
    return Number(count) >= replicas;
  }

  /** `<prefix><namespace>{<id>}` (see the class comment for braces and long ids). */
  private mainKey(kind: StoreKind, id: string): string {
    return `${this.options.keyPrefix}${kind.redis.namespace}${hashTagged(id)}`;
  }

  private valueKey(name: string): string {
    return `${this.options.keyPrefix}value:${hashTagged(name)}`;
  }

  private isCluster(): boolean {
    return (this.client as { isCluster?: boolean }).isCluster === true;
  }

  /** The variant of `script` for this store's wake-up channels. */
  private compiled(script: RedisScript): CompiledScript {
    return this.wakeUps.sharded ? script.sharded : script.plain;
  }

  /**
   * Runs one of the kind's scripts on the lease `id` (whose key is `lease`), with the first `numberOfKeys`
   * of its keys and `argv` as the operation's builder wrote them.
   */
  private runScript(
    kind: StoreKind,
    operation: keyof StoreKind['purposes'],
    id: string,
    script: RedisScript,
    argv: readonly ScriptArg[],
    signal?: AbortSignal,
    lease = this.mainKey(kind, id),
  ): Promise<unknown> {
    const keys = leaseKeysOf(lease, kind.redis.companions, script.numberOfKeys);
    return this.evalScript(id, () => kind.purposes[operation](id), script, keys, argv, signal);
  }

  /** Runs `script` with `keys` and `argv`, by SHA, and by its text when the server lost it. */
  private evalScript(
    id: string,
    purpose: () => string,
    script: RedisScript,
    keys: readonly string[],
    argv: readonly ScriptArg[],
    signal?: AbortSignal,
  ): Promise<unknown> {
    const { sha, source } = this.compiled(script);
    const numberOfKeys = keys.length;
    return this.run(
      id,
      purpose,
      () => this.client.evalsha(sha, numberOfKeys, ...keys, ...argv),
      (error) => {
        // The server lost its script cache (restart, failover, SCRIPT FLUSH): EVAL runs and caches it again —
        // unless the caller gave up on this command (its signal aborted; `run` asks this only before its
        // deadline): resent that late, it would come after the caller's next commands (a release sent again
        // after a new lock with the same token; an attempt sent again after the release that gave it up).
        if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT') || signal?.aborted) return undefined;
        return this.client.eval(source, numberOfKeys, ...keys, ...argv);
      },
    );
  }

  /**
   * Runs one store operation: a closed store, a timeout and every client error become
   * `LockBackendError`, saying what could not be done (`purpose`, a phrase made only for an error).
   * `resend`, asked when the command failed before its deadline, may send it again another way (a
   * script by its text): its answer is the command's. One promise per command on the way: every lock takes
   * this path, and the three it took before (an async function awaiting a deadline's promise around the
   * command's, and one more per script call) were 4 % of an uncontended lock + unlock.
   */
  private run<T>(
    id: string,
    purpose: string | (() => string),
    send: () => Promise<T>,
    resend?: (error: unknown) => Promise<T> | undefined,
  ): Promise<T> {
    if (this.closed) {
      return Promise.reject(new LockBackendError('The Redis lock store is closed', id, { retryable: false }));
    }
    // Refused for its password, user or database: every command would be; none waits for that.
    const { misconfiguration } = this.connection;
    if (misconfiguration !== undefined)
      return Promise.reject(misconfiguredError(misconfiguration, phrase(purpose), id));
    this.shareWrite();
    return new Promise<T>((resolve, reject) => {
      const fail = (error: unknown) => {
        this.connection.commandFailed(error);
        reject(backendErrorOf(error, phrase(purpose), id, this.connection));
      };
      const command = this.deadlines.sent(() => {
        this.connection.commandUnanswered(this.options.commandTimeout);
        fail(unansweredError(phrase(purpose), id, this.options.commandTimeout));
      });
      // An answer or failure after the deadline changes nothing: the caller was told it timed out.
      const answered = (answer: T) => {
        if (!this.deadlines.settled(command)) return;
        this.connection.commandAnswered();
        resolve(answer);
      };
      const failed = (error: unknown) => {
        const again = performance.now() < command.deadline ? resend?.(error) : undefined;
        if (again !== undefined) return void again.then(answered, failed);
        if (this.deadlines.settled(command)) fail(error);
      };
      try {
        send().then(answered, failed);
      } catch (error) {
        failed(error);
      }
    });
  }

  /**
   * Commands sent in the same tick leave in one write: the socket is corked until the next tick.
   * Concurrent callers then share a syscall here and a read on the server. A command sent while no
   * other awaits its answer (a caller alone, or serial) goes out at once: corked, it would pay for a
   * buffered write and a tick with nobody to share them. (A cluster client has a socket per node: not
   * corked.)
   */
  private shareWrite(): void {
    if (this.corked || this.deadlines.pending === 0 || this.isCluster()) return;
    const { stream } = this.client as Redis;
    if (stream === undefined || this.client.status !== 'ready') return;
    stream.cork();
    this.corked = true;
    process.nextTick(() => {
      this.corked = false;
      stream.uncork();
    });
  }

  /** Waits for `command` within the command timeout, whatever it comes to. */
  private waitAtMost(command: Promise<unknown>): Promise<void> {
    return new Promise<void>((resolve) => {
      const inFlight = this.deadlines.sent(resolve);
      const settle = () => {
        this.deadlines.settled(inFlight);
        resolve();
      };
      command.then(settle, settle);
    });
  }
}

function phrase(purpose: string | (() => string)): string {
  return typeof purpose === 'string' ? purpose : purpose();
}
