import type { Redis } from 'ioredis';
import { InvalidArgumentError, LockBackendError } from '../../lock.errors.js';
import { driftMargin } from '../../options/durations.js';
import { sleep } from '../../util/sleep.js';
import { hashTagged, toMillis } from '../redis/key-layout.js';
import { backendErrorOf, misconfiguredError } from '../redis/backend-messages.js';
import { connectionStateOf } from '../redis/connection-state.js';
import { leaseRunsOutIn } from '../redis/replies.js';
import type { ScriptCall } from '../redis/script.js';
import {
  redlockAcquire,
  redlockExtend,
  redlockFence,
  redlockForceRelease,
  redlockInspect,
  type RedlockKeys,
  redlockMark,
  redlockRaiseFence,
  redlockRelease,
  redlockSeed,
} from './redlock.scripts.js';
import type { Attempt, Inspection, LockStore } from '../store.js';
import type { StoreKind } from '../store-kind.js';

export interface RedlockStoreOptions {
  /** Prefix of every key, e.g. `lock:`. */
  keyPrefix: string;
  /** Longest time one command may take on one node. */
  commandTimeout: number;
  /** Nodes that must grant a lease (> half of the nodes). */
  quorum: number;
  /** Validity = ttl − elapsed − (ttl × driftFactor + 2 ms). */
  driftFactor: number;
  /** How long a node seen for the first time stays young (no grants, no renewal votes); the longest ttl. 0: off. */
  quarantine: number;
  /** Per node, in the order of `clients`: whether `close()` quits it (the module made it). */
  ownsClients: readonly boolean[];
  /** How long a fence counter outlives the last fence drawn from it (ms). */
  fenceCounterTtl: number;
}

/** One node's answer, or its error. */
type NodeResult<T> = { ok: true; value: T } | { ok: false; error: LockBackendError };

/**
 * Redlock (antirez) over N independent Redis masters, with nest-lock's additions:
 *
 * - An attempt runs on every node in parallel, each bounded by `nodeTimeout(ttl)`; it is granted with
 *   at least `quorum` mature servers taking the lock (counted by run_id: one server reached under two
 *   names counts once) AND a positive validity `ttl − elapsed − drift`.
 *   Otherwise it is released on every node (a lost reply may have taken the key).
 * - Fences, drawn when the holder asks (`fence`): each node where the token holds the lock draws one
 *   from its own counter (the single store's rule); the lease's fence is the largest, written back
 *   (raised, never lowered) on a quorum before it is returned: any later quorum shares a node with
 *   that one, so it draws a larger fence (the **max rule**).
 * - A node nest-lock sees for the first time (its birth marker is missing: a restart that came back
 *   empty, a FLUSHALL) is young for `quarantine` ms: it neither grants nor counts for a renewal, since
 *   the leases it forgot may still be valid (the Redlock paper's delayed restart, done by the client).
 * - No fair line and no wake-ups: waiters poll with the backoff step; `fair` is ignored.
 * - Token leases only (a lock: `StoreKind.redlock`): any other kind (a semaphore) is refused with
 *   `InvalidArgumentError` on every call, with the kind's own reason.
 *
 * Key layout per node: as `RedisStore`'s (`<prefix><namespace>{<id>}` and its `:fence`), plus the
 * node's birth marker `<prefix>redlock:born`.
 */
export class RedlockStore implements LockStore {
  private closed = false;
  private readonly markerKey: string;
  private readonly onReady: (() => void)[] = [];

  constructor(
    private readonly clients: readonly Redis[],
    private readonly options: RedlockStoreOptions,
  ) {
    this.markerKey = `${options.keyPrefix}redlock:born`;
    // A node's quarantine starts when the client (re)connects, not at the first lock: a restarted master
    // is marked as soon as it is back, and the scripts mark one that was flushed without a reconnect.
    clients.forEach((client) => {
      const marking = redlockMark({ marker: this.markerKey });
      const mark = () => void this.evalScript(client, marking).catch(() => undefined);
      this.onReady.push(mark);
      client.on('ready', mark);
      if (client.status === 'ready') mark();
    });
  }

