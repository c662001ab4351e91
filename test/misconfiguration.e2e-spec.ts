import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { LoggerService } from '@nestjs/common';
import { LockBackendError } from 'nest-lock';
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
 * A Redis that refuses the client's configuration — a wrong password, none where one is required, a
 * database that does not exist — is not an outage: found by the first-hour review, every lock call
 * waited its whole timeout (5 s) and rejected with BACKEND_UNAVAILABLE, marked retryable, and a
 * database index out of range locked on database 0.
 */
describe('a Redis that refuses the client’s configuration', () => {
  let guarded: RedisServer;

  beforeAll(async () => {
    guarded = await RedisServer.start({ args: ['--requirepass', 'secret'] });
  });
  afterAll(async () => {
    await guarded.stop();
  });

  const port = () => guarded.port;
  it.each([
    ['a wrong password', () => `redis://:wrong@127.0.0.1:${port()}`, /WRONGPASS/],
    ['no password where one is required', () => `redis://127.0.0.1:${port()}`, /NOAUTH/],
    ['a database that does not exist', () => `redis://:secret@127.0.0.1:${port()}/99`, /DB index is out of range/],
  ])(
    '%s: every call rejects at once with BACKEND_MISCONFIGURED, and the start-up says so once',
    async (_, url, reply) => {
      const logger = new Lines();
      let app: LockApp | undefined;
      try {
        app = await bootLockModule({ redis: url(), logger });
        const started = performance.now();
        const outcomes = await Promise.all([
          app.locks.lock(uniqueKey('refused'), { timeout: 5_000 }).catch((error: unknown) => error),
          app.locks.tryLock(uniqueKey('refused')).catch((error: unknown) => error),
          app.semaphores.acquire(uniqueKey('refused'), 2, { timeout: 5_000 }).catch((error: unknown) => error),
        ]);
        const took = performance.now() - started;

        for (const outcome of outcomes) {
          expect(outcome).toBeInstanceOf(LockBackendError);
          expect(outcome).toMatchObject({ code: 'BACKEND_MISCONFIGURED', transient: false });
          expect((outcome as Error).message).toMatch(reply);
          expect((outcome as Error).message).toMatch(/password, user and database of the redis option/);
        }
        expect(took).toBeLessThan(1_000); // not the 5 s timeout
        const refusals = logger.lines.filter((line) => reply.test(line.message));
        expect(refusals).toEqual([{ level: 'error', message: expect.stringMatching(/BACKEND_MISCONFIGURED/) }]);
        expect(logger.lines.filter((line) => /unreachable|reachable again/.test(line.message))).toEqual([]);
      } finally {
        await closeLockApp(app);
      }
    },
  );

  it('the right password works (the server is fine)', async () => {
    const app = await bootLockModule({ redis: `redis://:secret@127.0.0.1:${port()}/1` });
    try {
      const lock = await app.locks.lock(uniqueKey('accepted'));
      expect(await lock.unlock()).toBe(true);
    } finally {
      await closeLockApp(app);
    }
  });
});
