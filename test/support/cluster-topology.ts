import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freeClusterPort, type RedisServer } from './redis-server.js';
import {
  type Address,
  command,
  HOST,
  makeTempDir,
  NotYet,
  parseInfo,
  removeTempDir,
  Startup,
  timed,
  waitFor,
} from './topology-tools.js';

const SLOTS = 16_384;

/** A node as it sees itself (its `myself` line of CLUSTER NODES). */
export interface ClusterNode extends Address {
  id: string;
  role: 'primary' | 'replica';
  /** A replica's primary (its node id). */
  primaryId?: string;
  /** A primary's slot ranges, inclusive. */
  slots: [number, number][];
}

interface NodeLine {
  id: string;
  port: number;
  flags: string[];
  primaryId?: string;
  slots: [number, number][];
}

/**
 * A Redis Cluster of throwaway redis-server processes on free ports (cluster bus on port + 10000),
 * joined by `redis-cli --cluster create`, with its config files in a temp dir. Roles change with
 * failovers: `primaries()` and `replicas()` ask the nodes each time.
 */
export class RedisClusterTopology {
  /** How long the start took, in ms. */
  startMs = 0;

  private constructor(
    private readonly servers: RedisServer[],
    private readonly dir: string,
    private readonly primaryCount: number,
  ) {}

