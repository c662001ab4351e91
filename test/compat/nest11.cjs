// Smoke test of the built library in a NestJS 11 application written in CommonJS:
// nest-lock is ESM, loaded here through require(esm) (Node >= 20.19).
// usage: node nest11.cjs <redisUrl>
require('reflect-metadata');
const assert = require('node:assert/strict');
const { NestFactory } = require('@nestjs/core');
const { version } = require('@nestjs/core/package.json');
const { LockModule, LockService, LockTimeoutError } = require('nest-lock');

async function check(options) {
  const app = await NestFactory.createApplicationContext(LockModule.forRoot(options), { logger: false });
  const locks = app.get(LockService);
  const lock = await locks.lock('nest11');
  assert.equal(lock.elapsed, 0);
  await assert.rejects(locks.lock('nest11', { timeout: 0 }), LockTimeoutError);
  assert.equal(await lock.unlock(), true);
  assert.equal(await locks.withLock('nest11', () => 'done'), 'done');
  await app.close();
}

(async () => {
  assert.match(version, /^11\./);
  await check({});
  await check({ redis: process.argv[2] });
  console.log(`nest-lock works under NestJS ${version} (CommonJS app, memory and Redis stores)`);
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
