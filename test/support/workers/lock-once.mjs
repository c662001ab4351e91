// Starts the built nest-lock on the memory store and takes one lock, with whatever the process can
// import. Run under test/support/without-opentelemetry.mjs, it shows that @opentelemetry/api is optional.
import { NestFactory } from '@nestjs/core';
import { LockModule, LockService } from '../../../libs/lock/dist/index.js';

const openTelemetry = await import('@opentelemetry/api').then(
  () => 'with',
  () => 'without',
);
const app = await NestFactory.createApplicationContext(LockModule.forRoot({ store: 'memory' }), { logger: false });
const locked = await app.get(LockService).withLock('once', () => true);
await app.close();
process.stdout.write(`${locked ? 'locked' : 'not locked'} ${openTelemetry} @opentelemetry/api\n`);