  /** Redlock's drift: `ttl × driftFactor + 2 ms`. */
  clockDrift(ttl: number): number {
    return driftMargin(ttl, this.options.driftFactor);
  }

  /**
   * How long one node may take to answer one command of an attempt or renewal of `ttl` ms: short
   * beside the lease, so that a dead node costs a small part of the validity —
   * `min(commandTimeout, max(ttl / 10, 20 ms))`.
   */
  nodeTimeout(ttl: number): number {
    return Math.min(this.options.commandTimeout, Math.max(ttl / 10, 20));
  }

  async acquire<Request>(
    kind: StoreKind<Request>,
    id: string,
    request: Request,
    token: string,
    ttl: number,
  ): Promise<Attempt> {
    const refusal = kind.redlockRefusal?.(request);
    if (refusal !== undefined) throw new InvalidArgumentError('mode', refusal);
    const call = redlockAcquire(this.nodeKeysOf(kind, id), {
      token,
      ttl: toMillis(ttl),
      quarantine: this.options.quarantine,
    });
    const { start, timeout, results } = await this.onAllWithin(kind, id, 'acquire', ttl, call);
    // Servers (by run_id), not nodes: one server listed under two names must not count twice.
    const grantedBy = new Set<string>();
    let young = 0;
    let retryIn = Infinity;
    let answered = 0;
    for (const result of results) {
      if (!result.ok) continue;
      answered++;
      const [took, pttl, mature, runId] = result.value as [number, number, number, string];
      if (Number(took) === 1) {
        if (Number(mature) === 1) grantedBy.add(runId);
        else young++;
      } else {
        const runsOutIn = leaseRunsOutIn(pttl);
        if (runsOutIn > 0) retryIn = Math.min(retryIn, runsOutIn);
      }
    }
    const { quorum } = this.options;
    if (grantedBy.size >= quorum && this.validity(start, ttl) > 0) return { granted: true, retryIn: 0 };
    // Not granted: whatever was taken goes back, on every node (a lost reply may have taken it).
    await this.releaseOnAll(kind, id, token, timeout);
    if (answered < quorum) throw this.noQuorum(id, kind.purposes.acquire(id), results);
    return {
      granted: false,
      retryIn: Number.isFinite(retryIn) ? retryIn : 0,
      ...this.refusalOf(grantedBy.size, young, start, ttl),
    };
  }

  /**
   * The max rule: each node where the token holds the lock draws a fence from its own counter; the
   * lease's fence is the largest, raised on a quorum (never lowered) before it is returned — any later
   * holder's quorum shares a node with that one, so it draws a larger fence. Needs the token to hold
   * the lock on a quorum of mature nodes, and a quorum still to hold it once the fence is raised
   * (the raise must land before the lease ends, before any later holder draws); else 0.
   */
  async fence(kind: StoreKind, id: string, token: string): Promise<number> {
    this.checkKind(kind);
    const purpose = kind.purposes.fence(id);
    const start = performance.now();
    const { commandTimeout, quorum, fenceCounterTtl, quarantine } = this.options;
    const keys = this.nodeKeysOf(kind, id);
    const drawing = redlockFence(keys, { token, fenceCounterTtl, quarantine });
    const drawn = await this.onAll(id, purpose, commandTimeout, drawing);
    const heldBy = new Set<string>();
    const leaseLeft: number[] = [];
    let fence = 0n;
    for (const result of drawn) {
      if (!result.ok) continue;
      const [nodeFence, pttl, mature, runId] = result.value as [string, number, number, string];
      if (nodeFence === '0') continue;
      if (BigInt(nodeFence) > fence) fence = BigInt(nodeFence);
      if (Number(mature) === 1 && !heldBy.has(runId)) {
        heldBy.add(runId);
        leaseLeft.push(leaseRunsOutIn(pttl));
      }
    }
    const failed = drawn.filter((result) => !result.ok).length;
    if (heldBy.size < quorum) {
      if (heldBy.size + failed >= quorum) throw this.noQuorum(id, purpose, drawn);
      return 0;
    }
    const raising = redlockRaiseFence(keys, { fence: fence.toString(), fenceCounterTtl });
    const raised = await this.onAll(id, purpose, commandTimeout, raising);
    if (raised.filter((result) => result.ok).length < quorum) throw this.noQuorum(id, purpose, raised);
    // How long a quorum still held it when the fences were drawn (the quorum-th longest lease).
    const quorumLease = leaseLeft.sort((a, b) => b - a)[quorum - 1];
    return this.validity(start, quorumLease) > 0 ? Number(fence) : 0;
  }

