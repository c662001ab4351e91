import { beforeAll } from '@jest/globals';
import { execFile } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';
import { promisify } from 'node:util';
import { BUILD_DIR_VARIABLE } from './global-setup.js';

/**
 * What child processes run, built as a user would build it, on demand: once per jest run, by the first
 * spec that needs it, and only when a spec that needs it runs.
 *
 * - `library`: `libs/lock/dist` (ESM, with declarations) and `libs/lock/dist/cjs` (CommonJS, plus the
 *   README and LICENSE beside the package's package.json): what the workers of test/support/workers
 *   import, what the package, docs and optional-ioredis specs read or pack, what the examples run.
 * - `demo`: `dist/apps/demo`, the demo app that demo-processes runs as `npm start` does.
 *
 * Jest runs spec files in parallel worker processes; they agree through files in the directory that
 * the global setup (test/support/global-setup.ts) makes for the run and names in
 * `$NEST_LOCK_TEST_BUILDS`: the worker that creates `<target>.lock` first (`open(…, 'wx')`, atomic)
 * builds and then writes `<target>.done` (or `<target>.failed` with the compiler's output); the
 * others wait for one of the two. The global teardown removes the directory, so the next run builds
 * again (the sources may have changed in between).
 */
export type BuildTarget = 'library' | 'demo';

const root = fileURLToPath(new URL('../..', import.meta.url));
const require = createRequire(import.meta.url);
const run = promisify(execFile);

/** The steps of each target; the steps of one target run at once (the ESM and CJS builds are independent). */
const STEPS: Record<BuildTarget, string[][]> = {
  library: [
    [require.resolve('typescript/bin/tsc'), '-p', 'libs/lock/tsconfig.lib.json'],
    // The CommonJS build (tsconfig.cjs.json), then its package.json, README and LICENSE.
    ['libs/lock/build-package.mjs'],
  ],
  demo: [[require.resolve('@nestjs/cli/bin/nest.js'), 'build', 'demo']],
};

/** How long a build may take (a busy machine, two tsc at once); the hook of `useBuilt` gets as long. */
export const BUILD_TIMEOUT_MS = 300_000;

const builds = new Map<BuildTarget, Promise<void>>();

/**
 * Resolves once `target` is built in this jest run: builds it, or waits for the jest worker that
 * builds it. Rejects with the compiler's output when the build failed.
 */
export function ensureBuilt(target: BuildTarget): Promise<void> {
  let build = builds.get(target);
  if (!build) {
    build = buildOnce(target);
    builds.set(target, build);
  }
  return build;
}

/** Whether `target` was built for this process's specs (`ensureBuilt` resolved). */
export function isBuilt(target: BuildTarget): boolean {
  const directory = process.env[BUILD_DIR_VARIABLE];
  return directory !== undefined && existsSync(join(directory, `${target}.done`));
}

/**
 * In the describe block it is called in (or at a module's top level: the spec file's root block),
 * builds `target` before the block's first test, in a `beforeAll` of its own timeout — the build is
 * not counted in any test's time. Jest runs no hook of a block none of whose tests runs (`-t`).
 */
export function useBuilt(target: BuildTarget): void {
  beforeAll(() => ensureBuilt(target), BUILD_TIMEOUT_MS);
}

async function buildOnce(target: BuildTarget): Promise<void> {
  const directory = process.env[BUILD_DIR_VARIABLE];
  if (!directory) {
    throw new Error(
      `${BUILD_DIR_VARIABLE} is not set: run jest with a config whose globalSetup is test/support/global-setup.ts`,
    );
  }
  const lock = join(directory, `${target}.lock`);
  const done = join(directory, `${target}.done`);
  const failed = join(directory, `${target}.failed`);
  let owner: number;
  try {
    owner = openSync(lock, 'wx');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return waitForBuild(target, lock, done, failed);
  }
  writeFileSync(owner, String(process.pid));
  closeSync(owner);
  const started = performance.now();
  try {
    await Promise.all(
      STEPS[target].map((args) => run(process.execPath, args, { cwd: root, maxBuffer: 64 * 1024 * 1024 })),
    );
  } catch (error) {
    const { stdout = '', stderr = '', message } = error as { stdout?: string; stderr?: string; message: string };
    const report = `the ${target} build failed: ${message}\n${stdout}${stderr}`;
    writeAtomically(failed, report);
    throw new Error(report, { cause: error });
  }
  writeAtomically(done, `${Math.round(performance.now() - started)} ms in process ${process.pid}\n`);
}

async function waitForBuild(target: BuildTarget, lock: string, done: string, failed: string): Promise<void> {
  let builder: number | undefined;
  for (;;) {
    if (existsSync(done)) return;
    if (existsSync(failed)) throw new Error(`in jest worker ${builder}: ${readFileSync(failed, 'utf8')}`);
    // The builder writes its pid right after creating the lock file: an empty file is a build starting.
    builder ??= Number(readFileSync(lock, 'utf8')) || undefined;
    if (builder !== undefined && !alive(builder)) {
      throw new Error(`the jest worker that was building the ${target} (pid ${builder}) ended before it finished`);
    }
    await delay(100);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Writes a whole file, or nothing: a waiting worker never reads half of it. */
function writeAtomically(path: string, text: string): void {
  writeFileSync(`${path}.${process.pid}`, text);
  renameSync(`${path}.${process.pid}`, path);
}
