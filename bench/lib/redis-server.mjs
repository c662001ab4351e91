// A private, throwaway redis-server for the bench: a free 127.0.0.1 port, no persistence,
// stopped by its PID. Never touches a server it did not start.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createConnection, createServer } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';

const BINARY = process.env.REDIS_SERVER || 'redis-server';
const started = new Set();
// A crashed or interrupted bench must not leave its server behind ('exit' does not run on a signal).
process.once('exit', () => {
  for (const child of started) child.kill('SIGKILL');
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    for (const child of started) child.kill('SIGKILL');
    process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
  });
}

/**
 * Starts `redis-server` on a free port; resolves once it answers PING. With `cpus` (e.g. `'0'`)
 * the server runs pinned to those CPUs (through `taskset`, which execs it under the same PID);
 * `args(port)`: more command-line options (a cluster node's config file); `clusterBus`: the port
 * + 10000 (a cluster node's bus) must be free too.
 */
export async function startRedis({ cpus, args = () => [], clusterBus = false } = {}) {
  const probe = spawnSync(BINARY, ['--version'], { encoding: 'utf8' });
  if (probe.error) throw new Error(`Cannot run "${BINARY}": install redis-server or set REDIS_SERVER to its path`);
  const version = /v=(\S+)/.exec(probe.stdout)?.[1] ?? 'unknown';
  for (let tries = 1; ; tries++) {
    const port = clusterBus ? await freeClusterPort() : await freePort();
    try {
      return await launch(port, version, cpus, args(port));
    } catch (error) {
      // Another process may have taken the port between our probe and redis binding it.
      if (tries === 3) throw error;
    }
  }
}

async function launch(port, version, cpus, extra) {
  const args = [BINARY, '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  args.push('--loglevel', 'warning', ...extra);
  const [command, ...rest] = cpus === undefined ? args : ['taskset', '-c', cpus, ...args];
  const child = spawn(command, rest, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr = (stderr + chunk.toString()).slice(-2_000)));
  started.add(child);
  child.once('exit', () => started.delete(child));
  const deadline = Date.now() + 10_000;
  while (!(await ping(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      if (child.exitCode === null) child.kill('SIGKILL');
      throw new Error(`redis-server on port ${port} did not start: ${stderr}`);
    }
    await delay(20);
  }
  return {
    port,
    version,
    cpus,
    pid: child.pid,
    url: `redis://127.0.0.1:${port}`,
    /** SIGTERM by PID, SIGKILL after 5 s. */
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      process.kill(child.pid, 'SIGTERM');
      const timer = setTimeout(() => child.exitCode === null && process.kill(child.pid, 'SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

async function freePort() {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** A free port whose port + 10000 is free as well (a probe, not a reservation). */
async function freeClusterPort() {
  for (let tries = 0; tries < 50; tries++) {
    const port = await freePort();
    if (port + 10_000 > 65_535) continue;
    const bus = createServer();
    const free = await new Promise((resolve) => {
      bus.once('error', () => resolve(false));
      bus.listen(port + 10_000, '127.0.0.1', () => resolve(true));
    });
    if (free) {
      bus.close();
      await once(bus, 'close');
      return port;
    }
  }
  throw new Error('found no free port whose port + 10000 is free too');
}

function ping(port) {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.setTimeout(500);
    const finish = (answer) => {
      socket.destroy();
      resolve(answer);
    };
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => finish(data.toString().startsWith('+PONG')));
    socket.once('error', () => finish(false));
    socket.once('timeout', () => finish(false));
  });
}
