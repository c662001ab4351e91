// The second half of `npm run build`, after the ESM build in libs/lock/dist: the CommonJS
// build in dist/cjs (with the package.json that makes Node and TypeScript read it as such),
// and the README and LICENSE of the repository beside the package's own package.json.
import { execFileSync } from 'node:child_process';
import { copyFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const library = dirname(fileURLToPath(import.meta.url));
const root = join(library, '../..');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');

execFileSync(process.execPath, [tsc, '-p', join(library, 'tsconfig.cjs.json')], { stdio: 'inherit' });
writeFileSync(join(library, 'dist/cjs/package.json'), '{ "type": "commonjs" }\n');
for (const file of ['README.md', 'LICENSE']) copyFileSync(join(root, file), join(library, file));
