#!/usr/bin/env bash
# Installs NestJS 11 in a scratch directory beside the built library (libs/lock/dist) and
# runs nest11.cjs there against a throwaway redis-server: the peer range says ^11 || ^12.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
scratch=$(mktemp -d)
port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning >/dev/null &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null || true; rm -rf "$scratch"' EXIT

cd "$scratch"
echo '{ "name": "nest11-smoke", "private": true }' > package.json
npm install --no-audit --no-fund --loglevel=error @nestjs/common@^11 @nestjs/core@^11 ioredis@^6 reflect-metadata rxjs
mkdir -p node_modules/nest-lock
cp -r "$root/libs/lock/dist" "$root/libs/lock/package.json" node_modules/nest-lock/
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
cp "$here/nest11.cjs" .   # require() resolves from the script's own folder
node nest11.cjs "redis://127.0.0.1:$port"
