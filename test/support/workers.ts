import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';
import { promisify } from 'node:util';
import { isBuilt, useBuilt } from './built.js';
import type { HoldRecord } from './history.js';

const run = promisify(execFile);

// The workers import the built library (libs/lock/dist), as a user's app would: a spec file that
// imports these helpers has it built before its first test (once per jest run, test/support/built.ts).
useBuilt('library');

/**
 * What a hold-history worker (workers/hold-history.mjs) prints: its holds, its errors by code, the
 * draws of a fence that failed by code (the hold has no fence then), its slowest call (ms).
 */
export interface HoldHistoryReport {
  holds: HoldRecord[];
  errors: Record<string, number>;
  fenceErrors: Record<string, number>;
  slowestCall: number;
}

function scriptOf(name: string): string {
  if (!isBuilt('library')) {
    throw new Error(`worker ${name} runs libs/lock/dist, which is not built yet: start it from a test or a hook`);
  }
  return fileURLToPath(new URL(`./workers/${name}.mjs`, import.meta.url));
}

/** One run of hold-history workers: `processes` processes of `workers` loops each on `keys`, for `durationMs`. */
export interface HoldHistoryRun {
  /** A redis:// URL, `cluster:<host:port>,…` or `sentinel:<name>,<host:port>,…` (see workers/worker-app.mjs). */
  target: string;
  keys: string[];
  processes: number;
  workers: number;
  durationMs: number;
  /** Each call's timeout. */
  timeoutMs: number;
  /** Locks, or permits of a semaphore of that limit. Default: locks. */
  semaphoreLimit?: number;
}

/** Runs workers/hold-history.mjs as `run` says; resolves with each process's report. */
export function runHoldHistory(run: HoldHistoryRun): Promise<HoldHistoryReport[]> {
  const mode = run.semaphoreLimit === undefined ? 'lock' : `semaphore:${run.semaphoreLimit}`;
  return runWorkers<HoldHistoryReport>('hold-history', run.processes, [
    run.target,
    run.keys.join(','),
    run.processes,
    run.workers,
    run.durationMs,
    run.timeoutMs,
    mode,
  ]);
}

/**
 * Runs `test/support/workers/<name>.mjs` in `count` child processes at once; resolves with each one's
 * JSON output. When one fails, the others get 2 s to end (their own reports of a hang say more
 * together), then are killed: left running, they would keep jest from exiting. The error tells
 * every failure.
 */
export async function runWorkers<T>(name: string, count: number, args: (string | number)[]): Promise<T[]> {
  const failed = new AbortController();
  const runs = Array.from({ length: count }, () =>
    run(process.execPath, [scriptOf(name), ...args.map(String)], {
      timeout: 120_000,
      maxBuffer: 64 * 1024 * 1024,
      signal: failed.signal,
      killSignal: 'SIGKILL',
    }),
  );
  try {
    return (await Promise.all(runs)).map(({ stdout }) => JSON.parse(stdout) as T);
  } catch {
    await Promise.race([Promise.allSettled(runs), delay(2_000)]);
    failed.abort();
    const outcomes = await Promise.allSettled(runs);
    const failures = outcomes.flatMap((outcome) => (outcome.status === 'rejected' ? [String(outcome.reason)] : []));
    throw new Error(`${failures.length} of ${count} ${name} workers failed:\n${failures.join('\n')}`);
  }
}

/**
 * Starts `test/support/workers/<name>.mjs` and returns at once. Its stdin and stdout are pipes only when
 * asked for (a pipe nobody reads can fill up and stall the worker); its stderr is the test's.
 */
export function spawnWorker(
  name: string,
  args: (string | number)[],
  { stdin = 'ignore', stdout = 'ignore' }: { stdin?: 'pipe' | 'ignore'; stdout?: 'pipe' | 'ignore' } = {},
): ChildProcess {
  return spawn(process.execPath, [scriptOf(name), ...args.map(String)], { stdio: [stdin, stdout, 'inherit'] });
}

/** Runs a worker to its end (at most `timeoutMs`); rejects when it fails. */
export async function runWorker(name: string, args: (string | number)[], timeoutMs = 60_000): Promise<void> {
  await run(process.execPath, [scriptOf(name), ...args.map(String)], { timeout: timeoutMs });
}

/** Calls `onReport` with each JSON line a worker spawned with `stdout: 'pipe'` prints. */
export function onWorkerReports<T>(child: ChildProcess, onReport: (report: T) => void): void {
  createInterface({ input: child.stdout! }).on('line', (line) => onReport(JSON.parse(line) as T));
}

/** Resolves once the process has exited (at once when it already has). */
export function workerExited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Starts a long-running worker; resolves with the process and the first JSON line it prints. */
export async function startWorker<T>(
  name: string,
  args: (string | number)[],
): Promise<{ child: ChildProcess; report: T }> {
  const child = spawnWorker(name, args, { stdout: 'pipe' });
  const lines = createInterface({ input: child.stdout! });
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`worker ${name} exited with code ${code} before reporting`);
  });
  exited.catch(() => undefined);
  const [line] = (await Promise.race([once(lines, 'line'), exited])) as [string];
  lines.close();
  return { child, report: JSON.parse(line) as T };
}

/** SIGKILL, and wait until the process is gone. */
export async function killWorker(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}
