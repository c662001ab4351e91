import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';

/** Jest global setup: compiles `libs/lock` to `libs/lock/dist`, which child-process workers import. */
export default function buildLibrary(): void {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-p', 'libs/lock/tsconfig.lib.json'], { stdio: 'inherit' });
}
