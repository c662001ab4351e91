// Boots the module on a Redis URL nobody answers, closes it, and lets the process end by itself:
// the parent measures how long that takes.
//
// usage: node close-unreachable.mjs <redisUrl>
import { NestFactory } from '@nestjs/core';
import { LockModule } from '../../../libs/lock/dist/index.js';

const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: process.argv[2] }), {
  logger: false,
});
await app.close();
process.stdout.write(`${performance.now()}\n`);
