import type { Cluster, Redis } from 'ioredis';
import { errorMessage, LockBackendError } from '../lock.errors.js';
import {
  acquireLockScript,
  acquirePermitScript,
  countPermitsScript,
  extendLockScript,
  extendPermitScript,
  type RedisScript,
  releaseLockScript,
  releasePermitScript,
} from './redis.scripts.js';
import type { LockStore } from './store.js';

export interface RedisStoreOptions {
  /** Prefix of every key, e.g. `lock:`. */
  keyPrefix: string;
  /** Longest time one command may take before it fails with `LockBackendError`. */
  commandTimeout: number;
  /** `close()` quits the client only when the module created it; a client passed in stays open. */
  ownsClient: boolean;
}

/**
 * Leases on Redis: `SET NX PX` and compare-by-token Lua scripts, called by SHA.
 *
 * Key layout: the lock for `key` is `<prefix>{<key>}`; companions are `<prefix>{<key>}:<suffix>`.
 * Semaphore `name` is the sorted set `<prefix>sem:{<name>}`, companions `<prefix>sem:{<name>}:<suffix>`.
 * The user's key or name is the hash tag, so that one lock or semaphore lives in one cluster slot.
 */
export class RedisStore implements LockStore {
  private closed = false;

  constructor(
    private readonly client: Redis | Cluster,
    private readonly options: RedisStoreOptions,
  ) {}

  async acquireLock(key: string, token: string, ttl: number): Promise<boolean> {
    return (await this.runScript(acquireLockScript, key, [this.lockKey(key)], [token, toMillis(ttl)])) === 1;
  }

  async releaseLock(key: string, token: string): Promise<boolean> {
    return (await this.runScript(releaseLockScript, key, [this.lockKey(key)], [token])) === 1;
  }

  async extendLock(key: string, token: string, ttl: number): Promise<boolean> {
    return (await this.runScript(extendLockScript, key, [this.lockKey(key)], [token, toMillis(ttl)])) === 1;
  }

  async isLocked(key: string): Promise<boolean> {
    return (await this.run(key, 'EXISTS', () => this.client.exists(this.lockKey(key)))) === 1;
  }

  async acquirePermit(name: string, token: string, limit: number, ttl: number): Promise<boolean> {
    const keys = [this.semaphoreKey(name)];
    return (await this.runScript(acquirePermitScript, name, keys, [token, limit, toMillis(ttl)])) === 1;
  }

  async releasePermit(name: string, token: string): Promise<boolean> {
    return (await this.runScript(releasePermitScript, name, [this.semaphoreKey(name)], [token])) === 1;
  }

  async extendPermit(name: string, token: string, ttl: number): Promise<boolean> {
    return (await this.runScript(extendPermitScript, name, [this.semaphoreKey(name)], [token, toMillis(ttl)])) === 1;
  }

  async countPermits(name: string): Promise<number> {
    return Number(await this.runScript(countPermitsScript, name, [this.semaphoreKey(name)], []));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (!this.options.ownsClient) return;
    if (this.client.status === 'ready') {
      // QUIT lets replies already on their way arrive; bounded, because a stopped server never answers.
      await this.withTimeout(this.client.quit(), 'QUIT', '').catch(() => undefined);
    }
    this.client.disconnect();
  }

  /** `<prefix>{<key>}`: the user key is the hash tag. */
  lockKey(key: string): string {
    return `${this.options.keyPrefix}{${key}}`;
  }

  /** `<prefix>sem:{<name>}`: the semaphore name is the hash tag. */
  semaphoreKey(name: string): string {
    return `${this.options.keyPrefix}sem:{${name}}`;
  }

  private runScript(script: RedisScript, key: string, keys: string[], args: (string | number)[]): Promise<unknown> {
    return this.run(key, script.name, async () => {
      try {
        return await this.client.evalsha(script.sha, script.numberOfKeys, ...keys, ...args);
      } catch (error) {
        // The server lost its script cache (restart, failover, SCRIPT FLUSH): EVAL runs and caches it again.
        if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
        return await this.client.eval(script.source, script.numberOfKeys, ...keys, ...args);
      }
    });
  }

  /** Runs one store operation: a closed store, a timeout and every client error become `LockBackendError`. */
  private async run<T>(key: string, operation: string, command: () => Promise<T>): Promise<T> {
    if (this.closed) throw new LockBackendError('The Redis lock store is closed', key);
    try {
      return await this.withTimeout(command(), operation, key);
    } catch (error) {
      if (error instanceof LockBackendError) throw error;
      throw new LockBackendError(`Redis ${operation} failed for "${key}": ${errorMessage(error)}`, key, {
        cause: error,
      });
    }
  }

  private async withTimeout<T>(command: Promise<T>, operation: string, key: string): Promise<T> {
    const { commandTimeout } = this.options;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      const message = `Redis did not answer ${operation} within ${commandTimeout} ms`;
      timer = setTimeout(() => reject(new LockBackendError(message, key || undefined)), commandTimeout);
    });
    try {
      // race() subscribes to `command`, so its late rejection after a timeout is handled, not unhandled.
      return await Promise.race([command, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** `PX` takes whole milliseconds; rounding up never shortens a lease. */
function toMillis(ttl: number): number {
  return Math.ceil(ttl);
}
