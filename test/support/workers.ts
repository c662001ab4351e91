import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Runs `test/support/workers/<name>.mjs` in `count` child processes at once; resolves with each one's JSON output. */
export async function runWorkers<T>(name: string, count: number, args: (string | number)[]): Promise<T[]> {
  const script = fileURLToPath(new URL(`./workers/${name}.mjs`, import.meta.url));
  const runs = Array.from({ length: count }, () =>
    run(process.execPath, [script, ...args.map(String)], { timeout: 120_000 }),
  );
  return (await Promise.all(runs)).map(({ stdout }) => JSON.parse(stdout) as T);
}
