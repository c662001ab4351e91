import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { useBuilt } from './support/built.js';
import { useRedisServer } from './support/redis-server.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));

/** Boots `LockModule.forRoot()` (with `redis` when a URL is given), runs one withLock, prints its result. */
const SCRIPT = `
const redis = process.argv[2];
const app = await NestFactory.createApplicationContext(LockModule.forRoot(redis ? { redis } : {}), {
  logger: false,
  abortOnError: false,
});
try {
  console.log(await app.get(LockService).withLock('optional-ioredis', () => 'ran'));
} finally {
  await app.close();
}`;
const ESM_APP = `import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { LockModule, LockService } from 'nest-lock';
${SCRIPT}`;
const COMMONJS_APP = `require('reflect-metadata');
const { NestFactory } = require('@nestjs/core');
const { LockModule, LockService } = require('nest-lock');
(async () => {${SCRIPT}
})().catch((error) => {
  console.error(error.message);
  process.exitCode = 1;
});`;

/**
 * An application folder with nest-lock's built package copied in and its other dependencies linked
 * from this repository. ioredis is the repository's, absent, or a broken install (a dependency of
 * it missing). Outside the repository, so that nothing finds the repository's own ioredis by
 * walking up.
 */
function makeApp(ioredis: 'linked' | 'absent' | 'broken'): string {
  const app = mkdtempSync(join(tmpdir(), 'nest-lock-app-'));
  const modules = join(app, 'node_modules');
  mkdirSync(join(modules, '@nestjs'), { recursive: true });
  const linked = [
    '@nestjs/common',
    '@nestjs/core',
    'reflect-metadata',
    'rxjs',
    ...(ioredis === 'linked' ? ['ioredis'] : []),
  ];
  for (const name of linked) symlinkSync(join(root, 'node_modules', name), join(modules, name), 'dir');
  if (ioredis === 'broken') {
    mkdirSync(join(modules, 'ioredis'));
    writeFileSync(join(modules, 'ioredis/package.json'), '{ "name": "ioredis", "main": "index.js" }');
    writeFileSync(join(modules, 'ioredis/index.js'), "require('a-dependency-of-ioredis');");
  }
  for (const part of ['package.json', 'dist']) {
    cpSync(join(root, 'libs/lock', part), join(modules, 'nest-lock', part), { recursive: true });
  }
  writeFileSync(join(app, 'main.mjs'), ESM_APP);
  writeFileSync(join(app, 'main.cjs'), COMMONJS_APP);
  return app;
}

const FORMATS = [
  ['an ESM', 'main.mjs'],
  ['a CommonJS', 'main.cjs'],
] as const;

describe('ioredis, an optional peer dependency', () => {
  // Its applications get a copy of the built package (makeApp).
  useBuilt('library');
  const server = useRedisServer();
  let withoutIoredis: string;
  let withIoredis: string;
  let withBrokenIoredis: string;

  beforeAll(async () => {
    withoutIoredis = makeApp('absent');
    withIoredis = makeApp('linked');
    withBrokenIoredis = makeApp('broken');
  });
  afterAll(async () => {
    for (const app of [withoutIoredis, withIoredis, withBrokenIoredis])
      if (app) rmSync(app, { recursive: true, force: true });
  });

  it.each(FORMATS)('is not needed by %s application on the memory store', async (_format, main) => {
    const { stdout } = await run(process.execPath, [main], { cwd: withoutIoredis, timeout: 20_000 });
    expect(stdout.trim()).toBe('ran');
  });

  it.each(FORMATS)('is asked for by name when %s application without it configures Redis', async (_format, main) => {
    const failure = run(process.execPath, [main, server().url], { cwd: withoutIoredis, timeout: 20_000 });
    await expect(failure).rejects.toMatchObject({
      code: 1,
      stdout: '',
      stderr: expect.stringContaining(
        'Invalid redis: connecting to Redis needs the ioredis package: npm install ioredis',
      ) as unknown,
    });
  });

  it.each(FORMATS)('fails %s application with its own error when its install is broken', async (_format, main) => {
    const failure = run(process.execPath, [main, server().url], { cwd: withBrokenIoredis, timeout: 20_000 });
    await expect(failure).rejects.toMatchObject({
      code: 1,
      stderr: expect.stringContaining("Cannot find module 'a-dependency-of-ioredis'") as unknown,
    });
  });

  it.each(FORMATS)('is loaded when %s application that has it configures Redis', async (_format, main) => {
    const { stdout } = await run(process.execPath, [main, server().url], { cwd: withIoredis, timeout: 20_000 });
    expect(stdout.trim()).toBe('ran');
  });
});
