/** The demo's settings, read from the environment and checked at start. */
export interface DemoConfig {
  port: number;
  /** Unset: the embedded memory store and an in-process cache (one process). */
  redisUrl?: string;
  /** How long the fake catalogue backend takes to answer. */
  backendLatencyMs: number;
  /** How long a product stays cached. */
  cacheTtlMs: number;
  /** How long "no such product" stays cached (shorter: a product may be added). */
  notFoundTtlMs: number;
  /** `DEMO_LOCK=off` turns the cache-miss lock off for the whole process, to show the stampede. */
  lock: boolean;
}

export const DEMO_CONFIG = Symbol('DEMO_CONFIG');

export function readDemoConfig(env: NodeJS.ProcessEnv): DemoConfig {
  return {
    port: integer(env, 'PORT', 3000, 0, 65_535),
    redisUrl: redisUrl(env.REDIS_URL),
    backendLatencyMs: integer(env, 'BACKEND_LATENCY_MS', 200, 0),
    cacheTtlMs: integer(env, 'CACHE_TTL_MS', 60_000, 1),
    notFoundTtlMs: integer(env, 'NOT_FOUND_TTL_MS', 10_000, 1),
    lock: onOff(env, 'DEMO_LOCK'),
  };
}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max = 86_400_000): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${name} must be a whole number from ${min} to ${max}, got "${raw}"`);
  }
  return value;
}

function redisUrl(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (!/^rediss?:\/\//.test(raw)) throw new Error(`REDIS_URL must start with redis:// or rediss://, got "${raw}"`);
  return raw;
}

function onOff(env: NodeJS.ProcessEnv, name: string): boolean {
  const raw = (env[name] ?? 'on').toLowerCase();
  if (raw !== 'on' && raw !== 'off') throw new Error(`${name} must be "on" or "off", got "${env[name]}"`);
  return raw === 'on';
}
