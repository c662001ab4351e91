import type { Redis, RedisOptions } from 'ioredis';
import { InvalidArgumentError } from '../../lock.errors.js';
import { DEFAULT_DRIFT_FACTOR, duration } from '../../options/durations.js';
import { keysOf, optionNames } from '../../options/option-names.js';
import { describe, isPlainObject, rejectUnknownNames } from '../../options/validation.js';
import { isClusterOption, isRedisClient, validateRedisOption } from '../redis/redis-options.js';

/** `LockModule.forRoot({ redlock })`: Redlock over N independent Redis masters. */
export interface RedlockOptions {
  /** The masters: Redis URLs, ioredis options or ioredis clients (not clusters); at least 1, 3 or more recommended. */
  nodes: (string | RedisOptions | Redis)[];
  /** Nodes that must grant a lease: more than half of `nodes`, at most all. Default `floor(N / 2) + 1`. */
  quorum?: number;
  /** Clock drift allowed per ms of lease: validity = ttl − elapsed − (ttl × driftFactor + 2 ms). Default 0.01. */
  driftFactor?: number;
  /**
   * How long a node that nest-lock sees for the first time (a restart that came back empty, a
   * FLUSHALL, a new node) neither grants leases nor counts for renewals: the longest lease any call may
   * take, so no per-call `ttl` may exceed it. Default: `defaults.ttl`. `0` turns it off (safe only on
   * masters that never lose acknowledged writes, e.g. AOF with `appendfsync always`).
   */
  quarantine?: number;
}

/** `redlock` after validation, with every default filled in. */
export interface ResolvedRedlockOptions {
  nodes: (string | RedisOptions | Redis)[];
  quorum: number;
  driftFactor: number;
  quarantine: number;
}

/** The key object of `RedlockOptions` (options/option-names.ts): the names its check knows. */
const REDLOCK_OPTIONS_KEYS = keysOf<RedlockOptions>()({
  nodes: true,
  quorum: true,
  driftFactor: true,
  quarantine: true,
});
const REDLOCK_OPTION_NAMES = optionNames(REDLOCK_OPTIONS_KEYS);

/**
 * `redlock`: its nodes (each a URL, ioredis options or a client, never a cluster, no server twice), a
 * quorum that is a majority (two quorums always share a node), a drift factor in [0, 1), and a
 * quarantine no shorter than the default ttl (`defaultTtl`), since it bounds every lease.
 */
export function resolveRedlock(redlock: unknown, defaultTtl: number): ResolvedRedlockOptions {
  if (!isPlainObject(redlock)) {
    throw new InvalidArgumentError('redlock', `must be an object with nodes, got ${describe(redlock)}`);
  }
  rejectUnknownNames('redlock.', redlock as object, REDLOCK_OPTION_NAMES);
  const { nodes, quorum, driftFactor = DEFAULT_DRIFT_FACTOR, quarantine = defaultTtl } = redlock as RedlockOptions;
  if (!Array.isArray(nodes) || nodes.length === 0) {
    throw new InvalidArgumentError(
      'redlock.nodes',
      `must be a non-empty array of Redis URLs, ioredis options or clients, got ${describe(nodes)}`,
    );
  }
  const servers = new Map<string, number>();
  nodes.forEach((node: unknown, i) => {
    const argument = `redlock.nodes[${i}]`;
    if ((node as { isCluster?: unknown } | null)?.isCluster === true || isClusterOption(node)) {
      throw new InvalidArgumentError(argument, 'must be a single Redis master, not a cluster');
    }
    validateRedisOption(node, argument);
    const server = serverOf(node);
    if (server === undefined) return;
    const earlier = servers.get(server);
    if (earlier !== undefined) {
      throw new InvalidArgumentError(
        argument,
        `is the server of redlock.nodes[${earlier}] (${server}) again: a master listed twice would count twice towards the quorum`,
      );
    }
    servers.set(server, i);
  });
  const n = nodes.length;
  const resolvedQuorum = quorum ?? Math.floor(n / 2) + 1;
  if (
    typeof resolvedQuorum !== 'number' ||
    !Number.isInteger(resolvedQuorum) ||
    resolvedQuorum <= n / 2 ||
    resolvedQuorum > n
  ) {
    throw new InvalidArgumentError(
      'redlock.quorum',
      `must be a whole number > ${n / 2} (more than half of the ${n} nodes) and ≤ ${n}, got ${describe(quorum)}`,
    );
  }
  if (typeof driftFactor !== 'number' || !Number.isFinite(driftFactor) || driftFactor < 0 || driftFactor >= 1) {
    throw new InvalidArgumentError('redlock.driftFactor', `must be a number ≥ 0 and < 1, got ${describe(driftFactor)}`);
  }
  duration('redlock.quarantine', quarantine, 0);
  if (quarantine !== 0 && quarantine < defaultTtl) {
    throw new InvalidArgumentError(
      'redlock.quarantine',
      `must be ≥ defaults.ttl (${defaultTtl} ms), the longest lease a call may take, or 0 to turn it off; got ${quarantine}`,
    );
  }
  return { nodes: [...nodes], quorum: resolvedQuorum, driftFactor, quarantine };
}

/**
 * The Redis server a Redlock node names, as `host:port` or `unix:<path>`, whatever the form (URL,
 * options, client) and database: two nodes on one server are one master. Loopback addresses
 * (127.0.0.0/8, ::1, localhost, IPv4-mapped) count as one host; other host names are compared as
 * written (resolving them would need the network: the quorum counts servers by their run_id
 * anyway). `undefined` for a node behind Sentinel: which server it is, only the sentinels know.
 */
function serverOf(node: unknown): string | undefined {
  let host: string | undefined;
  let port: string | number | undefined;
  let path: string | undefined;
  if (typeof node === 'string') {
    const url = new URL(node);
    host = decodeURIComponent(url.hostname).replace(/^\[(.*)\]$/, '$1');
    port = url.port;
  } else {
    const options = (isRedisClient(node) ? (node as Redis).options : node) as Partial<RedisOptions>;
    if (options.sentinels !== undefined && options.sentinels !== null) return undefined;
    ({ host, port, path } = options);
  }
  if (path) return `unix:${path}`;
  const name = (host || 'localhost').toLowerCase().replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, '');
  const loopback =
    name === 'localhost' || /^127\./.test(name) || /^(0+:){7}0*1$|^::1$|^::ffff:7f[\da-f]{2}:[\da-f]{1,4}$/.test(name);
  return `${loopback ? 'localhost' : name}:${Number(port || 6379)}`;
}
