import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { RedisServer } from './redis-server.js';
import {
  type Address,
  command,
  HOST,
  makeTempDir,
  NotYet,
  parseInfo,
  parsePairs,
  removeTempDir,
  Startup,
  waitFor,
} from './topology-tools.js';

/**
 * One primary, one replica (`--replicaof`) and three sentinels (`redis-server <conf> --sentinel`,
 * quorum 2), throwaway processes on free ports, the sentinels' config files (which they rewrite)
 * in a temp dir. For ioredis: `new Redis({ sentinels: topology.sentinels, name: topology.name })`.
 */
export class SentinelTopology {
  /** How long the start took, in ms. */
  startMs = 0;
  private readonly killedAt = new Map<number, number>();

  private constructor(
    private readonly dataNodes: RedisServer[],
    private readonly sentinelServers: RedisServer[],
    private readonly dir: string,
    /** The monitored primary's name. */
    readonly name: string,
  ) {}

  /**
   * Starts the five processes and waits until every sentinel knows the primary, the replica and
   * the two other sentinels, within `timeoutMs` or throws, having killed them. A primary that
   * does not answer for `downAfterMs` is failed over.
   */
  static async start({
    name = 'mymaster',
    downAfterMs = 1_000,
    failoverTimeoutMs = 10_000,
    timeoutMs = 20_000,
  }: {
    name?: string;
    downAfterMs?: number;
    failoverTimeoutMs?: number;
    timeoutMs?: number;
  } = {}): Promise<SentinelTopology> {
    const started = performance.now();
    const dir = await makeTempDir('nest-lock-sentinel-');
    return Startup.run(
      'a primary, a replica and three sentinels',
      timeoutMs,
      async (startup) => {
        // Full syncs start at once (the default waits 5 s for more replicas) and write into the temp dir.
        const dataArgs = (port: number) => [
          ...['--dir', dir, '--dbfilename', `dump-${port}.rdb`],
          ...['--repl-diskless-sync-delay', '0'],
        ];
        const primary = await startup.server({ args: dataArgs });
        const replica = await startup.server({
          args: (port) => [...dataArgs(port), '--replicaof', HOST, String(primary.port)],
        });
        await waitFor(
          'the replica in sync',
          startup.deadline,
          async () => {
            const { master_link_status: link } = parseInfo(await command(replica.port, ['INFO', 'replication']));
            if (link !== 'up') throw new NotYet(`master_link_status:${link}`);
          },
          { startup },
        );

        const sentinels = await Promise.all(
          [1, 2, 3].map(async (i) => {
            const configFile = join(dir, `sentinel-${i}.conf`);
            await writeFile(
              configFile,
              [
                `sentinel monitor ${name} ${HOST} ${primary.port} 2`,
                `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
                `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
                `sentinel parallel-syncs ${name} 1`,
                '',
              ].join('\n'),
            );
            return startup.server({ configFile, args: ['--sentinel', '--dir', dir, '--loglevel', 'notice'] });
          }),
        );
        const topology = new SentinelTopology([primary, replica], sentinels, dir, name);
        await waitFor(
          'every sentinel knowing the primary, the replica and the other sentinels',
          startup.deadline,
          () => topology.checkKnown(primary.port),
          { startup },
        );
        topology.startMs = Math.round(performance.now() - started);
        return topology;
      },
      () => removeTempDir(dir),
    );
  }

  /** The sentinels: ioredis's `sentinels` option. */
  get sentinels(): Address[] {
    return this.sentinelServers.map((server) => ({ host: HOST, port: server.port }));
  }

  /** The primary now, as a sentinel tells it (SENTINEL GET-MASTER-ADDR-BY-NAME). */
  async primary(): Promise<Address> {
    const sentinel = this.sentinelServers.find((server) => server.running);
    if (!sentinel) throw new Error('no sentinel is running');
    return this.askPrimary(sentinel.port);
  }

  /** Crashes the current primary (SIGKILL); returns its address. */
  async killPrimary(): Promise<Address> {
    const primary = await this.primary();
    await this.dataNode(primary.port).kill();
    this.killedAt.set(primary.port, performance.now());
    return primary;
  }

