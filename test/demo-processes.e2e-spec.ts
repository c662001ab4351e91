import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { StampedeRun } from '../apps/demo/src/stampede/stampede.service.js';
import type { LeaderView } from '../apps/demo/src/leader/leader.controller.js';
import type { JobRun } from '../apps/demo/src/storage/demo-storage.js';
import { setTimeout as delay } from 'node:timers/promises';
import { useBuilt } from './support/built.js';
import { freePort, RedisServer } from './support/redis-server.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const DEMO_MAIN = `${root}dist/apps/demo/apps/demo/src/main.js`;
const STAMPEDE = `${root}apps/demo/scripts/stampede.mjs`;

// Every test runs the built demo (dist/apps/demo), as `npm start` does: built once per jest run.
useBuilt('demo');

/** Three demo processes on one Redis, as three pods behind a load balancer. */
describe('the demo on three processes', () => {
  let server: RedisServer;
  const demos: ChildProcess[] = [];
  const urls: string[] = [];

  beforeAll(async () => {
    server = await RedisServer.start();
    const ports = [await freePort(), await freePort(), await freePort()];
    for (const port of ports) urls.push(`http://127.0.0.1:${port}`);
    for (const [i, port] of ports.entries()) {
      // A slow backend (1 s): without the lock, every request must miss before the first load fills the
      // cache, and on a busy machine 150 requests can take longer than the default 200 ms to arrive.
      const env = { ...process.env, PORT: String(port), REDIS_URL: server.url, BACKEND_LATENCY_MS: '1000' };
      // The first knows the other two, for POST /stampede with spread: true.
      if (i === 0) Object.assign(env, { DEMO_PEERS: urls.slice(1).join(',') });
      demos.push(spawn(process.execPath, [DEMO_MAIN], { env, stdio: 'ignore' }));
    }
    await Promise.all(urls.map(waitUntilAnswering));
  });
  afterAll(async () => {
    await Promise.all(
      demos.map(async (demo) => {
        if (demo.exitCode !== null || demo.signalCode !== null) return; // the leader stopped by its test
        const exited = once(demo, 'exit');
        demo.kill('SIGTERM');
        await exited;
      }),
    );
    await server.stop();
  });

  async function stampede(lock: 'on' | 'off' | 'single-flight') {
    const { stdout } = await promisify(execFile)(process.execPath, [
      STAMPEDE,
      '--n',
      '150',
      '--lock',
      lock,
      '--json',
      ...urls,
    ]);
    return JSON.parse(stdout) as {
      backendCalls: number;
      statuses: Record<string, number>;
      redisCommandsPerRequest: number | null;
    };
  }

  it('runs the scheduled price refresh on one of them per firing, the others skipping (/stats, /stats/jobs)', async () => {
    // Started together, the three fire the schedule (every 3 s) at the same moments.
    const runsNow = async () => (await (await fetch(`${urls[2]}/stats/jobs`)).json()) as JobRun[];
    while ((await runsNow()).length < 3) await delay(250);
    const runs = await runsNow();
    const stats = (await (await fetch(`${urls[1]}/stats`)).json()) as Record<string, number>;

    const firings = runs.map((run) => run.firing);
    expect(new Set(firings).size).toBe(firings.length); // one run per firing
    for (let i = 1; i < firings.length; i++) expect(firings[i - 1] - firings[i]).toBe(3_000); // none missed
    expect(stats.priceRefreshRuns).toBeGreaterThanOrEqual(3);
    // Each firing fired in all three: about two skips per run (a firing may be counted before its run).
    expect(stats.priceRefreshFirings).toBeGreaterThanOrEqual(3 * stats.priceRefreshRuns - 3);
    expect(stats.priceRefreshFirings).toBeLessThanOrEqual(3 * stats.priceRefreshRuns + 3);
  }, 30_000);

  it('makes one backend call in total for 150 concurrent requests spread over them', async () => {
    const summary = await stampede('on');

    expect(summary.statuses).toEqual({ 200: 150 });
    expect(summary.backendCalls).toBe(1);
  });

  it('makes one backend call in total with single-flight too, and fewer Redis commands per request than the lock', async () => {
    const single = await stampede('single-flight');
    const locked = await stampede('on');

    expect(single.statuses).toEqual({ 200: 150 });
    expect(single.backendCalls).toBe(1);
    expect(single.redisCommandsPerRequest).toBeLessThan(locked.redisCommandsPerRequest!);
  });

  it('answers 502 in every process when the one single-flight load fails (the error travels by name)', async () => {
    const id = 4_242;
    for (const url of urls) await fetch(`${url}/backend/failures/${id}`, { method: 'POST' });
    await fetch(`${urls[0]}/cache/${id}`, { method: 'DELETE' });
    try {
      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) => fetch(`${urls[i % 3]}/products/${id}?lock=single-flight`)),
      );
      expect(answers.map((answer) => answer.status)).toEqual(Array(30).fill(502));
    } finally {
      for (const url of urls) await fetch(`${url}/backend/failures/${id}`, { method: 'DELETE' });
    }
  });

  it('makes many without the lock', async () => {
    const summary = await stampede('off');

    expect(summary.statuses).toEqual({ 200: 150 });
    expect(summary.backendCalls).toBeGreaterThan(1);
  });

  it('spreads a stampede fired by the page (POST /stampede) over the three: one backend call with the lock', async () => {
    const response = await fetch(`${urls[0]}/stampede`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ n: 150, lock: 'both', spread: true }),
    });
    expect(response.status).toBe(200);
    const { runs } = (await response.json()) as { runs: StampedeRun[] };
    const [on, off] = runs;

    expect(on).toMatchObject({ lock: 'on', processes: 3, backendCalls: 1, statuses: { 200: 150 } });
    expect(off).toMatchObject({ lock: 'off', processes: 3, statuses: { 200: 150 } });
    expect(off.backendCalls).toBeGreaterThan(1);
  });

  // Last: it stops one of the three.
  it('elects one leader, runs the leader-only stock report on it alone, and hands over at once when it stops', async () => {
    const views = async (among = urls) =>
      Promise.all(among.map(async (url) => (await (await fetch(`${url}/leader`)).json()) as LeaderView));
    let now = await views();
    while (now[0].runs.length < 3) {
      await delay(250);
      now = await views();
    }
    const { leader, runs } = now[0];
    // Every process shows the same leader, and exactly one says it leads: that one.
    expect(now.map((view) => view.leader)).toEqual([leader, leader, leader]);
    const leading = now.filter((view) => view.here.leads);
    expect(leading.map((view) => [view.here.by, view.here.term])).toEqual([[leader!.by, leader!.term]]);
    // Every run of the report by the leader, under its term, one per firing.
    expect(new Set(runs.map((run) => `${run.by} ${run.term}`))).toEqual(new Set([`${leader!.by} ${leader!.term}`]));
    expect(new Set(runs.map((run) => run.firing)).size).toBe(runs.length);

    // The leader shut down (SIGTERM): it resigns, and another leads within a second, under a higher term.
    const index = now.indexOf(leading[0]);
    const stopping = demos[index];
    const stoppedAt = Date.now();
    const exited = once(stopping, 'exit');
    stopping.kill('SIGTERM');
    await exited;
    const others = urls.filter((_, i) => i !== index);
    let after = await views(others);
    while (!after.some((view) => view.here.leads)) {
      await delay(20);
      after = await views(others);
    }
    expect(Date.now() - stoppedAt).toBeLessThan(3_000); // its lease is 5 s: the handover did not wait for it
    const successor = after.find((view) => view.here.leads)!;
    expect(successor.here.term).toBeGreaterThan(leader!.term);
    expect(after.filter((view) => view.here.leads)).toHaveLength(1);
    // The next firings run on the new leader.
    while (!(await views(others))[0].runs.some((run) => run.term === successor.here.term)) await delay(250);
    expect((await views(others))[0].leader).toMatchObject({ by: successor.here.by, term: successor.here.term });
  }, 30_000);
});

