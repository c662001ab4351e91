import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import type { LoggerService } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { InvalidArgumentError, LockLostError, LockModule, type LockModuleOptions, LockService } from 'nest-lock';
import { useRedisServer } from './support/redis-server.js';
import { busyWait } from './support/timing.js';

/** The contexts nest-lock logs under; Nest's own lines (InstanceLoader, …) are left out. */
const LOCK_CONTEXTS = new Set(['LockModule', 'LockService', 'nest-lock']);

class RecordingLogger implements LoggerService {
  readonly lines: { level: string; message: string; context: string }[] = [];
  log(message: string, context: string) {
    this.record('log', message, context);
  }
  warn(message: string, context: string) {
    this.record('warn', message, context);
  }
  error(message: string, context: string) {
    this.record('error', message, context);
  }
  /** What nest-lock wrote here, as `context: message`. */
  get fromLock(): string[] {
    return this.lines.filter((line) => LOCK_CONTEXTS.has(line.context)).map((l) => `${l.context}: ${l.message}`);
  }
  private record(level: string, message: string, context: string) {
    this.lines.push({ level, message, context });
  }
}

async function until(condition: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Calls `call` (every 5 ms) until it rejects with a message that matches `message`. */
async function untilRejectsWith(call: () => Promise<unknown>, message: RegExp, what: string): Promise<void> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const answer = await call().then(String, (error: Error) => error.message);
    if (message.test(answer)) return;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}; the last answer: ${answer}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('the logger option', () => {
  const server = useRedisServer();

  /**
   * Makes nest-lock log everything it logs on Redis: a forced unlock, the lease lost by it, an
   * outage, a release that fails in it, and the recovery. Returns the application's logger.
   */
  async function logEverything(logger?: LockModuleOptions['logger']): Promise<RecordingLogger> {
    const appLogger = new RecordingLogger();
    const module = await Test.createTestingModule({
      imports: [
        LockModule.forRoot({ redis: server().url, commandTimeout: 300, ...(logger === undefined ? {} : { logger }) }),
      ],
    })
      .setLogger(appLogger)
      .compile();
    const locks = module.get(LockService);
    try {
      await locks.withLock(
        'forced',
        async (lock) => {
          await locks.forceUnlock('forced');
          await until(() => lock.signal.aborted, 'the lease to be found lost');
        },
        { ttl: 300 },
      );
      await locks.withLock('released-in-outage', () => server().kill());
      // The client tries to reconnect 100 ms after the drop; its failure is what is logged as the outage.
      // The connection state that logs it also tells it to every call ("since"), logger or none.
      await untilRejectsWith(() => locks.isLocked('during-outage'), /Redis is unreachable \(since/, 'the outage');
      await server().restart();
      // The client reconnects on its own; a lock taken afterwards shows that it did.
      let reconnected = false;
      while (!reconnected) {
        reconnected = await locks.tryLock('after-outage').then(
          (lock) => lock !== null,
          () => false,
        );
        if (!reconnected) await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      await module.close();
    }
    return appLogger;
  }

  /** One line of each kind, matched loosely: the wording is not the contract, the context is. */
  const everyLine = [
    expect.stringMatching(/^LockService: forceUnlock\("forced"\)/),
    expect.stringMatching(/^nest-lock: The lock "forced" was lost/),
    expect.stringMatching(/^LockModule: Redis is unreachable/),
    expect.stringMatching(/^nest-lock: Could not release lock "released-in-outage"/),
    expect.stringMatching(/^LockModule: Redis is reachable again/),
  ];

  it("by default goes to Nest's Logger, so the application's logger gets every line", async () => {
    const appLogger = await logEverything();
    expect(appLogger.fromLock).toEqual(expect.arrayContaining(everyLine));
  });

  it("a LoggerService gets every line with nest-lock's context, and the application's logger none", async () => {
    const lockLogger = new RecordingLogger();
    const appLogger = await logEverything(lockLogger);
    expect(lockLogger.fromLock).toEqual(expect.arrayContaining(everyLine));
    expect(lockLogger.lines.length).toBe(lockLogger.fromLock.length);
    expect(appLogger.fromLock).toEqual([]);
  });

  it('false silences nest-lock, and only nest-lock', async () => {
    const appLogger = await logEverything(false);
    expect(appLogger.fromLock).toEqual([]);
    // Nest's own start-up lines still reach the application's logger.
    expect(appLogger.lines.some((line) => line.context === 'InstanceLoader')).toBe(true);
  });

  it("a LoggerService gets the memory store's start-up notice", async () => {
    const lockLogger = new RecordingLogger();
    const module = await Test.createTestingModule({ imports: [LockModule.forRoot({ logger: lockLogger })] }).compile();
    await module.close();
    expect(lockLogger.lines).toEqual([
      { level: 'warn', message: expect.stringContaining('process-local'), context: 'LockModule' },
    ]);
  });

  describe('a logger that throws (a closed stream, a failing transport)', () => {
    const failing: LoggerService = {
      log: () => undefined,
      error: () => undefined,
      debug: () => undefined,
      warn: () => {
        throw new Error('log stream closed');
      },
    };
    const lost: LockLostError[] = [];
    let module: TestingModule;
    let locks: LockService;
    beforeEach(async () => {
      lost.length = 0;
      const onLockLost = (error: LockLostError) => void lost.push(error);
      module = await Test.createTestingModule({
        imports: [LockModule.forRoot({ store: 'memory', logger: failing, onLockLost })],
      }).compile();
      locks = module.get(LockService);
    });
    afterEach(() => module.close());

    it('does not stop forceUnlock, which frees the key and tells the holder', async () => {
      const lock = await locks.lock('forced', { autoExtend: true });
      expect(await locks.forceUnlock('forced')).toBe(true);
      expect(await locks.isLocked('forced')).toBe(false);
      expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST', reason: 'taken' });
    });

    it('does not stop the watchdog telling a lost lease (no uncaught exception from its timer)', async () => {
      const lock = await locks.lock('blocked', { ttl: 100, autoExtend: true });
      busyWait(150); // the event loop blocked past the lease: the watchdog finds it lost
      await until(() => lock.signal.aborted, 'the lease to be found lost');
      expect(lock.signal.reason).toMatchObject({ code: 'LOCK_LOST', reason: 'expired' });
      expect(lost).toEqual([lock.signal.reason]);
    });

    it('handles the rejection of an async logger (no unhandled rejection)', async () => {
      // A logger whose write returns a promise that rejects; it counts the promises nobody handled.
      let unhandled = 0;
      const rejecting = () => {
        let handled = false;
        setImmediate(() => void (handled || unhandled++));
        return {
          then: (_: unknown, onRejected?: (reason: unknown) => void) => (
            (handled = true),
            onRejected?.(new Error('transport down'))
          ),
        };
      };
      const asyncLogger = { log: rejecting, error: rejecting, warn: rejecting, debug: rejecting };
      const onAsync = await Test.createTestingModule({
        imports: [LockModule.forRoot({ logger: asyncLogger as unknown as LoggerService })], // warns: process-local
      }).compile();
      try {
        const onAsyncLocks = onAsync.get(LockService);
        const lock = await onAsyncLocks.lock('forced', { autoExtend: true });
        expect(await onAsyncLocks.forceUnlock('forced')).toBe(true); // warns twice: forced, and lost
        expect(lock.signal.aborted).toBe(true);
      } finally {
        await onAsync.close();
      }
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toBe(0);
    });

    it("does not turn withLock's failed release into a rejection over fn's result", async () => {
      const onRedis = await Test.createTestingModule({
        imports: [LockModule.forRoot({ redis: server().url, commandTimeout: 300, logger: failing })],
      }).compile();
      try {
        const result = await onRedis.get(LockService).withLock('released-in-outage', async () => {
          await server().kill(); // its release fails
          return 'done';
        });
        expect(result).toBe('done');
      } finally {
        await server().restart();
        await onRedis.close();
      }
    });
  });

  it.each([
    ['true', true],
    ['a string', 'console'],
    ['null', null],
    ['an object without warn and error', { log: () => undefined }],
    ['a function', () => undefined],
  ])('refuses %s with InvalidArgumentError before connecting', async (_, logger) => {
    const options = { redis: 'redis://127.0.0.1:1', logger } as unknown as LockModuleOptions;
    const compiling = Test.createTestingModule({ imports: [LockModule.forRoot(options)] }).compile();
    await expect(compiling).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(compiling).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', argument: 'logger' });
  });
});
