import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';

/**
 * Jest global setup: compiles what child processes run, as a user would run it — the library
 * (`libs/lock/dist`, imported by the workers, and its CommonJS build in `libs/lock/dist/cjs`,
 * which the package tests pack) and the demo app (`dist/apps/demo`).
 */
export default function buildForChildProcesses(): void {
  const require = createRequire(import.meta.url);
  const run = (script: string, args: string[]) =>
    execFileSync(process.execPath, [require.resolve(script), ...args], { stdio: 'inherit' });
  run('typescript/bin/tsc', ['-p', 'libs/lock/tsconfig.lib.json']);
  execFileSync(process.execPath, ['libs/lock/build-package.mjs'], { stdio: 'inherit' });
  run('@nestjs/cli/bin/nest.js', ['build', 'demo']);
}
