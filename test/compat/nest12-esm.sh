#!/usr/bin/env bash
# The packed nest-lock (npm pack of libs/lock, after `npm run build`) installed into a new NestJS 12
# application written as ESM (`"type": "module"`, `module: nodenext`), on ioredis 6: test/compat/app
# compiles and runs against a redis-server it starts. Bounded in time; the scratch folder goes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

[ -f "$root/libs/lock/dist/index.js" ] || { echo "build the library first: npm run build" >&2; exit 1; }
tarball=$(cd "$root/libs/lock" && npm pack --silent --ignore-scripts --pack-destination "$scratch")

cd "$scratch"
echo '{ "name": "nest12-esm-app", "private": true, "type": "module" }' > package.json
cat > tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "module": "nodenext",
    "target": "ES2023",
    "strict": true,
    "exactOptionalPropertyTypes": true,
    "experimentalDecorators": true,
    "emitDecoratorMetadata": true,
    "skipLibCheck": false,
    "types": ["node"],
    "rootDir": "./src",
    "outDir": "./dist"
  },
  "include": ["src"]
}
JSON
mkdir src
cp "$root"/test/compat/app/src/*.ts src/

timeout 600 npm install --no-audit --no-fund --loglevel=error \
  "./$tarball" @nestjs/common@^12 @nestjs/core@^12 @nestjs/platform-express@^12 @nestjs/terminus@^12 \
  ioredis@^6 reflect-metadata rxjs typescript@~6.0.3 @types/node@^20
node -e 'for (const p of ["@nestjs/core", "ioredis", "typescript"]) console.log(p, require(p + "/package.json").version)'

timeout 300 npx tsc -p tsconfig.json
timeout 120 node dist/main.js 12
