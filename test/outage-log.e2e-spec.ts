import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { LoggerService } from '@nestjs/common';
import { LockBackendError } from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, type LockApp, uniqueKey } from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';

/** Every line the module logs, with its level. */
class Lines implements LoggerService {
  readonly lines: { level: string; message: string }[] = [];
  log(message: string) {
    this.lines.push({ level: 'log', message });
  }
  warn(message: string) {
    this.lines.push({ level: 'warn', message });
  }
  error(message: string) {
    this.lines.push({ level: 'error', message });
  }
}

/**
 * An outage is logged when it starts and when it ends, whatever its kind. Found by the first-hour
 * review: a frozen Redis (connected, not answering) logged nothing at all, for as long as it lasted.
 */
describe('outages in the log', () => {
  let server: RedisServer;
  let app: LockApp;
  const logger = new Lines();

  beforeAll(async () => {
    server = await RedisServer.start();
    app = await bootLockModule({ redis: server.url, commandTimeout: 200, logger });
  });
  afterAll(async () => {
    await closeLockApp(app);
    await server.stop();
  });

  const attempts = async (count: number) => {
    for (let i = 0; i < count; i++) {
      const outcome = await app.locks.tryLock(uniqueKey('during-outage')).catch((error: unknown) => error);
      expect(outcome).toBeInstanceOf(LockBackendError);
      expect(outcome).toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    }
  };

  it('a frozen server: one warning when commands stop being answered, one line when they are again', async () => {
    const before = logger.lines.length;
    server.pause();
    try {
      await attempts(4);
    } finally {
      server.resume();
    }
    const lock = await app.locks.lock(uniqueKey('after-freeze'), { timeout: 2_000 });
    await lock.unlock();

    const lines = logger.lines.slice(before);
    expect(lines).toEqual([
      { level: 'warn', message: expect.stringMatching(/^Redis is unreachable since \S+ \(no answer within 200 ms\)/) },
      { level: 'log', message: expect.stringMatching(/^Redis is reachable again, after \d+\.\d s$/) },
    ]);
  });

  it('a stopped server: one warning naming why, one line once it is back', async () => {
    const before = logger.lines.length;
    await server.stop();
    await attempts(3);
    await server.restart();
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline && !logger.lines.slice(before).some((line) => line.level === 'log')) await delay(50);

    const lines = logger.lines.slice(before);
    expect(lines).toEqual([
      { level: 'warn', message: expect.stringMatching(/^Redis is unreachable since \S+ \(/) },
      { level: 'log', message: expect.stringMatching(/^Redis is reachable again, after \d+\.\d s$/) },
    ]);
  });
});