  /** Why an attempt no other owner blocked was refused: masters in quarantine, or a quorum that answered too late. */
  private refusalOf(granted: number, young: number, start: number, ttl: number): { refusal?: string } {
    const { quorum, quarantine } = this.options;
    if (granted < quorum && granted + young >= quorum) {
      return {
        refusal: `only ${granted} of the ${this.clients.length} Redlock masters may grant it (quorum ${quorum}); ${young} restarted or were seen for the first time less than redlock.quarantine (${quarantine} ms) ago`,
      };
    }
    if (granted >= quorum) {
      return {
        refusal: `a quorum of Redlock masters granted it, but not within its validity (ttl ${ttl} ms − ${Math.round(performance.now() - start)} ms elapsed − drift ≤ 0)`,
      };
    }
    return {};
  }

  /**
   * Nothing is handed over across independent masters: a `successor` is left alone (the core tells it
   * nothing was passed). An undo goes as any release does: each node's script is sent again by its text
   * after NOSCRIPT within the node's timeout.
   */
  async release(kind: StoreKind, id: string, token: string): Promise<boolean> {
    this.checkKind(kind);
    this.checkOpen(id);
    const results = await this.releaseOnAll(kind, id, token, this.options.commandTimeout);
    const released = results.filter((result) => result.ok && Number(result.value) === 1).length;
    const failed = results.filter((result) => !result.ok).length;
    // Not ours on a quorum of the nodes that answered, and the silent ones could change that: unknown.
    if (released < this.options.quorum && released + failed >= this.options.quorum) {
      throw this.noQuorum(id, kind.purposes.release(id), results);
    }
    return released >= this.options.quorum;
  }

  async extend(kind: StoreKind, id: string, token: string, ttl: number): Promise<boolean> {
    const keys = this.nodeKeysOf(kind, id);
    const call = redlockExtend(keys, { token, ttl: toMillis(ttl), quarantine: this.options.quarantine });
    const { purpose, start, timeout, results } = await this.onAllWithin(kind, id, 'extend', ttl, call);
    const renewedBy = new Set<string>();
    let failed = 0;
    const free: number[] = [];
    results.forEach((result, i) => {
      if (!result.ok) return void failed++;
      const [state, mature, runId] = result.value as [number, number, string];
      if (Number(state) === 1 && Number(mature) === 1) renewedBy.add(runId);
      if (Number(state) === 0) free.push(i);
    });
    const { quorum } = this.options;
    const renewed = renewedBy.size;
    if (renewed < quorum) {
      if (renewed + failed >= quorum) throw this.noQuorum(id, purpose, results);
      return false;
    }
    if (this.validity(start, ttl) <= 0) {
      // Renewed, but too late to vouch for it: the watchdog tries again while the lease may still be ours.
      throw new LockBackendError(
        `The Redlock nodes answered too late (after ${Math.round(performance.now() - start)} ms): could not ${purpose}`,
        id,
      );
    }
    // Nodes that lost the lock while the quorum kept it get it back, so that it survives the next failure.
    const seeding = redlockSeed(keys, { token, ttl: toMillis(ttl) });
    await Promise.all(free.map((i) => this.onNode(this.clients[i], id, purpose, timeout, seeding)));
    return true;
  }

