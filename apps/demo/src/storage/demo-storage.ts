import type { Redis } from 'ioredis';

/**
 * The demo's cache and counters. With REDIS_URL they live in Redis, so that several demo
 * processes share one cache and add up their statistics; without it, in this process.
 */
export interface DemoStorage {
  getCached(key: string): Promise<string | undefined>;
  setCached(key: string, value: string, ttlMs: number): Promise<void>;
  deleteCached(key: string): Promise<void>;
  increment(counter: StatName): Promise<void>;
  stats(): Promise<Record<StatName, number>>;
  resetStats(): Promise<void>;
  /** Backend loads of one product, counted apart so that a stampede on it can be measured alone. */
  countLoad(productId: number): Promise<void>;
  loadsOf(productId: number): Promise<number>;
  resetLoadsOf(productId: number): Promise<void>;
  /** A run of the scheduled price refresh: which firing of the schedule, and which process ran it. */
  recordJobRun(run: JobRun): Promise<void>;
  /** The latest runs, newest first (at most `KEEP_JOB_RUNS`). */
  jobRuns(): Promise<JobRun[]>;
  close(): Promise<void>;
}

export interface JobRun {
  /** The firing's moment, ms since the epoch. */
  firing: number;
  by: string;
}

export const KEEP_JOB_RUNS = 20;

export const DemoStorage = Symbol('DemoStorage');

export const STAT_NAMES = [
  'backendCalls',
  'cacheHits',
  'cacheMisses',
  'lockWaits',
  'priceRefreshFirings',
  'priceRefreshRuns',
] as const;
export type StatName = (typeof STAT_NAMES)[number];

function zeroStats(): Record<StatName, number> {
  return Object.fromEntries(STAT_NAMES.map((name) => [name, 0])) as Record<StatName, number>;
}

export class MemoryDemoStorage implements DemoStorage {
  private readonly cache = new Map<string, { value: string; expiresAt: number }>();
  private counters = zeroStats();
  private readonly loads = new Map<number, number>();
  private runs: JobRun[] = [];

  async getCached(key: string): Promise<string | undefined> {
    const entry = this.cache.get(key);
    if (entry === undefined || entry.expiresAt > Date.now()) return entry?.value;
    this.cache.delete(key);
    return undefined;
  }

  async setCached(key: string, value: string, ttlMs: number): Promise<void> {
    this.cache.set(key, { value, expiresAt: Date.now() + ttlMs });
  }

  async deleteCached(key: string): Promise<void> {
    this.cache.delete(key);
  }

  async increment(counter: StatName): Promise<void> {
    this.counters[counter]++;
  }

  async stats(): Promise<Record<StatName, number>> {
    return { ...this.counters };
  }

  async resetStats(): Promise<void> {
    this.counters = zeroStats();
  }

  async countLoad(productId: number): Promise<void> {
    this.loads.set(productId, (this.loads.get(productId) ?? 0) + 1);
  }

  async loadsOf(productId: number): Promise<number> {
    return this.loads.get(productId) ?? 0;
  }

  async resetLoadsOf(productId: number): Promise<void> {
    this.loads.delete(productId);
  }

  async recordJobRun(run: JobRun): Promise<void> {
    this.runs = [run, ...this.runs].slice(0, KEEP_JOB_RUNS);
  }

  async jobRuns(): Promise<JobRun[]> {
    return [...this.runs];
  }

  async close(): Promise<void> {
    this.cache.clear();
    this.loads.clear();
  }
}

const STATS_KEY = 'demo:stats';
const JOB_RUNS_KEY = 'demo:job-runs';
/** Long enough to read after a stampede; short enough that counts of products nobody watches go away. */
const LOADS_TTL_SECONDS = 600;

export class RedisDemoStorage implements DemoStorage {
  constructor(private readonly redis: Redis) {}

  async getCached(key: string): Promise<string | undefined> {
    return (await this.redis.get(`demo:cache:${key}`)) ?? undefined;
  }

  async setCached(key: string, value: string, ttlMs: number): Promise<void> {
    await this.redis.set(`demo:cache:${key}`, value, 'PX', ttlMs);
  }

  async deleteCached(key: string): Promise<void> {
    await this.redis.del(`demo:cache:${key}`);
  }

  async increment(counter: StatName): Promise<void> {
    await this.redis.hincrby(STATS_KEY, counter, 1);
  }

  async stats(): Promise<Record<StatName, number>> {
    const stored = await this.redis.hgetall(STATS_KEY);
    const stats = zeroStats();
    for (const name of STAT_NAMES) stats[name] = Number(stored[name] ?? 0);
    return stats;
  }

  async resetStats(): Promise<void> {
    await this.redis.del(STATS_KEY);
  }

  async countLoad(productId: number): Promise<void> {
    await this.redis
      .multi()
      .incr(`demo:loads:${productId}`)
      .expire(`demo:loads:${productId}`, LOADS_TTL_SECONDS)
      .exec();
  }

  async loadsOf(productId: number): Promise<number> {
    return Number((await this.redis.get(`demo:loads:${productId}`)) ?? 0);
  }

  async resetLoadsOf(productId: number): Promise<void> {
    await this.redis.del(`demo:loads:${productId}`);
  }

  async recordJobRun(run: JobRun): Promise<void> {
    await this.redis
      .multi()
      .lpush(JOB_RUNS_KEY, JSON.stringify(run))
      .ltrim(JOB_RUNS_KEY, 0, KEEP_JOB_RUNS - 1)
      .exec();
  }

  async jobRuns(): Promise<JobRun[]> {
    return (await this.redis.lrange(JOB_RUNS_KEY, 0, -1)).map((entry) => JSON.parse(entry) as JobRun);
  }

  async close(): Promise<void> {
    await this.redis.quit();
  }
}
