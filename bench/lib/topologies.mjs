// Where the contended workloads run in `npm run bench -- --topology …`: one redis-server (the
// reference), a Redis Cluster of 3 primaries (no replicas: 2 cores), or 3 independent masters
// (Redlock). Each target tells the worker processes how to connect (`spec`, plain JSON) and gives
// the parent what it needs around a run: server counters summed over the nodes, the W3 counter,
// a flush, Redis's clock, and a stop that kills what it started.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { startRedis } from './redis-server.mjs';
import { addDelta, serverSnapshot } from './server-stats.mjs';

export const TOPOLOGIES = ['cluster', 'redlock'];

/** `single` | `cluster` | `redlock`. */
export async function startTarget(kind, { cpus } = {}) {
  if (kind === 'single') {
    const server = await startRedis({ cpus });
    return target(kind, [server], { kind, url: server.url });
  }
  if (kind === 'redlock') {
    const servers = await Promise.all([0, 1, 2].map(() => startRedis()));
    return target(kind, servers, { kind, nodes: servers.map((server) => server.url) });
  }
  if (kind === 'cluster') return startCluster();
  throw new Error(`unknown topology "${kind}" (single, ${TOPOLOGIES.join(', ')})`);
}

/**
 * The client of the place a worker's W3 counter and clock live: the single server, the cluster,
 * or the first master (a Redlock's resource lives elsewhere; one of the masters stands for it).
 */
export function dataClient(spec, options = {}) {
  if (spec.kind === 'cluster') return new Cluster(spec.nodes, { redisOptions: options });
  return new Redis(spec.kind === 'single' ? spec.url : spec.nodes[0], options);
}

/** A plain client of one node of `spec` (for Redis's clock: every node runs on this machine). */
export function nodeClient(spec) {
  return new Redis(spec.kind === 'single' ? spec.url : spec.nodes[0]);
}

async function startCluster() {
  const dir = mkdtempSync(join(tmpdir(), 'nest-lock-bench-cluster-'));
  const servers = [];
  try {
    servers.push(
      ...(await Promise.all(
        [0, 1, 2].map(() =>
          startRedis({
            clusterBus: true,
            args: (port) => [
              ...['--cluster-enabled', 'yes'],
              ...['--cluster-config-file', join(dir, `nodes-${port}.conf`)],
              ...['--cluster-node-timeout', '5000'],
            ],
          }),
        ),
      )),
    );
    const addresses = servers.map((server) => `127.0.0.1:${server.port}`);
    await promisify(execFile)(
      process.env.REDIS_CLI || 'redis-cli',
      ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'],
      { timeout: 30_000, killSignal: 'SIGKILL' },
    );
    await untilClusterOk(servers);
    const spec = { kind: 'cluster', nodes: servers.map((server) => server.url) };
    const cluster = target('cluster', servers, spec);
    const stop = cluster.stop;
    cluster.stop = async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    };
    return cluster;
  } catch (error) {
    await Promise.all(servers.map((server) => server.stop()));
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

async function untilClusterOk(servers) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const states = await Promise.all(
      servers.map(async (server) => {
        const client = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
        try {
          await client.connect();
          return /cluster_state:ok/.test(await client.cluster('INFO'));
        } catch {
          return false;
        } finally {
          client.disconnect();
        }
      }),
    );
    if (states.every(Boolean)) return;
    if (Date.now() > deadline) throw new Error('the bench cluster did not reach cluster_state:ok in 30 s');
    await delay(100);
  }
}

function target(kind, servers, spec) {
  const admins = servers.map((server) => new Redis(server.url));
  const data = dataClient(spec);
  return {
    kind,
    spec,
    servers,
    version: servers[0].version,
    /** What every node counted, summed (INFO commandstats and cpu). */
    async snapshot() {
      const sum = { commands: {}, cpuSeconds: 0 };
      for (const snapshot of await Promise.all(admins.map((admin) => serverSnapshot(admin)))) addDelta(sum, snapshot);
      return sum;
    },
    /** The W3 counter of `key`. */
    async counter(key) {
      return Number(await data.get(key));
    },
    /** A client on one node, for Redis's clock. */
    clock: admins[0],
    async flush() {
      await Promise.all(admins.map((admin) => admin.flushall()));
    },
    async stop() {
      data.disconnect();
      admins.forEach((admin) => admin.disconnect());
      await Promise.all(servers.map((server) => server.stop()));
    },
  };
}
