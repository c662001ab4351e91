// Starts the built nest-lock on the memory store and takes one lock, with whatever the process can
// import. Run under test/support/without-optional-peers.mjs, it shows that the main entry needs neither
// @opentelemetry/api nor @nestjs/terminus.
import { NestFactory } from '@nestjs/core';
import { LockModule, LockService } from '../../../libs/lock/dist/index.js';

const importable = (name) =>
  import(name).then(
    () => `with ${name}`,
    () => `without ${name}`,
  );
const peers = [await importable('@opentelemetry/api'), await importable('@nestjs/terminus')];
const app = await NestFactory.createApplicationContext(LockModule.forRoot({ store: 'memory' }), { logger: false });
const locked = await app.get(LockService).withLock('once', () => true);
await app.close();
process.stdout.write(`${locked ? 'locked' : 'not locked'} ${peers.join(', ')}\n`);