  /**
   * Starts `primaries * (1 + replicasPerPrimary)` nodes and waits until the cluster is ok on each
   * (all slots covered, every replica in sync), within `timeoutMs` or throws, having killed them.
   * `nodeTimeoutMs` (cluster-node-timeout) bounds how soon a dead primary's replica takes over.
   */
  static async start({
    primaries = 3,
    replicasPerPrimary = 1,
    nodeTimeoutMs = 2_000,
    timeoutMs = 30_000,
  }: {
    primaries?: number;
    replicasPerPrimary?: number;
    nodeTimeoutMs?: number;
    timeoutMs?: number;
  } = {}): Promise<RedisClusterTopology> {
    if (primaries < 3) throw new Error('redis-cli --cluster create needs at least 3 primaries');
    const started = performance.now();
    const dir = await makeTempDir('nest-lock-cluster-');
    return Startup.run(
      `a cluster of ${primaries} primaries with ${replicasPerPrimary} replica(s) each`,
      timeoutMs,
      async (startup) => {
        const count = primaries * (1 + replicasPerPrimary);
        const servers = await Promise.all(
          Array.from({ length: count }, () =>
            startup.server({
              choosePort: freeClusterPort,
              args: (port) => clusterNodeArgs(dir, port, nodeTimeoutMs),
            }),
          ),
        );
        const addresses = servers.map((server) => `${HOST}:${server.port}`);
        startup.step = 'joining the nodes with redis-cli --cluster create';
        try {
          await promisify(execFile)(
            process.env.REDIS_CLI || 'redis-cli',
            ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicasPerPrimary), '--cluster-yes'],
            { timeout: startup.remainingMs(), killSignal: 'SIGKILL' },
          );
        } catch (error) {
          const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
          throw new Error(`redis-cli --cluster create failed: ${(error as Error).message}\n${stdout}${stderr}`, {
            cause: error,
          });
        }
        const topology = new RedisClusterTopology(servers, dir, primaries);
        await topology.untilOk(startup.deadline, startup);
        topology.startMs = Math.round(performance.now() - started);
        return topology;
      },
      () => removeTempDir(dir),
    );
  }

  /** Every node, whatever its role or state: the seed list of `new Redis.Cluster(nodes)`. */
  get nodes(): Address[] {
    return this.servers.map((server) => ({ host: HOST, port: server.port }));
  }

  /** The running nodes that are primaries now, by their own account. */
  async primaries(): Promise<ClusterNode[]> {
    return (await this.describe()).filter((node) => node.role === 'primary' && node.slots.length > 0);
  }

  /** The running nodes that are replicas now, by their own account. */
  async replicas(): Promise<ClusterNode[]> {
    return (await this.describe()).filter((node) => node.role === 'replica');
  }

  /** The primary that serves `key` now (asks the nodes for its slot and the slot's owner). */
  async primaryFor(key: string): Promise<ClusterNode> {
    const primaries = await this.primaries();
    const slot = Number(await command(primaries[0].port, ['CLUSTER', 'KEYSLOT', key]));
    const owner = primaries.find((node) => node.slots.some(([from, to]) => from <= slot && slot <= to));
    if (!owner) throw new Error(`no primary serves slot ${slot} of key ${JSON.stringify(key)}`);
    return owner;
  }

  /**
   * A manual failover (`CLUSTER FAILOVER` on the replica, coordinated with its primary, so no
   * acknowledged write is lost): waits until the replica is a primary and the cluster is ok.
   * Returns how long it took, in ms.
   */
  async failover(replica: Address, timeoutMs = 20_000): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    const server = this.server(replica.port);
    if ((await this.describeNode(server)).role !== 'replica') throw new Error(`node ${replica.port} is not a replica`);
    const [, ms] = await timed(async () => {
      let askedAt = 0;
      await waitFor(`node ${replica.port} becoming a primary after CLUSTER FAILOVER`, deadline, async () => {
        // A manual failover that its primary did not answer in time (5 s) is dropped: ask again.
        if (Date.now() - askedAt > 6_000) {
          askedAt = Date.now();
          await command(replica.port, ['CLUSTER', 'FAILOVER']);
        }
        if ((await this.describeNode(server)).role !== 'primary') {
          throw new NotYet(`node ${replica.port} is still a replica`);
        }
      });
      await this.untilOk(deadline);
    });
    return ms;
  }

  /** Crash a node (SIGKILL). A dead primary's replica takes over: `waitForClusterOk()`. */
  async kill(node: Address): Promise<void> {
    await this.server(node.port).kill();
  }

  /**
   * Starts a node again on its port, with its cluster config file (it rejoins; a primary that
   * lost its slots comes back as a replica) and no data. `waitForClusterOk()` waits for it to be
   * in sync.
   */
  async restart(node: Address): Promise<void> {
    await this.server(node.port).restart();
  }

  /**
   * Makes every running node forget who serves `slot` (CLUSTER DELSLOTS): with a slot uncovered each
   * node says cluster_state:fail. Returns the primary that served it, for `recoverSlot`.
   */
  async uncoverSlot(slot: number): Promise<ClusterNode> {
    const owner = (await this.primaries()).find((node) => node.slots.some(([from, to]) => from <= slot && slot <= to));
    if (!owner) throw new Error(`no primary serves slot ${slot}`);
    const running = this.servers.filter((server) => server.running);
    await Promise.all(running.map(({ port }) => command(port, ['CLUSTER', 'DELSLOTS', slot])));
    return owner;
  }

  /** `owner` serves `slot` again (CLUSTER ADDSLOTS); waits until the cluster is ok. */
  async recoverSlot(slot: number, owner: Address, timeoutMs = 20_000): Promise<void> {
    await command(owner.port, ['CLUSTER', 'ADDSLOTS', slot]);
    await this.waitForClusterOk(timeoutMs);
  }

  /**
   * Waits until every running node says cluster_state:ok with all slots covered by running,
   * reachable primaries, knows every running node as alive, and every running replica is in sync
   * with its primary. Returns how long it waited, in ms.
   */
  async waitForClusterOk(timeoutMs = 30_000): Promise<number> {
    const [, ms] = await timed(() => this.untilOk(Date.now() + timeoutMs));
    return ms;
  }

  /** Kills every node (SIGKILL: nothing to save) and removes the config files. */
  async stop(): Promise<void> {
    await Promise.all(this.servers.map((server) => server.kill()));
    await removeTempDir(this.dir);
  }

  private async untilOk(deadline: number, startup?: Startup): Promise<void> {
    await waitFor('the cluster ok on every node', deadline, () => this.checkOk(), { startup });
  }

  /**
   * Throws NotYet unless every running node says cluster_state:ok with all slots covered, sees
   * the slots on running nodes only, agrees with each running node on its role, primary and
   * slots, sees no running node as failed, and (a replica) is in sync with its primary.
   */
  private async checkOk(): Promise<void> {
    const running = this.servers.filter((server) => server.running);
    const runningPorts = new Set(running.map((server) => server.port));
    const views = await Promise.all(
      running.map(async ({ port }) => {
        const info = parseInfo(await command(port, ['CLUSTER', 'INFO']));
        if (info.cluster_state !== 'ok') throw new NotYet(`node ${port}: cluster_state:${info.cluster_state}`);
        if (Number(info.cluster_slots_ok) !== SLOTS) {
          throw new NotYet(`node ${port}: cluster_slots_ok:${info.cluster_slots_ok}`);
        }
        const lines = parseNodes(await command(port, ['CLUSTER', 'NODES']));
        const myself = lines.find((line) => line.flags.includes('myself'));
        if (!myself) throw new NotYet(`node ${port}: no myself line`);
        if (myself.flags.includes('slave')) {
          const { master_link_status: link } = parseInfo(await command(port, ['INFO', 'replication']));
          if (link !== 'up') throw new NotYet(`replica ${port}: master_link_status:${link}`);
        }
        return { port, lines, myself };
      }),
    );
    const selves = new Map(views.map(({ port, myself }) => [port, describeLine(myself)]));
    for (const { port, lines } of views) {
      const owners = lines.filter((line) => line.slots.length > 0);
      const covered = owners.reduce((sum, line) => sum + slotCount(line.slots), 0);
      if (owners.length !== this.primaryCount || covered !== SLOTS) {
        throw new NotYet(`node ${port}: ${owners.length} primaries own ${covered} slots`);
      }
      const dead = owners.find((owner) => !runningPorts.has(owner.port));
      if (dead) throw new NotYet(`node ${port}: slots still on dead node ${dead.port}`);
      for (const line of lines.filter((candidate) => runningPorts.has(candidate.port))) {
        if (line.flags.some((flag) => /^(fail\??|handshake|noaddr)$/.test(flag))) {
          throw new NotYet(`node ${port}: node ${line.port} is ${line.flags.join(',')}`);
        }
        // A replica's primary takes a manual failover from it only once it knows it as its replica.
        if (describeLine(line) !== selves.get(line.port)) {
          throw new NotYet(
            `node ${port} sees node ${line.port} as ${describeLine(line)}, not ${selves.get(line.port)}`,
          );
        }
      }
    }
  }

  private async describe(): Promise<ClusterNode[]> {
    return Promise.all(this.servers.filter((server) => server.running).map((server) => this.describeNode(server)));
  }

  private async describeNode(server: RedisServer): Promise<ClusterNode> {
    const myself = parseNodes(await command(server.port, ['CLUSTER', 'NODES'])).find((line) =>
      line.flags.includes('myself'),
    );
    if (!myself) throw new Error(`node ${server.port} has no myself line in CLUSTER NODES`);
    return {
      host: HOST,
      port: server.port,
      id: myself.id,
      role: myself.flags.includes('slave') ? 'replica' : 'primary',
      ...(myself.primaryId ? { primaryId: myself.primaryId } : {}),
      slots: myself.slots,
    };
  }

  private server(port: number): RedisServer {
    const server = this.servers.find((candidate) => candidate.port === port);
    if (!server) throw new Error(`no node of this cluster on port ${port}`);
    return server;
  }
}

