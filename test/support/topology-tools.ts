import { rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { RedisServer } from './redis-server.js';

/** Where a client connects: `new Redis.Cluster(nodes)`, `{ sentinels, name }`. */
export interface Address {
  host: string;
  port: number;
}

export const HOST = '127.0.0.1';

const tempDirs = new Set<string>();
// A crashed run leaves no temp dir behind (redis-server.ts SIGKILLs the servers).
process.once('exit', () => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

/** A temp dir for config files, removed by `removeTempDir` or when the process exits. */
export async function makeTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

export async function removeTempDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  tempDirs.delete(dir);
}

/**
 * One admin command on its own short-lived connection, closed whatever happens: no retry, no
 * offline queue; a dead or frozen server fails it within `timeoutMs`.
 */
export async function command(port: number, args: readonly (string | number)[], timeoutMs = 2_000): Promise<unknown> {
  const client = new Redis({
    host: HOST,
    port,
    lazyConnect: true,
    enableReadyCheck: false,
    enableOfflineQueue: false,
    disableClientInfo: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    disconnectTimeout: 100, // a frozen server never closes its side: destroy the socket soon
  });
  client.on('error', () => undefined); // the awaited command reports it
  const [name, ...rest] = args.map(String);
  const answer = client.connect().then(() => client.call(name, ...rest));
  answer.catch(() => undefined); // past the timeout, nobody awaits it
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`port ${port}: no answer to ${args.join(' ')} within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([answer, timedOut]);
  } finally {
    clearTimeout(timer);
    client.disconnect();
  }
}

/** `INFO`, `CLUSTER INFO`: the `key:value` lines of a reply. */
export function parseInfo(reply: unknown): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of String(reply).split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields[line.slice(0, colon)] = line.slice(colon + 1);
  }
  return fields;
}

/** SENTINEL MASTER/REPLICAS/SENTINELS: a flat [field, value, ...] list as an object. */
export function parsePairs(reply: unknown): Record<string, string> {
  const list = reply as string[];
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < list.length; i += 2) fields[list[i]] = list[i + 1];
  return fields;
}

/** Thrown by a probe of `waitFor` that is not there yet: its message says why. */
export class NotYet extends Error {}

export interface WaitOptions {
  intervalMs?: number;
  /** The start this wait is part of: the wait stops when the start fails, and tells it what it waits for. */
  startup?: Startup;
}

/**
 * Polls `probe` every `intervalMs` until it returns without throwing, or throws, past the
 * deadline (epoch ms), an error naming `what` and the probe's last complaint.
 */
export async function waitFor<T>(
  what: string,
  deadline: number,
  probe: () => Promise<T>,
  { intervalMs = 100, startup }: WaitOptions = {},
): Promise<T> {
  for (;;) {
    startup?.check();
    let why: string;
    try {
      return await probe();
    } catch (error) {
      why = error instanceof Error ? error.message : String(error);
    }
    if (startup) startup.step = `waiting for ${what} (last: ${why})`;
    if (Date.now() + intervalMs > deadline) throw new Error(`${what}: not reached in time (last: ${why})`);
    await sleep(intervalMs);
  }
}

/**
 * The servers a topology's start launched, so that a start which fails or runs past its deadline
 * kills them all, and one that was still launching when it failed kills itself.
 */
export class Startup {
  readonly deadline: number;
  /** What it is doing, for the error of a start that runs out of time. */
  step = 'starting';
  private readonly servers: RedisServer[] = [];
  /** Launches still on their way: a failed start waits for them (each kills itself) before cleaning up. */
  private readonly launching = new Set<Promise<unknown>>();
  private failure?: Error;

  constructor(
    readonly what: string,
    readonly ms: number,
  ) {
    this.deadline = Date.now() + ms;
  }

  /** Throws once the start has failed or is past its deadline: a poll stops there. */
  check(): void {
    if (this.failure) throw this.failure;
    if (Date.now() > this.deadline) throw new Error(`${this.what} did not finish within ${this.ms / 1000} s`);
  }

  remainingMs(): number {
    return Math.max(0, this.deadline - Date.now());
  }

  async server(options: Parameters<typeof RedisServer.start>[0]): Promise<RedisServer> {
    this.check();
    this.step = 'starting redis-server processes';
    const launch = this.launch(options);
    this.launching.add(launch);
    try {
      return await launch;
    } finally {
      this.launching.delete(launch);
    }
  }

  private async launch(options: Parameters<typeof RedisServer.start>[0]): Promise<RedisServer> {
    const server = await RedisServer.start(options);
    this.servers.push(server);
    if (this.failure) {
      await server.kill();
      throw this.failure;
    }
    return server;
  }

  /**
   * Runs `build` within the deadline. If it throws or times out: lets it stop (each of its steps
   * checks `check()`; a server still launching kills itself), kills every server it launched,
   * runs `cleanup` and throws an error with the servers' last log lines.
   */
  static async run<T>(
    what: string,
    ms: number,
    build: (startup: Startup) => Promise<T>,
    cleanup: () => Promise<void> = async () => undefined,
  ): Promise<T> {
    const startup = new Startup(what, ms);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms / 1000} s (${startup.step})`)), ms);
    });
    const building = build(startup);
    try {
      return await Promise.race([building, timedOut]);
    } catch (error) {
      startup.failure = error instanceof Error ? error : new Error(String(error));
      await building.catch(() => undefined);
      // `build` may have stopped at its first failed step while other servers were still launching.
      await Promise.allSettled([...startup.launching]);
      const logs = startup.servers
        .map((server) => `--- port ${server.port}:\n${server.output.trim().split('\n').slice(-8).join('\n')}`)
        .join('\n');
      await Promise.all(startup.servers.map((server) => server.kill()));
      await cleanup();
      throw new Error(`${startup.failure.message}\n${logs}`, { cause: error });
    } finally {
      clearTimeout(timer);
    }
  }
}

/** How long `fn` took, in ms. */
export async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const value = await fn();
  return [value, Math.round(performance.now() - started)];
}