describe('the built demo without REDIS_URL (what npm start runs)', () => {
  it('starts on the memory store, says that locks are process-local, and serves products', async () => {
    const port = await freePort();
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port) };
    delete env.REDIS_URL;
    const demo = spawn(process.execPath, [DEMO_MAIN], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    demo.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    try {
      await waitUntilAnswering(`http://127.0.0.1:${port}`);
      const response = await fetch(`http://127.0.0.1:${port}/products/1`);

      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({ id: 1, name: 'Product 1' });
      expect(output).toContain('locks are process-local');
    } finally {
      const exited = once(demo, 'exit');
      demo.kill('SIGTERM');
      await exited;
    }
  });
});

/**
 * What `npm start` leaves behind when it is stopped. The demo runs in its own process group, as
 * in a terminal; `--ignore-scripts` skips the `prestart` build (`useBuilt('demo')` built the demo,
 * and a second build would delete `dist/` under the other test files).
 */
describe('npm start, stopped', () => {
  async function startWithNpm(): Promise<ChildProcess> {
    const port = await freePort();
    const npm = spawn('npm', ['start', '--ignore-scripts'], {
      cwd: root,
      env: { ...process.env, PORT: String(port) },
      detached: true,
      stdio: 'ignore',
    });
    await waitUntilAnswering(`http://127.0.0.1:${port}`);
    return npm;
  }

  async function expectGroupGone(group: number): Promise<void> {
    try {
      const deadline = Date.now() + 5_000;
      while (groupAlive(group) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(groupAlive(group)).toBe(false);
    } finally {
      if (groupAlive(group)) process.kill(-group, 'SIGKILL');
    }
  }

  it('by SIGTERM to npm alone (a process manager), ends every process it started', async () => {
    const npm = await startWithNpm();
    process.kill(npm.pid!, 'SIGTERM');

    await expectGroupGone(npm.pid!);
  });

  it('by Ctrl-C (SIGINT to the whole process group), ends every process it started', async () => {
    const npm = await startWithNpm();
    process.kill(-npm.pid!, 'SIGINT');

    await expectGroupGone(npm.pid!);
  });
});

function groupAlive(group: number): boolean {
  try {
    process.kill(-group, 0);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw error;
  }
}

async function waitUntilAnswering(url: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`${url}/stats`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`the demo at ${url} did not answer within 20 s`);
}
