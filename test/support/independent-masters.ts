import { Redis } from 'ioredis';
import { join } from 'node:path';
import type { RedisServer } from './redis-server.js';
import { type Address, HOST, Startup } from './topology-tools.js';

/**
 * `n` unrelated redis-server primaries (Redlock's setting): each can crash, come back on its port
 * (empty, or from its last `snapshot` when started with a `snapshotDir`) or freeze.
 */
export class IndependentMasters {
  /** How long the start took, in ms. */
  startMs = 0;

  private constructor(
    readonly servers: readonly RedisServer[],
    private readonly socketDir?: string,
  ) {}

  /** Starts `n` servers within `timeoutMs`, or throws having killed those it started. */
  /**
   * `snapshotDir`: each server keeps an RDB file there (written only by `snapshot`) and reloads it at
   * a restart. `socketDir`: each server also listens on a unix socket there (`socketOf(i)`).
   */
  static async start(
    n: number,
    {
      timeoutMs = 20_000,
      snapshotDir,
      socketDir,
    }: { timeoutMs?: number; snapshotDir?: string; socketDir?: string } = {},
  ): Promise<IndependentMasters> {
    const started = performance.now();
    const args = (port: number) => [
      ...(snapshotDir ? ['--dir', snapshotDir, '--dbfilename', `master-${port}.rdb`] : []),
      ...(socketDir ? ['--unixsocket', join(socketDir, `master-${port}.sock`), '--unixsocketperm', '700'] : []),
    ];
    return Startup.run(`${n} independent masters`, timeoutMs, async (startup) => {
      const masters = new IndependentMasters(
        await Promise.all(Array.from({ length: n }, () => startup.server({ args }))),
        socketDir,
      );
      masters.startMs = Math.round(performance.now() - started);
      return masters;
    });
  }

  get addresses(): Address[] {
    return this.servers.map((server) => ({ host: HOST, port: server.port }));
  }

  get urls(): string[] {
    return this.servers.map((server) => server.url);
  }

  /** The unix socket server `i` listens on (started with a `socketDir`). */
  socketOf(i: number): string {
    if (!this.socketDir) throw new Error('the masters were started without a socketDir');
    return join(this.socketDir, `master-${this.at(i).port}.sock`);
  }

  /** Crash server `i` (SIGKILL). */
  async kill(i: number): Promise<void> {
    await this.at(i).kill();
  }

  /** Writes server `i`'s data to its RDB file now (SAVE): what a restart reloads. */
  async snapshot(i: number): Promise<void> {
    const client = new Redis(this.at(i).url, { lazyConnect: true, maxRetriesPerRequest: 0 });
    try {
      await client.connect();
      await client.save();
    } finally {
      client.disconnect();
    }
  }

  /** Start server `i` again on its port (killed first if it runs): empty, or from its last snapshot. */
  async restart(i: number): Promise<void> {
    await this.at(i).restart();
  }

  /** Freeze server `i` (SIGSTOP): connections stay open, nothing is answered. */
  pause(i: number): void {
    this.at(i).pause();
  }

  resume(i: number): void {
    this.at(i).resume();
  }

  /** Kills every server (SIGKILL, frozen ones too). */
  async stop(): Promise<void> {
    await Promise.all(this.servers.map((server) => server.kill()));
  }

  private at(i: number): RedisServer {
    const server = this.servers[i];
    if (!server) throw new Error(`no server ${i}: there are ${this.servers.length}`);
    return server;
  }
}