  /**
   * Freezes the current primary (SIGSTOP): its connections stay open and unanswered, and the
   * sentinels fail it over. Returns its address and `resume` (SIGCONT): it wakes up still believing
   * it is the primary until the sentinels turn it into a replica.
   */
  async freezePrimary(): Promise<{ primary: Address; resume: () => void }> {
    const primary = await this.primary();
    const server = this.dataNode(primary.port);
    server.pause();
    this.killedAt.set(primary.port, performance.now());
    return { primary, resume: () => server.resume() };
  }

  /** Starts the killed node on `port` again (empty); the sentinels make it a replica of the primary. */
  async restartNode(port: number): Promise<void> {
    await this.dataNode(port).restart();
  }

  /** Waits until the node on `port` is a replica in sync with the primary again (after a failover it went through). */
  async waitForReplica(port: number, timeoutMs = 30_000): Promise<void> {
    await waitFor(`node ${port} back as a replica in sync`, Date.now() + timeoutMs, async () => {
      const info = String(await command(port, ['INFO', 'replication']));
      if (!info.includes('role:slave') || !info.includes('master_link_status:up')) {
        throw new NotYet(`node ${port} is not a replica in sync yet`);
      }
    });
  }

  /**
   * Waits until every running sentinel names a primary other than `oldPrimaryPort` and that node
   * says it is a primary. `ms`: the time from `killPrimary()` (or from this call) to then.
   */
  async waitForFailover(oldPrimaryPort: number, timeoutMs = 30_000): Promise<{ primary: Address; ms: number }> {
    const from = this.killedAt.get(oldPrimaryPort) ?? performance.now();
    const primary = await waitFor(
      `a failover away from port ${oldPrimaryPort}`,
      Date.now() + timeoutMs,
      async () => {
        const named = await Promise.all(
          this.sentinelServers.filter((server) => server.running).map((server) => this.askPrimary(server.port)),
        );
        const ports = new Set(named.map((address) => address.port));
        if (ports.size !== 1 || ports.has(oldPrimaryPort)) {
          throw new NotYet(`the sentinels name ${[...ports].join(', ')} as the primary`);
        }
        const [role] = (await command(named[0].port, ['ROLE'])) as string[];
        if (role !== 'master') throw new NotYet(`${named[0].port} is a ${role}`);
        return named[0];
      },
      { intervalMs: 50 },
    );
    return { primary, ms: Math.round(performance.now() - from) };
  }

  /** Kills every process (SIGKILL: nothing to save) and removes the config files. */
  async stop(): Promise<void> {
    await Promise.all([...this.dataNodes, ...this.sentinelServers].map((server) => server.kill()));
    await removeTempDir(this.dir);
  }

  private async checkKnown(primaryPort: number): Promise<void> {
    await Promise.all(
      this.sentinelServers.map(async ({ port }) => {
        const master = parsePairs(await command(port, ['SENTINEL', 'MASTER', this.name]));
        if (master.flags !== 'master' || Number(master.port) !== primaryPort) {
          throw new NotYet(`sentinel ${port}: the primary is ${master.port} (${master.flags})`);
        }
        const replicas = ((await command(port, ['SENTINEL', 'REPLICAS', this.name])) as unknown[]).map(parsePairs);
        if (replicas.length !== 1 || replicas[0].flags !== 'slave' || replicas[0]['master-link-status'] !== 'ok') {
          throw new NotYet(`sentinel ${port}: replicas ${JSON.stringify(replicas.map((r) => [r.port, r.flags]))}`);
        }
        const others = (await command(port, ['SENTINEL', 'SENTINELS', this.name])) as unknown[];
        if (others.length !== this.sentinelServers.length - 1) {
          throw new NotYet(`sentinel ${port}: knows ${others.length} other sentinel(s)`);
        }
      }),
    );
  }

  private async askPrimary(sentinelPort: number): Promise<Address> {
    const reply = (await command(sentinelPort, ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.name])) as
      [string, string] | null;
    if (!reply) throw new Error(`sentinel ${sentinelPort} does not know ${this.name}`);
    return { host: reply[0], port: Number(reply[1]) };
  }

  private dataNode(port: number): RedisServer {
    const server = this.dataNodes.find((candidate) => candidate.port === port);
    if (!server) throw new Error(`no primary or replica of this topology on port ${port}`);
    return server;
  }
}
