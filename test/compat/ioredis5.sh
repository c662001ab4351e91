#!/usr/bin/env bash
# The suite's Redis tests on ioredis 5 (the workspace itself runs on ioredis 6): a clone of the
# committed HEAD in a scratch folder, npm ci, ioredis 5 installed over it without saving, the library
# type-checked against ioredis 5's declarations, then the contract, fault and module specs that talk
# to Redis. Bounded in time; the scratch folder goes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

git clone --quiet --no-hardlinks "$root" "$scratch/repo"
cd "$scratch/repo"
timeout 600 npm ci --no-audit --no-fund --loglevel=error --prefer-offline
timeout 300 npm install --no-save --no-audit --no-fund --loglevel=error ioredis@^5
node -e 'const { version } = require("ioredis/package.json"); console.log("ioredis", version); if (!version.startsWith("5.")) process.exit(1)'

timeout 120 npx tsc --noEmit -p libs/lock/tsconfig.lib.json
timeout 900 npm test -- --ci \
  test/redis-store.e2e-spec.ts test/lock-service.e2e-spec.ts test/semaphore-service.e2e-spec.ts \
  test/lock-module.e2e-spec.ts test/backend-faults.e2e-spec.ts test/wake-ups.e2e-spec.ts \
  test/watchdog.e2e-spec.ts test/fencing.e2e-spec.ts test/key-layout.e2e-spec.ts \
  test/decorators-http.e2e-spec.ts test/optional-ioredis.e2e-spec.ts test/late-replies.e2e-spec.ts
