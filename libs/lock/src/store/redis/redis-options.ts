import type { Cluster, ClusterOptions, Redis } from 'ioredis';
import { InvalidArgumentError } from '../../lock.errors.js';
import { describe, isPlainObject, rejectUnknownNames } from '../../options/validation.js';
import { keysOf, optionNames } from '../../options/option-names.js';

/** A Redis Cluster the module connects to: its seed nodes and ioredis `ClusterOptions`. */
export interface RedisClusterOption {
  cluster: {
    /** Seed nodes: `redis://host:port` URLs, or `{ host, port }`. */
    nodes: (string | { host?: string; port: number })[];
    options?: ClusterOptions;
  };
}

/** A `redis://` or `rediss://` URL, ioredis options, `{ cluster }` (for `redis` only) or an ioredis client. */
export function validateRedisOption(redis: unknown, argument = 'redis'): void {
  if (typeof redis === 'string') {
    let protocol: string | undefined;
    try {
      protocol = new URL(redis).protocol;
    } catch {
      // reported below
    }
    if (protocol !== 'redis:' && protocol !== 'rediss:') {
      throw new InvalidArgumentError(argument, `must be a redis:// or rediss:// URL, got "${redis}"`);
    }
  } else if (argument === 'redis' && isClusterOption(redis)) {
    validateClusterOption(redis.cluster);
  } else if (!isRedisClient(redis) && !isPlainObject(redis)) {
    throw new InvalidArgumentError(
      argument,
      `must be a URL, ioredis options${argument === 'redis' ? ', { cluster: { nodes } }' : ''} or an ioredis client, got ${describe(redis)}`,
    );
  }
}

/** `{ cluster: … }`: the module connects to a Redis Cluster. */
export function isClusterOption(redis: unknown): redis is RedisClusterOption {
  return isPlainObject(redis) && !isRedisClient(redis) && Object.hasOwn(redis as object, 'cluster');
}

/** Duck-typed so that a client from another copy of ioredis is still recognised. */
export function isRedisClient(value: unknown): value is Redis | Cluster {
  const candidate = value as Partial<Redis> | null;
  return typeof candidate?.evalsha === 'function' && typeof candidate.set === 'function';
}

const CLUSTER_OPTIONS_KEYS = keysOf<RedisClusterOption['cluster']>()({ nodes: true, options: true });

function validateClusterOption(cluster: unknown): void {
  if (!isPlainObject(cluster)) {
    throw new InvalidArgumentError('redis.cluster', `must be { nodes, options? }, got ${describe(cluster)}`);
  }
  rejectUnknownNames('redis.cluster.', cluster as object, optionNames(CLUSTER_OPTIONS_KEYS));
  const { nodes, options } = cluster as { nodes?: unknown; options?: unknown };
  if (!Array.isArray(nodes) || nodes.length === 0) {
    throw new InvalidArgumentError('redis.cluster.nodes', `must list at least one node, got ${describe(nodes)}`);
  }
  for (const node of nodes) {
    const valid =
      typeof node === 'string'
        ? /^rediss?:\/\//.test(node)
        : isPlainObject(node) && Number.isInteger((node as { port?: unknown }).port);
    if (!valid) {
      throw new InvalidArgumentError(
        'redis.cluster.nodes',
        `each node must be a redis:// URL or { host, port }, got ${describe(node)}`,
      );
    }
  }
  if (options !== undefined && !isPlainObject(options)) {
    throw new InvalidArgumentError('redis.cluster.options', `must be ioredis ClusterOptions, got ${describe(options)}`);
  }
}
