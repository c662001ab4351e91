import { afterAll, beforeAll } from '@jest/globals';
import { Test, type TestingModule } from '@nestjs/testing';
import { LockModule, type LockModuleOptions, LockService } from 'nest-lock';
import { RedisServer } from './redis-server.js';

export type StoreKind = 'memory' | 'redis';
export const STORE_KINDS: StoreKind[] = ['memory', 'redis'];

export interface LockApp {
  readonly locks: LockService;
  readonly module: TestingModule;
  /** The throwaway server of a `redis` app; absent on the memory store. */
  readonly server?: RedisServer;
}

/** Boots `LockModule.forRoot` in a testing module, on the memory store or a fresh redis-server. */
export async function createLockApp(kind: StoreKind, options: LockModuleOptions = {}): Promise<LockApp> {
  const server = kind === 'redis' ? await RedisServer.start() : undefined;
  const module = await Test.createTestingModule({
    imports: [LockModule.forRoot({ ...options, ...(server && { redis: server.url }) })],
  }).compile();
  await module.init();
  return { locks: module.get(LockService), module, server };
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
