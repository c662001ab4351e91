import { describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { ensureBuilt } from './support/built.js';

const library = fileURLToPath(new URL('../libs/lock/', import.meta.url));
const root = join(library, '../..');

interface PackResult {
  files: { path: string }[];
}
interface SourceMap {
  sourceRoot?: string;
  sources: string[];
}

/** What `npm pack` would put in the tarball, both formats built (below, before the tests are collected). */
function packedFiles(): string[] {
  const output = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: library,
    encoding: 'utf8',
  });
  const [result] = JSON.parse(output) as PackResult[];
  return result.files.map((file) => file.path).sort();
}

/** Every path string under `exports` (conditions nest to any depth). */
function exportTargets(exports: unknown): string[] {
  if (typeof exports === 'string') return [exports];
  return Object.values(exports as Record<string, unknown>).flatMap(exportTargets);
}

// Every test reads the build: built (once per jest run) before the file's tests are even collected.
await ensureBuilt('library');
const packageJson = JSON.parse(readFileSync(join(library, 'package.json'), 'utf8')) as Record<string, unknown>;
const files = packedFiles();
const packed = new Set(files);

describe('the npm tarball of nest-lock', () => {
  it('carries the README and LICENSE of the repository', () => {
    expect(readFileSync(join(library, 'README.md'), 'utf8')).toBe(readFileSync(join(root, 'README.md'), 'utf8'));
    expect(readFileSync(join(library, 'LICENSE'), 'utf8')).toBe(readFileSync(join(root, 'LICENSE'), 'utf8'));
    expect(files).toEqual(expect.arrayContaining(['README.md', 'LICENSE', 'package.json']));
  });

  it('holds only the builds, their sources and the package files', () => {
    const expected = [
      /^(README\.md|LICENSE|package\.json)$/,
      /^dist\/(cjs\/)?[\w./-]+\.(js|d\.ts|js\.map)$/,
      /^dist\/cjs\/package\.json$/,
      /^src\/[\w./-]+(?<!\.spec)\.ts$/,
    ];
    expect(files.filter((path) => !expected.some((pattern) => pattern.test(path)))).toEqual([]);
  });

  it('ships both formats of every module, each with its declarations', () => {
    const modules = files.filter((path) => /^src\/.+\.ts$/.test(path)).map((path) => path.slice(4, -3));
    const missing = modules.flatMap((name) =>
      [`dist/${name}`, `dist/cjs/${name}`]
        .flatMap((base) => [`${base}.js`, `${base}.d.ts`, `${base}.js.map`])
        .filter((path) => !packed.has(path)),
    );
    expect(modules).toContain('index');
    expect(missing).toEqual([]);
  });

  it('points main, types and every exports condition at files in the tarball', () => {
    const targets = [packageJson.main, packageJson.types, ...exportTargets(packageJson.exports)] as string[];
    expect(targets.filter((target) => !packed.has(posix.normalize(target)))).toEqual([]);
    expect(packageJson.exports).toEqual({
      '.': {
        import: { types: './dist/index.d.ts', default: './dist/index.js' },
        require: { types: './dist/cjs/index.d.ts', default: './dist/cjs/index.js' },
      },
      './package.json': './package.json',
      './terminus': {
        import: { types: './dist/terminus/index.d.ts', default: './dist/terminus/index.js' },
        require: { types: './dist/cjs/terminus/index.d.ts', default: './dist/cjs/terminus/index.js' },
      },
    });
    expect(JSON.parse(readFileSync(join(library, 'dist/cjs/package.json'), 'utf8'))).toEqual({ type: 'commonjs' });
  });

  it('has source maps whose sources are in the tarball', () => {
    const maps = files.filter((path) => path.endsWith('.js.map'));
    const unresolved = maps.flatMap((map) => {
      const { sourceRoot = '', sources } = JSON.parse(readFileSync(join(library, map), 'utf8')) as SourceMap;
      return sources
        .map((source) => posix.normalize(posix.join(dirname(map), sourceRoot, source)))
        .filter((source) => !packed.has(source))
        .map((source) => `${map} -> ${source}`);
    });
    expect(maps.length).toBeGreaterThan(0);
    expect(unresolved).toEqual([]);
  });

  it('says where it comes from, and takes ioredis 5 or 6 as an optional peer', () => {
    expect(packageJson).toMatchObject({
      name: 'nest-lock',
      license: 'MIT',
      repository: { type: 'git', url: expect.stringMatching(/^git\+https:\/\//), directory: 'libs/lock' },
      homepage: expect.stringMatching(/^https:\/\//),
      bugs: { url: expect.stringMatching(/^https:\/\//) },
      peerDependencies: expect.objectContaining({ ioredis: '^5.0.0 || ^6.0.0' }),
      peerDependenciesMeta: { ioredis: { optional: true } },
    });
  });

  it('works beside @nestjs/schedule without requiring it: an optional peer, never imported', () => {
    expect(packageJson).toMatchObject({ peerDependenciesMeta: { '@nestjs/schedule': { optional: true } } });
    const built = readdirSync(join(library, 'dist'), { recursive: true, encoding: 'utf8' }).filter((file) =>
      file.endsWith('.js'),
    );
    expect(built.length).toBeGreaterThan(10);
    expect(
      built.filter((file) => readFileSync(join(library, 'dist', file), 'utf8').includes('@nestjs/schedule')),
    ).toEqual([]);
  });

  it('exports the same names from its CommonJS and ESM builds', () => {
    const names = (script: string, inputType: 'commonjs' | 'module') =>
      execFileSync(process.execPath, ['--input-type', inputType, '-e', script], { cwd: library, encoding: 'utf8' });
    const fromRequire = names(
      `console.log(JSON.stringify(Object.keys(require('./dist/cjs/index.js')).sort()))`,
      'commonjs',
    );
    const fromImport = names(
      `console.log(JSON.stringify(Object.keys(await import('./dist/index.js')).sort()))`,
      'module',
    );
    expect(JSON.parse(fromRequire)).toEqual(JSON.parse(fromImport));
    expect(JSON.parse(fromImport)).toContain('LockModule');
  });

  // Found by the first-hour review: `any` in KeyTemplate and WithLock's signature, and `@internal`
  // members (enter, skipped, enterLocal) in users' autocomplete.
  it('declares no `any` and no @internal member in its .d.ts, ESM and CommonJS alike', () => {
    const declarations = files.filter((path) => path.endsWith('.d.ts'));
    expect(declarations.length).toBeGreaterThan(20);
    const anys: string[] = [];
    const internals: string[] = [];
    for (const path of declarations) {
      const text = readFileSync(join(library, path), 'utf8');
      const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
      const visit = (node: ts.Node): void => {
        if (node.kind === ts.SyntaxKind.AnyKeyword) {
          anys.push(`${path}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}`);
        }
        node.forEachChild(visit);
      };
      visit(source);
      if (text.includes('@internal')) internals.push(path);
    }
    expect(anys).toEqual([]);
    expect(internals).toEqual([]);
    const service = readFileSync(join(library, 'dist/lock.service.d.ts'), 'utf8');
    expect(service).not.toMatch(/\b(enter|skipped)\(/);
  });
});
