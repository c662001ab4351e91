import type { Cluster, Redis } from 'ioredis';
import { errorMessage } from '../../lock.errors.js';

/**
 * Replies that say Redis refuses this client's configuration — its password or user (`WRONGPASS`,
 * `NOAUTH`), its rights (`NOPERM`), its database (`ERR DB index is out of range`) — rather than that
 * it is away: they come back on every try until the configuration is fixed, so nobody waits them out.
 */
const MISCONFIGURATION =
  /^(WRONGPASS|NOAUTH|NOPERM)\b|^ERR (DB index is out of range|invalid DB index|invalid password)/;

/** The reply's text when `error` is Redis refusing this client's configuration, else `undefined`. */
export function misconfigurationOf(error: unknown): string | undefined {
  if (!(error instanceof Error) || error.name !== 'ReplyError') return undefined;
  const reply = errorMessage(error);
  return MISCONFIGURATION.test(reply) ? reply : undefined;
}

/** What an outage says before the client says why. */
const NOT_CONNECTED_YET = 'not connected yet';
const CLOSED = 'the connection closed';

/** Why Redis cannot be used right now, and since when (`Date.now()`). */
export interface Outage {
  reason: string;
  since: number;
}

/** A change of a connection's state that the module logs: an outage begins, or ends after `lasted` ms. */
export type ConnectionEvent =
  { type: 'down'; outage: Outage } | { type: 'up'; lasted: number } | { type: 'refused'; misconfiguration: string };

/**
 * What a client's connection has told so far, read by the store before each command and logged by
 * the module: one state per client, whoever asks first (the module before it connects, or the store
 * for a client passed in). An outage is the connection being down, or connected but not answering
 * within the command timeout (a frozen server); it ends when the connection is ready and answers.
 */
export class ConnectionState {
  /** Redis refuses this client's configuration (the reply's text), until a connection is ready again. */
  misconfiguration: string | undefined;
  /** A refused SELECT: the client goes ready all the same, on database 0, so readiness does not clear it. */
  private wrongDatabase = false;
  private disconnected: Outage | undefined;
  private unanswered: Outage | undefined;
  /** The outage in progress was told as `down` (so its end is told as `up`). */
  private told = false;
  /** Closed on purpose: what the connection does from now on is nobody's outage. */
  private stopped = false;
  private readonly listeners = new Set<(event: ConnectionEvent) => void>();

  constructor(private readonly client: Redis | Cluster) {
    if (client.status !== 'ready') this.disconnected = { reason: NOT_CONNECTED_YET, since: Date.now() };
    client.on('error', (error: unknown) => this.failed(error));
    client.on('close', () => this.lost(CLOSED));
    client.on('ready', () => this.ready());
  }

  /** The outage in progress: since when and why, in the client's words; `undefined` while Redis answers. */
  get outage(): Outage | undefined {
    return this.disconnected ?? this.unanswered;
  }

  /** Tells `listener` of every outage, its end, and every refused configuration; returns the unsubscription. */
  watch(listener: (event: ConnectionEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The connection is being closed on purpose (the store closes): nothing more is told. */
  stop(): void {
    this.stopped = true;
  }

  /** A command was not answered within the command timeout (the server froze, or the network did). */
  commandUnanswered(timeout: number): void {
    if (this.outage !== undefined) return;
    this.unanswered = { reason: `no answer within ${timeout} ms`, since: Date.now() };
    this.down(this.unanswered);
  }

  /**
   * A command failed without a reply: its connection may be gone before the client says so (ioredis
   * refuses a command on a socket the server closed while its status still reads `ready`, and tells
   * of the close a tick later). The outage starts now when the client is not ready or its socket no
   * longer writable, so that the error already says since when.
   */
  commandFailed(error: unknown): void {
    if (this.disconnected !== undefined) return;
    const { stream } = this.client as Partial<Redis>;
    if (this.client.status !== 'ready' || stream?.writable === false) this.lost(errorMessage(error));
  }

  /** A command was answered: an outage of unanswered commands is over. */
  commandAnswered(): void {
    if (this.unanswered === undefined) return;
    this.unanswered = undefined;
    if (this.disconnected === undefined) this.up();
  }

  private failed(error: unknown): void {
    const refused = misconfigurationOf(error);
    if (refused !== undefined && refused !== this.misconfiguration) {
      this.misconfiguration = refused;
      this.wrongDatabase ||= /DB index/i.test(refused);
      this.tell({ type: 'refused', misconfiguration: refused });
    }
    if (this.client.status !== 'ready') this.lost(errorMessage(error));
  }

  private lost(reason: string): void {
    const known = this.disconnected;
    if (known !== undefined && known.reason !== NOT_CONNECTED_YET) {
      // The first words were "the connection closed": the client's own reason says more.
      if (known.reason === CLOSED) known.reason = reason;
      return;
    }
    // A first connect that fails is an outage since the start; a dropped connection, since now (or
    // since the commands it carried stopped being answered).
    this.disconnected = { reason, since: known?.since ?? this.unanswered?.since ?? Date.now() };
    this.unanswered = undefined;
    if (this.misconfiguration === undefined) this.down(this.disconnected);
  }

  private ready(): void {
    this.disconnected = undefined;
    if (!this.wrongDatabase) this.misconfiguration = undefined;
    if (this.unanswered === undefined) this.up();
  }

  private down(outage: Outage): void {
    if (this.told) return;
    this.told = true;
    this.tell({ type: 'down', outage });
  }

  private up(): void {
    if (!this.told) return;
    this.told = false;
    const since = this.toldSince;
    this.tell({ type: 'up', lasted: Date.now() - since });
  }

  private tell(event: ConnectionEvent): void {
    if (this.stopped) return;
    if (event.type === 'down') this.toldSince = event.outage.since;
    for (const listener of this.listeners) listener(event);
  }

  /** When the outage told as `down` began. */
  private toldSince = 0;
}

const states = new WeakMap<Redis | Cluster, ConnectionState>();

/** The state of `client`'s connection, watched from the first call on. */
export function connectionStateOf(client: Redis | Cluster): ConnectionState {
  let state = states.get(client);
  if (state === undefined) states.set(client, (state = new ConnectionState(client)));
  return state;
}
