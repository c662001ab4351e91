import { afterAll, beforeAll } from '@jest/globals';
import { Test, type TestingModule } from '@nestjs/testing';
import { LockModule, type LockModuleOptions, LockService, SemaphoreService } from 'nest-lock';
import { RedisServer } from './redis-server.js';

export type StoreKind = 'memory' | 'redis';
export const STORE_KINDS: StoreKind[] = ['memory', 'redis'];

export interface LockApp {
  readonly locks: LockService;
  readonly semaphores: SemaphoreService;
  readonly module: TestingModule;
  /** The throwaway server of a `redis` app; absent on the memory store. */
  readonly server?: RedisServer;
}

/** Boots `LockModule.forRoot(options)` in a testing module. */
export async function bootLockModule(options: LockModuleOptions): Promise<LockApp> {
  const module = await Test.createTestingModule({ imports: [LockModule.forRoot(options)] }).compile();
  await module.init();
  return { locks: module.get(LockService), semaphores: module.get(SemaphoreService), module };
}

/** Boots the module on the memory store, or on a fresh redis-server of its own. */
export async function createLockApp(kind: StoreKind, options: LockModuleOptions = {}): Promise<LockApp> {
  if (kind === 'memory') return bootLockModule(options);
  const server = await RedisServer.start();
  return { ...(await bootLockModule({ ...options, redis: server.url })), server };
}

export async function closeLockApp(app: LockApp | undefined): Promise<void> {
  await app?.module.close();
  await app?.server?.stop();
}

/** One app for the whole `describe` block; read `app()` inside tests. */
export function useLockApp(kind: StoreKind, options: LockModuleOptions = {}): () => LockApp {
  let app: LockApp | undefined;
  beforeAll(async () => {
    app = await createLockApp(kind, options);
  });
  afterAll(async () => {
    await closeLockApp(app);
  });
  return () => {
    if (!app) throw new Error('the lock app has not started');
    return app;
  };
}

let counter = 0;
/** A key no other test uses. */
export function uniqueKey(label = 'key'): string {
  return `${label}:${process.pid}:${++counter}`;
}
