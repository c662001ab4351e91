#!/usr/bin/env bash
# The packed nest-lock (npm pack of libs/lock, after `npm run build`) installed into a new NestJS 11
# application written in CommonJS, on ioredis 5: its TypeScript compiles with `module: commonjs`
# (and type-checks with `nodenext`), test/compat/app runs against a redis-server it starts, and a
# default ts-jest (CommonJS) unit test imports nest-lock; then, ioredis removed, a memory-store app
# compiles and runs. Bounded in time; the scratch folder goes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

[ -f "$root/libs/lock/dist/cjs/index.js" ] || { echo "build the library first: npm run build" >&2; exit 1; }
tarball=$(cd "$root/libs/lock" && npm pack --silent --ignore-scripts --pack-destination "$scratch")

cd "$scratch"
cat > package.json <<'JSON'
{
  "name": "nest11-commonjs-app",
  "private": true,
  "jest": {
    "moduleFileExtensions": ["js", "json", "ts"],
    "rootDir": "src",
    "testRegex": ".*\\.spec\\.ts$",
    "transform": { "^.+\\.(t|j)s$": "ts-jest" },
    "testEnvironment": "node"
  }
}
JSON
cat > tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "module": "commonjs",
    "target": "ES2023",
    "strict": true,
    "exactOptionalPropertyTypes": true,
    "esModuleInterop": true,
    "experimentalDecorators": true,
    "emitDecoratorMetadata": true,
    "skipLibCheck": false,
    "types": ["node", "jest"],
    "rootDir": "./src",
    "outDir": "./dist"
  },
  "include": ["src"]
}
JSON
echo '{ "extends": "./tsconfig.json", "exclude": ["src/**/*.spec.ts"] }' > tsconfig.build.json
mkdir src
cp "$root"/test/compat/app/src/*.ts src/
cat > src/locks.spec.ts <<'TS'
import { Test } from '@nestjs/testing';
import { LockModule, LockService } from 'nest-lock';

describe('nest-lock in a ts-jest unit test', () => {
  it('runs withLock on the memory store', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [LockModule.forRoot()] }).compile();
    await expect(moduleRef.get(LockService).withLock('unit', async () => 'done')).resolves.toBe('done');
    await moduleRef.close();
  });
});
TS

timeout 600 npm install --no-audit --no-fund --loglevel=error \
  "./$tarball" @nestjs/common@^11 @nestjs/core@^11 @nestjs/platform-express@^11 @nestjs/testing@^11 @nestjs/terminus@^11 \
  ioredis@^5 reflect-metadata rxjs typescript@^5 @types/node@^20 jest@^29 ts-jest@^29 @types/jest@^29
node -e 'for (const p of ["@nestjs/core", "ioredis", "typescript"]) console.log(p, require(p + "/package.json").version)'

timeout 300 npx tsc -p tsconfig.build.json
timeout 300 npx tsc -p tsconfig.json --noEmit --module nodenext --moduleResolution nodenext
timeout 120 node dist/main.js 11
timeout 300 npx jest --ci

# ioredis is an optional peer: without it, an application on the memory store compiles (under
# skipLibCheck, the Nest default) and runs.
timeout 300 npm uninstall --no-audit --no-fund --loglevel=error ioredis
[ ! -e node_modules/ioredis ]
mkdir memory-only
cat > memory-only/main.ts <<'TS'
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { LockModule, LockService } from 'nest-lock';

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(LockModule.forRoot(), { logger: false });
  console.log(await app.get(LockService).withLock('memory', async () => 'nest-lock runs without ioredis on the memory store'));
  await app.close();
}
void main();
TS
timeout 300 npx tsc --strict --module commonjs --target es2023 --experimentalDecorators --emitDecoratorMetadata \
  --skipLibCheck --types node --outDir memory-only/dist memory-only/main.ts
timeout 60 node memory-only/dist/main.js
