import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import { isClusterOption, type RedisClusterOption } from './redis-options.js';
import { InvalidArgumentError } from '../../lock.errors.js';
import { connectionStateOf } from './connection-state.js';

/**
 * Client settings for a connection the module opens itself. A lock command must either
 * reach a live server now or fail now: a command queued while Redis is away, or resent
 * after a reconnect, could take a lock long after its caller gave up on it.
 * Options the user passed win over these.
 */
const MODULE_CLIENT_DEFAULTS: RedisOptions = {
  lazyConnect: true,
  enableOfflineQueue: false,
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 0,
  retryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
  // A connection closed while Redis is unreachable waits this long for a socket that never opened:
  // ioredis's 2 s default kept the process alive that long after app.close().
  disconnectTimeout: 100,
};

/**
 * ioredis is an optional peer dependency: an application on the memory store need not install
 * it, so it is loaded only here, when the module is to open a connection.
 */
async function loadIoredis(): Promise<{ Redis: typeof Redis; Cluster: typeof Cluster }> {
  try {
    const { Redis, Cluster } = await import('ioredis');
    return { Redis, Cluster };
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    const notFound = code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
    const missing = notFound && typeof message === 'string' && message.includes("'ioredis'");
    if (!missing) throw error;
    throw new InvalidArgumentError('redis', 'connecting to Redis needs the ioredis package: npm install ioredis');
  }
}

/**
 * A cluster client of the module's own: the same rule for each node's connection, and no queue for
 * commands while the cluster is down. A command that meets a slot move (MOVED / ASK) or a failover
 * (CLUSTERDOWN, TRYAGAIN) is redirected or retried by ioredis; the wait loop retries what fails
 * within the caller's timeout.
 */
const MODULE_CLUSTER_DEFAULTS: ClusterOptions = {
  lazyConnect: true,
  enableOfflineQueue: false,
  retryDelayOnFailover: 100,
  retryDelayOnClusterDown: 100,
  retryDelayOnTryAgain: 100,
  clusterRetryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
};

type ModuleLogger = { log(message: string): void; warn(message: string): void; error(message: string): void };

/**
 * Opens the module's own client and logs each outage twice — when it starts (since when, and why in
 * the client's words) and when it ends — rather than every reconnect attempt or failed call; a
 * refused configuration (a wrong password, user or database) once, as an error.
 */
export async function connectModuleClient(redis: string | RedisOptions, logger: ModuleLogger): Promise<Redis>;
export async function connectModuleClient(
  redis: string | RedisOptions | RedisClusterOption,
  logger: ModuleLogger,
): Promise<Redis | Cluster>;
export async function connectModuleClient(
  redis: string | RedisOptions | RedisClusterOption,
  logger: ModuleLogger,
): Promise<Redis | Cluster> {
  const ioredis = await loadIoredis();
  let client: Redis | Cluster;
  if (typeof redis === 'string') {
    client = new ioredis.Redis(redis, MODULE_CLIENT_DEFAULTS);
  } else if (isClusterOption(redis)) {
    const { nodes, options = {} } = redis.cluster;
    client = new ioredis.Cluster(nodes, {
      ...MODULE_CLUSTER_DEFAULTS,
      ...options,
      redisOptions: { ...MODULE_CLIENT_DEFAULTS, lazyConnect: false, ...options.redisOptions },
    });
  } else {
    client = new ioredis.Redis({ ...MODULE_CLIENT_DEFAULTS, ...redis });
  }

  connectionStateOf(client).watch((event) => {
    if (event.type === 'refused') {
      logger.error(
        `Redis refuses this client (${event.misconfiguration}): check the password, user and database of the ` +
          'redis option. Lock calls fail at once with BACKEND_MISCONFIGURED until it is fixed',
      );
    } else if (event.type === 'down') {
      const { since, reason } = event.outage;
      logger.warn(
        `Redis is unreachable since ${new Date(since).toISOString()} (${reason}): ` +
          'lock calls fail with BACKEND_UNAVAILABLE until it is back',
      );
    } else {
      logger.log(`Redis is reachable again, after ${(event.lasted / 1_000).toFixed(1)} s`);
    }
  });

  if (client.status === 'wait') {
    // A failed first connect is not fatal: the client keeps reconnecting in the background.
    await untilConnected(client);
  }
  return client;
}

/** ioredis's own default connect timeout: the longest a module start waits for its first connection. */
const FIRST_CONNECT_WAIT = 10_000;

/**
 * Connects `client` and waits until it is ready, its first connect failed, or `FIRST_CONNECT_WAIT`
 * passed. Not just `connect()`: when a Cluster's first ready check fails (a node reports the cluster
 * down), ioredis reconnects by itself and never settles that promise, and the module would never start.
 */
async function untilConnected(client: Redis | Cluster): Promise<void> {
  let onReady = (): void => undefined;
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      client.connect().catch(() => undefined),
      new Promise<void>((resolve) => {
        onReady = resolve;
        client.once('ready', onReady);
        timer = setTimeout(resolve, FIRST_CONNECT_WAIT);
      }),
    ]);
  } finally {
    client.removeListener('ready', onReady);
    clearTimeout(timer);
  }
}
