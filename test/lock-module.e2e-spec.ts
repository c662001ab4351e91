import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type LoggerService, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  InvalidArgumentError,
  LOCK_OPTIONS,
  LockModule,
  type LockModuleOptions,
  LockService,
  LockStore,
  MemoryStore,
  RedisStore,
  type ResolvedModuleOptions,
} from 'nest-lock';
import { execFile } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { RedisServer } from './support/redis-server.js';

class RecordingLogger implements LoggerService {
  readonly lines: string[] = [];
  log(message: string) {
    this.lines.push(message);
  }
  warn(message: string) {
    this.lines.push(message);
  }
  error(message: string) {
    this.lines.push(message);
  }
}

@Injectable()
class AppConfig {
  readonly lockTtl = 12_345;
}

@Module({ providers: [AppConfig], exports: [AppConfig] })
class ConfigModule {}

@Injectable()
class OrderJob {
  constructor(readonly locks: LockService) {}
}

@Module({ providers: [OrderJob] })
class OrdersModule {}

describe('LockModule', () => {
  let server: RedisServer;

  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server.stop();
  });

  it('forRoot() without redis uses the memory store and says once that locks are process-local', async () => {
    const logger = new RecordingLogger();
    const module = await Test.createTestingModule({ imports: [LockModule.forRoot()] })
      .setLogger(logger)
      .compile();

    const lock = await module.get(LockService).lock('k');
    expect(await lock.unlock()).toBe(true);
    expect(logger.lines.filter((line) => line.includes('process-local'))).toHaveLength(1);
    await module.close();
  });

  it("forRoot({ store: 'memory' }) uses the memory store without a warning: it was chosen on purpose", async () => {
    const logger = new RecordingLogger();
    const module = await Test.createTestingModule({ imports: [LockModule.forRoot({ store: 'memory' })] })
      .setLogger(logger)
      .compile();

    const lock = await module.get(LockService).lock('k');
    expect(await lock.unlock()).toBe(true);
    expect(module.get(LockStore)).toBeInstanceOf(MemoryStore);
    expect(logger.lines.filter((line) => line.includes('process-local'))).toEqual([]);
    await module.close();
  });

  it("forRoot({ store: 'redis', redis }) uses Redis", async () => {
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ store: 'redis', redis: server.url })],
    }).compile();

    expect(module.get(LockStore)).toBeInstanceOf(RedisStore);
    await module.close();
  });

  it('forRoot({ redis: undefined }), an unset REDIS_URL, is the memory store too', async () => {
    const logger = new RecordingLogger();
    const unsetUrl: string | undefined = undefined;
    const module = await Test.createTestingModule({ imports: [LockModule.forRoot({ redis: unsetUrl })] })
      .setLogger(logger)
      .compile();

    const lock = await module.get(LockService).lock('k');
    expect(await lock.unlock()).toBe(true);
    expect(module.get<ResolvedModuleOptions>(LOCK_OPTIONS).redis).toBeUndefined();
    expect(logger.lines.filter((line) => line.includes('process-local'))).toHaveLength(1);
    await module.close();
  });

  it('lets a process whose Redis is unreachable end soon after app.close()', async () => {
    // A port nobody listens on: the module's connection never opens.
    const probe = createServer().listen(0, '127.0.0.1');
    await new Promise((resolve) => probe.once('listening', resolve));
    const { port } = probe.address() as { port: number };
    await new Promise((resolve) => probe.close(resolve));
    const script = fileURLToPath(new URL('./support/workers/close-unreachable.mjs', import.meta.url));
    const started = performance.now();

    const { stdout } = await promisify(execFile)(process.execPath, [script, `redis://127.0.0.1:${port}`], {
      timeout: 10_000,
    });
    // The child prints when its close ended, on its own clock (from its start): the rest of its life is after the close.
    const closedAt = Number(stdout.trim());
    const afterClose = performance.now() - started - closedAt;

    // ioredis's default would keep it alive 2 s after the close, for a socket that never opened.
    expect(closedAt).toBeGreaterThan(0);
    expect(afterClose).toBeLessThan(1_500);
  });

  it('forRootAsync() takes options from a factory with injected dependencies', async () => {
    const module = await Test.createTestingModule({
      imports: [
        LockModule.forRootAsync({
          imports: [ConfigModule],
          inject: [AppConfig],
          useFactory: (config: AppConfig): LockModuleOptions => ({
            redis: server.url,
            keyPrefix: 'app:',
            defaults: { ttl: config.lockTtl },
          }),
        }),
      ],
    }).compile();

    const options = module.get<ResolvedModuleOptions>(LOCK_OPTIONS);
    expect(options.defaults).toEqual({
      ttl: 12_345,
      timeout: 5_000,
      step: 1,
      ratio: 2,
      maxStep: 500,
      autoExtend: true,
      fair: true,
    });
    expect(options.keyPrefix).toBe('app:');
    const lock = await module.get(LockService).lock('order:1');
    expect(await lock.unlock()).toBe(true);
    await module.close();
  });

  it('forRootAsync() takes options from a class', async () => {
    @Injectable()
    class LockConfig {
      createLockOptions(): LockModuleOptions {
        return { defaults: { timeout: 0 } };
      }
    }
    const module = await Test.createTestingModule({
      imports: [LockModule.forRootAsync({ useClass: LockConfig })],
    }).compile();

    expect(module.get<ResolvedModuleOptions>(LOCK_OPTIONS).defaults.timeout).toBe(0);
    await module.close();
  });

  it('is global by default, so feature modules inject LockService without importing it', async () => {
    const module = await Test.createTestingModule({ imports: [LockModule.forRoot(), OrdersModule] }).compile();

    expect(module.get(OrderJob).locks).toBe(module.get(LockService));
    await module.close();
  });

  it('stays local to the importing module with isGlobal: false', async () => {
    const compiling = Test.createTestingModule({
      imports: [LockModule.forRoot({ isGlobal: false }), OrdersModule],
    }).compile();

    await expect(compiling).rejects.toThrow(/LockService/);
  });

  describe('rejects invalid options at bootstrap, naming the option', () => {
    const cases: [string, LockModuleOptions, string][] = [
      ['a keyPrefix with a brace', { keyPrefix: 'a{b' }, 'keyPrefix'],
      ['defaults.ttl 0', { defaults: { ttl: 0 } }, 'defaults.ttl'],
      ['defaults.ttl within its clock-drift margin', { defaults: { ttl: 2 } }, 'defaults.ttl'],
      ['defaults.timeout -1', { defaults: { timeout: -1 } }, 'defaults.timeout'],
      ['defaults.ratio 0.5', { defaults: { ratio: 0.5 } }, 'defaults.ratio'],
      ['defaults.maxStep NaN', { defaults: { maxStep: Number.NaN } }, 'defaults.maxStep'],
      ['an unknown default', { defaults: { tll: 5 } as never }, 'defaults.tll'],
      ['an unknown option', { ttl: 5 } as never, 'ttl'],
      ['a URL that is not redis://', { redis: 'http://localhost:6379' }, 'redis'],
      ['a redis option of the wrong type', { redis: 6379 as never }, 'redis'],
      ['a cluster without nodes', { redis: { cluster: { nodes: [] } } }, 'redis.cluster.nodes'],
      [
        'a cluster node that is not a URL',
        { redis: { cluster: { nodes: ['localhost:7000'] } } },
        'redis.cluster.nodes',
      ],
      [
        'a cluster node without a port',
        { redis: { cluster: { nodes: [{ host: 'a' } as never] } } },
        'redis.cluster.nodes',
      ],
      [
        'a misspelt cluster option',
        { redis: { cluster: { nodes: ['redis://a:1'], option: {} } as never } },
        'redis.cluster.option',
      ],
      [
        'cluster options of the wrong type',
        { redis: { cluster: { nodes: ['redis://a:1'], options: 1 as never } } },
        'redis.cluster.options',
      ],
      ['waitForReplicas without redis', { waitForReplicas: { replicas: 1, timeout: 50 } }, 'waitForReplicas'],
      [
        'waitForReplicas with a cluster',
        { redis: { cluster: { nodes: ['redis://a:1'] } }, waitForReplicas: { replicas: 1, timeout: 50 } },
        'waitForReplicas',
      ],
      [
        'waitForReplicas of 0 replicas',
        { redis: 'redis://127.0.0.1:1', waitForReplicas: { replicas: 0, timeout: 50 } },
        'waitForReplicas.replicas',
      ],
      [
        'a waitForReplicas timeout at commandTimeout',
        { redis: 'redis://127.0.0.1:1', waitForReplicas: { replicas: 1, timeout: 1_000 } },
        'waitForReplicas.timeout',
      ],
      ['commandTimeout 0', { commandTimeout: 0 }, 'commandTimeout'],
      ['fenceCounterTtl below a second', { fenceCounterTtl: 999 }, 'fenceCounterTtl'],
      ['fenceCounterTtl fractional (PX takes whole ms)', { fenceCounterTtl: 1_000.5 }, 'fenceCounterTtl'],
      ['fenceCounterTtl as a string', { fenceCounterTtl: '1h' as never }, 'fenceCounterTtl'],
      ['fenceCounterTtl above the longest duration', { fenceCounterTtl: 2 ** 31 }, 'fenceCounterTtl'],
      ["store 'memory' together with redis", { store: 'memory', redis: 'redis://127.0.0.1:1' }, 'store'],
      ["store 'redis' without redis", { store: 'redis' }, 'redis'],
      ["store 'redis' with redis undefined (a missing REDIS_URL)", { store: 'redis', redis: undefined }, 'redis'],
      ['an unknown store', { store: 'disk' as never }, 'store'],
      ['retryAfter -1', { retryAfter: -1 }, 'retryAfter'],
      ['retryAfter 1.5 (Retry-After takes whole seconds)', { retryAfter: 1.5 }, 'retryAfter'],
      ['retryAfter as a string', { retryAfter: '2' as never }, 'retryAfter'],
      ['an errorBody that is no function', { errorBody: { code: 1 } as never }, 'errorBody'],
    ];

    it.each(cases)('%s', async (_, options, option) => {
      const error = await Test.createTestingModule({ imports: [LockModule.forRoot(options)] })
        .compile()
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', argument: option });
      expect((error as Error).message).toContain(option);
    });
  });
});