  /**
   * Held when one token holds the lease on at least a quorum of the nodes; its ttl is how long a
   * quorum still holds it (the quorum-th longest PTTL), `fence` the largest counter of the nodes.
   * Needs a quorum of nodes to answer.
   */
  async inspect(kind: StoreKind, id: string): Promise<Inspection> {
    this.checkKind(kind);
    const purpose = kind.purposes.inspect(id);
    const reading = redlockInspect(this.nodeKeysOf(kind, id));
    const results = await this.onAll(id, purpose, this.options.commandTimeout, reading);
    const answers = results.flatMap((result) => (result.ok ? [result.value as [string, number, string]] : []));
    if (answers.length < this.options.quorum) throw this.noQuorum(id, purpose, results);
    let fence = 0n;
    const byHolder = new Map<string, number[]>();
    for (const [holder, pttl, counter] of answers) {
      if (counter !== '' && BigInt(counter) > fence) fence = BigInt(counter);
      if (holder === '') continue;
      const ttl = Number(pttl) === -1 ? Number.POSITIVE_INFINITY : leaseRunsOutIn(pttl);
      byHolder.set(holder, [...(byHolder.get(holder) ?? []), ttl]);
    }
    const withFence = fence > 0n ? { fence: Number(fence) } : {};
    for (const ttls of byHolder.values()) {
      if (ttls.length < this.options.quorum) continue;
      const ttl = ttls.sort((a, b) => b - a)[this.options.quorum - 1];
      return { ttls: [ttl], ...withFence };
    }
    return { ttls: [], ...withFence };
  }

  /** Deletes the lease on every node whoever holds it; `true` when one token held it on a quorum. */
  async forceRelease(kind: StoreKind, id: string): Promise<boolean> {
    this.checkKind(kind);
    const purpose = kind.purposes.forceRelease(id);
    const releasing = redlockForceRelease(this.nodeKeysOf(kind, id));
    const results = await this.onAll(id, purpose, this.options.commandTimeout, releasing);
    const counts = new Map<string, number>();
    for (const result of results) {
      if (result.ok && result.value !== '') {
        const holder = String(result.value);
        counts.set(holder, (counts.get(holder) ?? 0) + 1);
      }
    }
    const failed = results.filter((result) => !result.ok).length;
    const held = [...counts.values()].some((count) => count >= this.options.quorum);
    if (!held && results.length - failed < this.options.quorum) throw this.noQuorum(id, purpose, results);
    return held;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all(
      this.clients.map(async (client, i) => {
        client.removeListener('ready', this.onReady[i]);
        if (!this.options.ownsClients[i]) return;
        connectionStateOf(client).stop();
        if (client.status === 'ready') {
          // Bounded: a stopped server never answers QUIT.
          await Promise.race([client.quit(), sleep(this.options.commandTimeout)]).catch(() => undefined);
        }
        client.disconnect();
      }),
    );
  }

  /** The lease's key and its fence counter, the same on every node, and the node's birth marker (as RedisStore's, the lease first). */
  keysOf(kind: StoreKind, id: string): [string, string, string] {
    const { lease, counter, marker } = this.nodeKeysOf(kind, id);
    return [lease, counter, marker];
  }

  /** `keysOf` by name, as the node scripts' builders take them. */
  private nodeKeysOf(kind: StoreKind, id: string): RedlockKeys {
    const lease = `${this.options.keyPrefix}${kind.redis.namespace}${hashTagged(id)}`;
    return { lease, counter: `${lease}:fence`, marker: this.markerKey };
  }

  /** A kind that is no token lease is refused on every call: the kind says why. */
  private checkKind(kind: StoreKind): void {
    if (kind.redlock !== 'token-lease') throw new InvalidArgumentError('redlock', kind.redlock.refusal);
  }

  /** Milliseconds of a lease of `ttl` sent at `start` the caller may still count on. */
  private validity(start: number, ttl: number): number {
    return ttl - (performance.now() - start) - this.clockDrift(ttl);
  }

  checkTtl(ttl: number): void {
    const { quarantine } = this.options;
    if (quarantine > 0 && ttl > quarantine) {
      throw new InvalidArgumentError(
        'ttl',
        `must be ≤ redlock.quarantine (${quarantine} ms) on Redlock: a master that restarted empty is trusted again only after it, so no lease may outlast it; got ${ttl}`,
      );
    }
  }

