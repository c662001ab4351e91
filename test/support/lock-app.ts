import { afterAll, beforeAll } from '@jest/globals';
import type { DynamicModule, Provider } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { LockModule, type LockModuleOptions, LockService, SemaphoreService } from 'nest-lock';
import { RedisServer } from './redis-server.js';

/** Which store a test application runs on (not a kind of lease: see `StoreKind` in the library). */
export type AppStore = 'memory' | 'redis';
export const STORE_KINDS: AppStore[] = ['memory', 'redis'];

export interface LockApp {
  readonly locks: LockService;
  readonly semaphores: SemaphoreService;
  readonly module: TestingModule;
  /** The throwaway server of a `redis` app; absent on the memory store. */
  readonly server?: RedisServer;
}

/** Boots `LockModule.forRoot(options)` in a testing module, beside `providers` (decorated classes, say). */
export async function bootLockModule(options: LockModuleOptions, providers: Provider[] = []): Promise<LockApp> {
  const module = await Test.createTestingModule({ imports: [LockModule.forRoot(options)], providers }).compile();
  await module.init();
  return { locks: module.get(LockService), semaphores: module.get(SemaphoreService), module };
}

/** Boots the module on the memory store, or on a fresh redis-server of its own. */
export async function createLockApp(
  kind: AppStore,
  options: LockModuleOptions = {},
  providers: Provider[] = [],
): Promise<LockApp> {
  if (kind === 'memory') return bootLockModule(options, providers);
  const server = await RedisServer.start();
  return { ...(await bootLockModule({ ...options, redis: server.url }, providers)), server };
}

export async function closeLockApp(app: LockApp | undefined): Promise<void> {
  await app?.module.close();
  await app?.server?.stop();
}

/** One app for the whole `describe` block; read `app()` inside tests. */
export function useLockApp(kind: AppStore, options: LockModuleOptions = {}, providers: Provider[] = []): () => LockApp {
  let app: LockApp | undefined;
  beforeAll(async () => {
    app = await createLockApp(kind, options, providers);
  });
  afterAll(async () => {
    await closeLockApp(app);
  });
  return () => {
    if (!app) throw new Error('the lock app has not started');
    return app;
  };
}

/**
 * `count` applications of one store, for the whole `describe` block: on Redis that many applications on
 * one server of their own (other processes, as far as Redis can tell); on the memory store one application
 * standing for all of them — there lock() and tryLock() are never re-entrant, so another call is another
 * owner. Read `apps()` inside tests.
 */
export function useLockApps(kind: AppStore, count: number, options: LockModuleOptions = {}): () => LockApp[] {
  const apps: LockApp[] = [];
  beforeAll(async () => {
    const first = await createLockApp(kind, options);
    apps.push(first);
    while (apps.length < count) {
      apps.push(kind === 'redis' ? await bootLockModule({ ...options, redis: first.server!.url }) : first);
    }
  });
  afterAll(async () => {
    // The last first: the first one owns the server.
    for (const app of new Set([...apps].reverse())) await closeLockApp(app);
  });
  return () => {
    if (apps.length < count) throw new Error('the lock apps have not started');
    return apps;
  };
}

/**
 * What bootstrapping a testing module threw, or `undefined` when it booted (it is closed again): of
 * `LockModule.forRoot(options)`, or of a module given whole (`LockModule.forRootAsync(…)`).
 */
export async function bootstrapError(imported: LockModuleOptions | DynamicModule): Promise<unknown> {
  try {
    const module = 'module' in imported ? imported : LockModule.forRoot(imported);
    const testing = await Test.createTestingModule({ imports: [module] }).compile();
    await testing.close();
    return undefined;
  } catch (error) {
    return error;
  }
}

let counter = 0;
/** A key no other test uses. */
export function uniqueKey(label = 'key'): string {
  return `${label}:${process.pid}:${++counter}`;
}
