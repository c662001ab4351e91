// One instance of an application with a one-second `@Cron` that is `@LeaderOnly`: each firing that
// runs records `<second>:<pid>` on the resource Redis. Prints {"event":"ready"} once started and one
// {"event":"elected"} line when it starts leading.
//
// usage: node leader-cron.mjs <lockRedisUrl> <resourceRedisUrl> <name> <ttl>
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Redis } from 'ioredis';
import { LeaderOnly, LeaderService, LockModule } from '../../../libs/lock/dist/index.js';

const [lockUrl, resourceUrl, name, ttl] = process.argv.slice(2);
const resource = new Redis(resourceUrl);
const print = (line) => process.stdout.write(`${JSON.stringify({ ...line, pid: process.pid, at: Date.now() })}\n`);

class Job {
  async fire() {
    await resource.rpush(`${name}:firings`, `${Math.floor(Date.now() / 1000)}:${process.pid}`);
  }
}
// `@Cron('* * * * * *') @LeaderOnly(name)` on `fire`, applied as TypeScript would (bottom first).
for (const decorate of [LeaderOnly(name, { ttl: Number(ttl) }), Cron('* * * * * *')]) {
  const descriptor = Object.getOwnPropertyDescriptor(Job.prototype, 'fire');
  decorate(Job.prototype, 'fire', descriptor);
  Object.defineProperty(Job.prototype, 'fire', descriptor);
}
Injectable()(Job);

class AppModule {}
Module({
  imports: [LockModule.forRoot({ redis: lockUrl, logger: false }), ScheduleModule.forRoot()],
  providers: [Job],
})(AppModule);

const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
app.enableShutdownHooks();
const leadership = app.get(LeaderService).leadership(name);
void leadership.whenLeader().then(() => print({ event: 'elected', term: leadership.term }));
print({ event: 'ready' });
