import { afterAll, beforeAll } from '@jest/globals';
import { Redis, type RedisOptions } from 'ioredis';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createConnection, createServer } from 'node:net';

const INSTALL_HINT =
  'redis-server is not installed or not on PATH (or set REDIS_SERVER to its path). The tests start their own ' +
  'throwaway servers: install it first (Debian/Ubuntu: `apt-get install -y redis-server`, macOS: `brew install redis`).';

const running = new Set<ChildProcess>();
// A crashed test run must not leave servers behind.
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/**
 * A throwaway `redis-server` on a free port, with no persistence, stopped by PID.
 * Fault tests can kill it, freeze it (SIGSTOP) and restart it on the same port.
 */
export class RedisServer {
  private process?: ChildProcess;
  private paused = false;
  private log = '';

  private constructor(
    readonly port: number,
    private readonly binary: string,
    private readonly args: readonly string[],
    private readonly configFile?: string,
  ) {}

  /**
   * `binary`: the redis-server to run (default: `$REDIS_SERVER`, else `redis-server` on PATH);
   * `args`: more command-line options, e.g. `['--cluster-enabled', 'yes']`, or a function of the
   * chosen port (a per-node file name), kept across restarts; `configFile`: a config file, passed
   * first as redis-server wants it (a sentinel's, with `args: ['--sentinel']`); `choosePort`: how to
   * pick the port (default: any free one; `freeClusterPort` for a cluster node).
   */
  static async start({
    binary = process.env.REDIS_SERVER || 'redis-server',
    args = [],
    configFile,
    choosePort = freePort,
  }: {
    binary?: string;
    args?: readonly string[] | ((port: number) => readonly string[]);
    configFile?: string;
    choosePort?: () => Promise<number>;
  } = {}): Promise<RedisServer> {
    assertInstalled(binary);
    for (let tries = 1; ; tries++) {
      const port = await choosePort();
      const serverArgs = typeof args === 'function' ? args(port) : args;
      const server = new RedisServer(port, binary, serverArgs, configFile);
      try {
        await server.launch();
        return server;
      } catch (error) {
        // Another process may have taken the port between our probe and redis binding it.
        if (tries === 3) throw error;
      }
    }
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.process?.pid;
  }

  /** Whether the process is up (not killed or stopped; a frozen one counts as running). */
  get running(): boolean {
    return this.process !== undefined && this.process.exitCode === null && this.process.signalCode === null;
  }

  /** The last lines the server logged (stdout and stderr), for an error message. */
  get output(): string {
    return this.log;
  }

  /** Graceful stop (SIGTERM); a frozen server is killed. */
  async stop(): Promise<void> {
    await this.terminate(this.paused ? 'SIGKILL' : 'SIGTERM');
  }

  /** Crash: SIGKILL, no shutdown. */
  async kill(): Promise<void> {
    await this.terminate('SIGKILL');
  }

  /** Freeze the process: connections stay open but nothing is answered. */
  pause(): void {
    this.signal('SIGSTOP');
    this.paused = true;
  }

  resume(): void {
    this.signal('SIGCONT');
    this.paused = false;
  }

  /** Start again on the same port, empty. */
  async restart(): Promise<void> {
    await this.kill();
    await this.launch();
  }

  private async launch(): Promise<void> {
    const options = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    const args = [...options, '--loglevel', 'warning', ...this.args];
    // A config file comes first; the options after it override it.
    const child = spawn(this.binary, this.configFile ? [this.configFile, ...args] : args, {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const keep = (chunk: Buffer) => (this.log = output = (output + chunk.toString()).slice(-4_000));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    running.add(child);
    child.once('exit', () => running.delete(child));
    this.process = child;
    this.paused = false;

    const exitedAtStart = once(child, 'exit').then(([code]) => {
      throw new Error(`redis-server on port ${this.port} exited at start (code ${code}): ${output}`);
    });
    exitedAtStart.catch(() => undefined); // it exits normally later, when a test stops it
    await Promise.race([waitForPong(this.port, () => child.exitCode !== null), exitedAtStart]);
  }

  private signal(signal: NodeJS.Signals): void {
    if (!this.process?.pid) throw new Error('redis-server is not running');
    process.kill(this.process.pid, signal);
  }

  private async terminate(signal: NodeJS.Signals): Promise<void> {
    const child = this.process;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    try {
      process.kill(child.pid!, signal);
    } catch (error) {
      // Already reaped, its 'exit' event still on its way (e.g. a second kill racing the first).
      if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
    }
    await exited;
    this.process = undefined;
    this.paused = false;
  }
}

/**
 * One throwaway server for the tests of the enclosing block, started before them and stopped after them;
 * read `server()` inside tests and hooks.
 *
 * Jest runs the afterAll hooks of one block in the order they were declared, and an inner block's before
 * the outer's: an application or a client opened on this server by hooks declared after this call, in the
 * same block, is closed after the server stopped (its client then only stops reconnecting); opened in an
 * inner block, it is closed before.
 */
export function useRedisServer(options: Parameters<typeof RedisServer.start>[0] = {}): () => RedisServer {
  let server: RedisServer | undefined;
  beforeAll(async () => {
    server = await RedisServer.start(options);
  });
  afterAll(async () => {
    await server?.stop();
  });
  return () => {
    if (!server) throw new Error('the redis-server has not started');
    return server;
  };
}

/**
 * A plain client on `server()` beside the library, to look at (and tamper with) what it wrote, for the
 * tests of the enclosing block; read `redis()` inside tests.
 */
export function useRedisClient(server: () => RedisServer, options: RedisOptions = {}): () => Redis {
  let client: Redis | undefined;
  beforeAll(() => {
    // A client whose server stopped first would keep its half-closed socket, and jest, 2 s after the run.
    client = new Redis(server().url, { disconnectTimeout: 100, ...options });
  });
  afterAll(() => {
    client?.disconnect();
  });
  return () => {
    if (!client) throw new Error('the Redis client has not been created');
    return client;
  };
}

function assertInstalled(binary: string): void {
  const probe = spawnSync(binary, ['--version'], { stdio: 'ignore' });
  if (probe.error) throw new Error(`Cannot run "${binary}": ${INSTALL_HINT}`);
}

export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

/**
 * A free port whose cluster bus port (port + 10000, where a cluster node also listens) is free
 * too. The answer is a probe, not a reservation: a start that loses the race picks another.
 */
export async function freeClusterPort(): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const port = await freePort();
    if (port + 10_000 <= 65_535 && (await isFree(port + 10_000))) return port;
  }
  throw new Error('found no free port whose port + 10000 is free too');
}

async function isFree(port: number): Promise<boolean> {
  const server = createServer();
  const listening = once(server, 'listening').then(
    () => true,
    () => false,
  );
  server.listen(port, '127.0.0.1');
  const free = await listening;
  if (free) {
    server.close();
    await once(server, 'close');
  }
  return free;
}

/** Polls with a raw PING until the server answers PONG (at most 10 s). */
async function waitForPong(port: number, exited: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && !exited()) {
    if (await ping(port)) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`redis-server on port ${port} did not answer PING within 10 s`);
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.setTimeout(500);
    const finish = (answer: boolean) => {
      socket.destroy();
      resolve(answer);
    };
    socket.once('connect', () => socket.write('PING\r\n'));
    // A server with a password answers NOAUTH: it is up all the same.
    socket.once('data', (data) => finish(/^(\+PONG|-NOAUTH)/.test(data.toString())));
    socket.once('error', () => finish(false));
    socket.once('timeout', () => finish(false));
  });
}
