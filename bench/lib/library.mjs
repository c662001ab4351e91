// The nest-lock build a run measures, frozen at the start: the dist is copied aside (under
// node_modules/.cache, where its imports still resolve to the project's node_modules), so that a
// rebuild of libs/lock/dist while the bench runs (tests, a watcher, someone else's `npm run build`)
// cannot change the code between two runs of the same bench. Removed at the end.
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

export function snapshotLibrary(root, source = join(root, 'libs/lock/dist')) {
  const from = resolve(source);
  if (!existsSync(join(from, 'index.js'))) {
    throw new Error(`${from}/index.js is missing: run \`npm run build\` first (\`npm run bench\` does)`);
  }
  const dir = join(root, 'node_modules/.cache/nest-lock-bench', `${process.pid}-${Date.now()}`);
  mkdirSync(dir, { recursive: true });
  cpSync(from, dir, { recursive: true });
  // A digest of the JavaScript measured: two runs with the same digest measured the same code.
  const hash = createHash('sha256');
  for (const file of listJs(dir)) hash.update(relative(dir, file)).update(readFileSync(file));
  return {
    dir,
    source: relative(root, from) || '.',
    digest: hash.digest('hex').slice(0, 12),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

function listJs(dir) {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return listJs(path);
      return name.endsWith('.js') ? [path] : [];
    });
}
