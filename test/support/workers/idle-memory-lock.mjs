// Takes a memory-store lock with a long ttl and returns without unlocking: the process must
// still exit at once, since the lease's expiry timer does not hold it open.
import { NestFactory } from '@nestjs/core';
import { LockModule, LockService } from '../../../libs/lock/dist/index.js';

const app = await NestFactory.createApplicationContext(LockModule.forRoot(), { logger: false });
const lock = await app.get(LockService).lock('held-forever', { ttl: 600_000 });
process.stdout.write(JSON.stringify({ token: lock.token }));