function clusterNodeArgs(dir: string, port: number, nodeTimeoutMs: number): string[] {
  return [
    ...['--cluster-enabled', 'yes'],
    ...['--cluster-config-file', join(dir, `nodes-${port}.conf`)],
    ...['--cluster-node-timeout', String(nodeTimeoutMs)],
    ...['--cluster-announce-ip', HOST],
    ...['--cluster-allow-reads-when-down', 'no'],
    ...['--cluster-require-full-coverage', 'yes'],
    // Roles move only when a test moves them.
    ...['--cluster-allow-replica-migration', 'no'],
    // A replica takes over however long it was cut off (a restarted or frozen node's replica).
    ...['--cluster-replica-validity-factor', '0'],
    // Full syncs start at once (the default waits 5 s for more replicas) and write into the temp dir.
    ...['--repl-diskless-sync-delay', '0'],
    ...['--dir', dir, '--dbfilename', `dump-${port}.rdb`],
    ...['--loglevel', 'notice'],
  ];
}

/** CLUSTER NODES: `<id> <ip:port@cport> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...` */
function parseNodes(reply: unknown): NodeLine[] {
  return String(reply)
    .trim()
    .split('\n')
    .map((line) => {
      const [id, address, flags, primary, , , , , ...slots] = line.trim().split(' ');
      return {
        id,
        port: Number(address.split('@')[0].split(':').pop()),
        flags: flags.split(','),
        ...(primary !== '-' ? { primaryId: primary } : {}),
        // Slots being imported or migrated ("[5-<-id]") are not owned yet.
        slots: slots
          .filter((slot) => !slot.startsWith('['))
          .map((slot): [number, number] => {
            const [from, to = from] = slot.split('-').map(Number);
            return [from, to];
          }),
      };
    });
}

/** A node's role, primary and slots, to compare two nodes' views of it. */
function describeLine(line: NodeLine): string {
  const role = line.flags.includes('slave') ? `replica of ${line.primaryId}` : 'primary';
  return `${role} ${line.slots.map(([from, to]) => `${from}-${to}`).join(' ')}`.trim();
}

function slotCount(ranges: [number, number][]): number {
  return ranges.reduce((sum, [from, to]) => sum + to - from + 1, 0);
}
