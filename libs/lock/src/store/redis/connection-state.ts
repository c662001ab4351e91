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

/** What a client's connection has told so far, read by the store before each command and by the module's log. */
export interface ConnectionState {
  /** Redis refuses this client's configuration (the reply's text), until a connection is ready again. */
  readonly misconfiguration: string | undefined;
  /** Why the connection is not ready, in the client's words, and since when (`Date.now()`); `undefined` while ready. */
  readonly down: { reason: string; since: number } | undefined;
}

interface TrackedState {
  misconfiguration: string | undefined;
  /** A refused SELECT: the client goes ready all the same, on database 0, so readiness does not clear it. */
  wrongDatabase: boolean;
  down: { reason: string; since: number } | undefined;
}

const tracked = new WeakMap<Redis | Cluster, TrackedState>();

/**
 * The state of `client`'s connection, watched from now on (once per client, whoever asks first:
 * the module before it connects, or the store for a client passed in).
 */
export function connectionStateOf(client: Redis | Cluster): ConnectionState {
  const known = tracked.get(client);
  if (known !== undefined) return known;
  const state: TrackedState = {
    misconfiguration: undefined,
    wrongDatabase: false,
    down: client.status === 'ready' ? undefined : { reason: 'not connected yet', since: Date.now() },
  };
  tracked.set(client, state);
  client.on('error', (error: unknown) => {
    const refused = misconfigurationOf(error);
    if (refused !== undefined) {
      state.misconfiguration = refused;
      state.wrongDatabase ||= refused.startsWith('ERR') && /DB index/i.test(refused);
    }
    if (client.status !== 'ready') state.down = { reason: errorMessage(error), since: state.down?.since ?? Date.now() };
  });
  client.on('close', () => {
    state.down ??= { reason: 'the connection closed', since: Date.now() };
  });
  client.on('ready', () => {
    state.down = undefined;
    if (!state.wrongDatabase) state.misconfiguration = undefined;
  });
  return state;
}