  private checkOpen(key: string): void {
    if (this.closed) throw new LockBackendError('The Redlock lock store is closed', key, { retryable: false });
  }

  /** Not enough nodes answered to decide: the first node error explains it, the message says how many answered. */
  private noQuorum(key: string, purpose: string, results: NodeResult<unknown>[]): LockBackendError {
    const failures = results.flatMap((result) => (result.ok ? [] : [result.error]));
    const first = failures[0];
    const answered = results.length - failures.length;
    const message =
      `Only ${answered} of ${results.length} Redlock nodes answered (quorum ${this.options.quorum}): ` +
      `could not ${purpose}${first ? ` (${first.message})` : ''}`;
    // A node whose answer would only come again (its configuration refused, a reply error) is not waited out.
    const lasting = failures.find((failure) => failure.code !== 'BACKEND_UNAVAILABLE');
    return new LockBackendError(message, key, {
      cause: first,
      ...(lasting ? { code: lasting.code, retryable: false } : {}),
    });
  }

  private releaseOnAll(kind: StoreKind, id: string, token: string, timeout: number): Promise<NodeResult<unknown>[]> {
    const releasing = redlockRelease(this.nodeKeysOf(kind, id), { token });
    return this.onAll(id, kind.purposes.release(id), timeout, releasing);
  }

  /**
   * Runs `call` on the lease `id` on every node at once, for a lease of `ttl`: each node bounded by
   * `nodeTimeout(ttl)`, so that a dead node costs a small part of the validity. Also returns when it
   * started (the validity counts from there) and what it was for.
   */
  private async onAllWithin(
    kind: StoreKind,
    id: string,
    operation: 'acquire' | 'extend',
    ttl: number,
    call: ScriptCall,
  ) {
    this.checkKind(kind);
    this.checkTtl(ttl);
    const purpose = kind.purposes[operation](id);
    const start = performance.now();
    const timeout = this.nodeTimeout(ttl);
    const results = await this.onAll(id, purpose, timeout, call);
    return { purpose, start, timeout, results };
  }

  /** Runs `call` on every node at once; each answer or error, in the order of the nodes. */
  private async onAll(key: string, purpose: string, timeout: number, call: ScriptCall): Promise<NodeResult<unknown>[]> {
    this.checkOpen(key);
    return Promise.all(this.clients.map((client) => this.onNode(client, key, purpose, timeout, call)));
  }

  /** One script on one node, bounded by `timeout`; never rejects. */
  private async onNode(
    client: Redis,
    key: string,
    purpose: string,
    timeout: number,
    call: ScriptCall,
  ): Promise<NodeResult<unknown>> {
    const deadline = performance.now() + timeout;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new LockBackendError(
              `A Redlock node did not answer within ${Math.round(timeout)} ms: could not ${purpose}`,
              key,
            ),
          ),
        timeout,
      );
    });
    const misconfiguration = connectionStateOf(client).misconfiguration;
    if (misconfiguration !== undefined) return { ok: false, error: misconfiguredError(misconfiguration, purpose, key) };
    const running = this.evalScript(client, call, () => performance.now() >= deadline);
    running.catch(() => undefined); // its late failure after a timeout is nobody's business
    try {
      return { ok: true, value: await Promise.race([running, expired]) };
    } catch (error) {
      return { ok: false, error: backendErrorOf(error, purpose, key, connectionStateOf(client)) };
    } finally {
      clearTimeout(timer);
    }
  }

  /** EVALSHA, and EVAL after NOSCRIPT (a restarted node lost its script cache) unless the caller gave up. */
  private async evalScript(
    client: Redis,
    { script, keys, argv }: ScriptCall,
    timedOut: () => boolean = () => false,
  ): Promise<unknown> {
    // Redlock publishes no wake-ups: its scripts have one text.
    const { sha, source } = script.plain;
    try {
      return await client.evalsha(sha, script.numberOfKeys, ...keys, ...argv);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT') || timedOut()) throw error;
      return await client.eval(source, script.numberOfKeys, ...keys, ...argv);
    }
  }
}
