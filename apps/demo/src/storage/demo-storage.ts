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
  /** A run of a scheduled job: which firing of the schedule, and which process ran it. */
  recordJobRun(job: JobName, run: JobRun): Promise<void>;
  /** The latest runs of `job`, newest first (at most `KEEP_JOB_RUNS`). */
  jobRuns(job: JobName): Promise<JobRun[]>;
  /**
   * A process elected leader of the demo processes. Fenced by its term: a record with a term below
   * the one stored (a deposed leader's late write) is refused, and `false` says so.
   */
  recordLeader(leader: LeaderRecord): Promise<boolean>;
  /** The latest leader recorded, if any. */
  leader(): Promise<LeaderRecord | undefined>;
  /** How many commands Redis has processed (INFO), to count a run's; `undefined` without Redis. */
  commandsProcessed(): Promise<number | undefined>;
  close(): Promise<void>;
}

/** The demo's scheduled jobs: the skip-when-busy price refresh and the leader-only stock report. */
export type JobName = 'priceRefresh' | 'stockReport';

export interface JobRun {
  /** The firing's moment, ms since the epoch. */
  firing: number;
  by: string;
  /** The leader's term, for a leader-only job. */
  term?: number;
}

export interface LeaderRecord {
  by: string;
  term: number;
  /** When its leadership began, ms since the epoch. */
  since: number;
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
  'stockReportFirings',
  'stockReportRuns',
] as const;
export type StatName = (typeof STAT_NAMES)[number];

function zeroStats(): Record<StatName, number> {
  return Object.fromEntries(STAT_NAMES.map((name) => [name, 0])) as Record<StatName, number>;
}

export class MemoryDemoStorage implements DemoStorage {
  private readonly cache = new Map<string, { value: string; expiresAt: number }>();
  private counters = zeroStats();
  private readonly loads = new Map<number, number>();
  private readonly runs: Record<JobName, JobRun[]> = { priceRefresh: [], stockReport: [] };
  private latestLeader?: LeaderRecord;

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

  async recordJobRun(job: JobName, run: JobRun): Promise<void> {
    this.runs[job] = [run, ...this.runs[job]].slice(0, KEEP_JOB_RUNS);
  }

  async jobRuns(job: JobName): Promise<JobRun[]> {
    return [...this.runs[job]];
  }

  async recordLeader(leader: LeaderRecord): Promise<boolean> {
    if (this.latestLeader !== undefined && leader.term < this.latestLeader.term) return false;
    this.latestLeader = { ...leader };
    return true;
  }

  async leader(): Promise<LeaderRecord | undefined> {
    return this.latestLeader && { ...this.latestLeader };
  }

  async commandsProcessed(): Promise<undefined> {
    return undefined;
  }

  async close(): Promise<void> {
    this.cache.clear();
    this.loads.clear();
  }
}

const STATS_KEY = 'demo:stats';
const JOB_RUNS_KEYS: Record<JobName, string> = {
  priceRefresh: 'demo:job-runs',
  stockReport: 'demo:job-runs:stock-report',
};
const LEADER_KEY = 'demo:leader';
/**
 * KEYS[1]: the leader record (a hash: by, term, since). ARGV: by, term, since.
 * Returns 1 when recorded, 0 when refused: the term fences the record, so a deposed leader whose
 * write arrives after its successor's cannot put itself back on the page.
 */
const RECORD_LEADER = `
if tonumber(redis.call('HGET', KEYS[1], 'term') or '-1') > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'by', ARGV[1], 'term', ARGV[2], 'since', ARGV[3])
return 1`;
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

  async recordJobRun(job: JobName, run: JobRun): Promise<void> {
    const key = JOB_RUNS_KEYS[job];
    await this.redis
      .multi()
      .lpush(key, JSON.stringify(run))
      .ltrim(key, 0, KEEP_JOB_RUNS - 1)
      .exec();
  }

  async jobRuns(job: JobName): Promise<JobRun[]> {
    return (await this.redis.lrange(JOB_RUNS_KEYS[job], 0, -1)).map((entry) => JSON.parse(entry) as JobRun);
  }

  async recordLeader({ by, term, since }: LeaderRecord): Promise<boolean> {
    return (await this.redis.eval(RECORD_LEADER, 1, LEADER_KEY, by, term, since)) === 1;
  }

  async leader(): Promise<LeaderRecord | undefined> {
    const { by, term, since } = await this.redis.hgetall(LEADER_KEY);
    return by === undefined ? undefined : { by, term: Number(term), since: Number(since) };
  }

  async commandsProcessed(): Promise<number> {
    return Number(/total_commands_processed:(\d+)/.exec(await this.redis.info('stats'))?.[1] ?? 0);
  }

  async close(): Promise<void> {
    await this.redis.quit();
  }
}
