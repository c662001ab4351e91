#!/usr/bin/env bash
# The README as a new user follows it. `npm run pack` in this repository, as the README's install
# section says; a new NestJS 12 application written as ESM (`"type": "module"`, `module: nodenext`)
# in a scratch folder; the tarball installed with the README's own `npm install` line (its
# /path/to/nest-lock made this repository); every ```ts block of README.md and docs/guides/*.md
# compiled in that application (strict, exactOptionalPropertyTypes, skipLibCheck: false); then the
# README's quick start run against a redis-server started here: without REDIS_URL it must fail at
# start, and of two concurrent requests to its route, one answers 409 with code LOCK_TIMEOUT.
# Every step is bounded in time; redis-server and the application are stopped by PID; the scratch
# folder goes. The tarball stays in the repository root (ignored by git), where the README puts it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
readme="$root/README.md"
scratch=$(mktemp -d)
redis_pid=''
app_pid=''
cleanup() {
  if [ -n "$app_pid" ]; then kill "$app_pid" 2>/dev/null || true; fi
  if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT

fail() {
  echo "readme.sh: $*" >&2
  if [ -f "$scratch/app.log" ]; then
    echo '--- the application printed:' >&2
    cat "$scratch/app.log" >&2
  fi
  exit 1
}

# 1. The README's install section: `npm ci && npm run pack` in the clone, then `npm install <tarball> …`
# in the application. This working tree is the clone; its `npm ci` is left to whoever set it up (CI on
# a fresh clone has run it), so as not to replace node_modules under a developer's feet.
grep -q '^npm ci && npm run pack\b' "$readme" || fail 'README.md has no `npm ci && npm run pack` line'
install_line=$(grep -m1 '^npm install /path/to/nest-lock/' "$readme") ||
  fail 'README.md has no `npm install /path/to/nest-lock/…` line'
install_line=${install_line%%#*} # a trailing comment, if any
read -r -a install_command <<<"${install_line//\/path\/to\/nest-lock/$root}"
tarball=''
for word in "${install_command[@]}"; do
  case "$word" in *.tgz) tarball=$word ;; esac
done
[ -n "$tarball" ] || fail "the README's install line names no tarball: $install_line"

(cd "$root" && timeout 600 npm run pack)
[ -f "$tarball" ] || fail "npm run pack did not write $tarball, the tarball the README installs"

# 2. A new NestJS 12 ESM application, with the packages the README's and the guides' examples import.
cd "$scratch"
echo '{ "name": "readme-app", "private": true, "type": "module" }' >package.json
cat >tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "module": "nodenext",
    "target": "ES2023",
    "lib": ["es2023", "esnext.disposable"],
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
timeout 600 npm install --no-audit --no-fund --loglevel=error \
  @nestjs/common@^12 @nestjs/core@^12 @nestjs/platform-express@^12 reflect-metadata rxjs ioredis@^6 \
  typescript@~6.0.3 @types/node@^20 \
  @nestjs/config@^12 @nestjs/schedule@^12 @nestjs/terminus@^12 @nestjs/testing@^12 @jest/globals@^30
echo "+ ${install_command[*]}"
timeout 600 "${install_command[@]}" --no-audit --no-fund --loglevel=error
node -e 'for (const p of ["nest-lock", "@nestjs/core", "ioredis", "typescript"]) console.log(p, require(p + "/package.json").version)'

# 3. Every ```ts block, one module each; the block after the README's quick-start marker is src/main.ts.
mkdir src
README="$readme" GUIDES="$root/docs/guides" node --input-type=module <<'JS'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';

const documents = [
  process.env.README,
  ...readdirSync(process.env.GUIDES)
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => join(process.env.GUIDES, name)),
];
let quickStart = 0;
for (const document of documents) {
  const markdown = readFileSync(document, 'utf8');
  const name = basename(document, '.md').toLowerCase();
  const blocks = [...markdown.matchAll(/(<!-- quick-start[^>]*-->\s*)?^```ts\n([\s\S]*?)^```$/gm)];
  blocks.forEach(([, marker, body], index) => {
    const file = marker && document === process.env.README ? 'main.ts' : `${name}-${index + 1}.ts`;
    if (file === 'main.ts') quickStart++;
    writeFileSync(join('src', file), body);
    console.log(`src/${file} <- ${basename(document)}, block ${index + 1}`);
  });
}
if (quickStart !== 1) throw new Error(`README.md must mark exactly one quick start, found ${quickStart}`);
JS
timeout 300 npx tsc -p tsconfig.json || fail 'the examples of the README and the guides do not compile'

# 4. The quick start, run as the README says, against a redis-server of its own.
free_port() {
  node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'
}
wait_for_port() { # port, what: up to 10 s
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  fail "$2 did not listen on port $1 within 10 s"
}

# store: 'redis' without REDIS_URL fails at start rather than running on process-local locks.
status=0
env -u REDIS_URL PORT="$(free_port)" timeout 60 node dist/main.js >app.log 2>&1 || status=$?
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] ||
  fail "the quick start without REDIS_URL should fail at start; it exited with $status"
grep -q 'InvalidArgumentError' app.log || fail 'the quick start without REDIS_URL failed, but not on its options'
echo "without REDIS_URL the quick start fails at start (exit $status): $(grep -m1 'InvalidArgumentError' app.log)"

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >redis.log 2>&1 &
redis_pid=$!
wait_for_port "$redis_port" redis-server

app_port=$(free_port)
REDIS_URL="redis://127.0.0.1:$redis_port" PORT="$app_port" timeout 120 node dist/main.js >app.log 2>&1 &
app_pid=$!
wait_for_port "$app_port" 'the quick start'

# The route of the README's curl line (`curl -X POST localhost:3000/orders/42/ship & …`).
route=$(grep -m1 -o '^curl -X POST localhost:[0-9]*/[^ ]*' "$readme" | sed 's#^curl -X POST localhost:[0-9]*##') ||
  fail 'README.md has no `curl -X POST localhost:…` line for its quick start'
url="http://127.0.0.1:$app_port$route"
echo "two concurrent requests: POST $url"
timeout 30 curl -s -o first.json -w '%{http_code}' -X POST "$url" >first.status &
first=$!
timeout 30 curl -s -o second.json -w '%{http_code}' -X POST "$url" >second.status &
second=$!
wait "$first" || fail 'the first request to the quick start failed or timed out'
wait "$second" || fail 'the second request to the quick start failed or timed out'

node --input-type=module <<'JS' || fail 'the quick start did not answer one request 2xx and the other 409 LOCK_TIMEOUT'
import { readFileSync } from 'node:fs';

const answers = ['first', 'second'].map((name) => ({
  status: Number(readFileSync(`${name}.status`, 'utf8')),
  body: readFileSync(`${name}.json`, 'utf8'),
}));
for (const { status, body } of answers) console.log(status, body);
const busy = answers.filter(({ status }) => status === 409);
const done = answers.filter(({ status }) => status >= 200 && status < 300);
if (busy.length !== 1 || done.length !== 1) throw new Error('expected one 2xx and one 409');
const body = JSON.parse(busy[0].body);
const expected = { statusCode: 409, error: 'Conflict', code: 'LOCK_TIMEOUT' };
for (const [field, value] of Object.entries(expected)) {
  if (body[field] !== value) throw new Error(`409 body: ${field} is ${JSON.stringify(body[field])}, not ${value}`);
}
if (typeof body.message !== 'string' || typeof body.key !== 'string') throw new Error('409 body: no message or key');
console.log(`the README's quick start answers 409 ${body.code} for key ${body.key}`);
JS
