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
  /**
   * `DEMO_PEERS`: the URLs of the other demo processes on the same REDIS_URL, comma-separated;
   * `POST /stampede` with `spread: true` fires its requests round-robin over them and this one.
   */
  peers: string[];
}

export const DEMO_CONFIG = Symbol('DEMO_CONFIG');

export function readDemoConfig(env: NodeJS.ProcessEnv): DemoConfig {
  const redisUrl = redisUrlOf(env.REDIS_URL);
  const peers = peerUrls(env.DEMO_PEERS);
  if (peers.length > 0 && redisUrl === undefined) {
    throw new Error('DEMO_PEERS needs REDIS_URL: without it every process has its own locks and cache');
  }
  return {
    port: integer(env, 'PORT', 3000, 0, 65_535),
    redisUrl,
    backendLatencyMs: integer(env, 'BACKEND_LATENCY_MS', 200, 0),
    cacheTtlMs: integer(env, 'CACHE_TTL_MS', 60_000, 1),
    notFoundTtlMs: integer(env, 'NOT_FOUND_TTL_MS', 10_000, 1),
    lock: onOff(env, 'DEMO_LOCK'),
    peers,
  };
}

/** How the page names a demo process. */
export function processLabel(config: DemoConfig): string {
  return `pid ${process.pid} (port ${config.port})`;
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

function redisUrlOf(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (!/^rediss?:\/\//.test(raw)) throw new Error(`REDIS_URL must start with redis:// or rediss://, got "${raw}"`);
  return raw;
}

function peerUrls(raw: string | undefined): string[] {
  if (raw === undefined || raw.trim() === '') return [];
  return raw.split(',').map((entry) => {
    const url = entry.trim().replace(/\/+$/, '');
    if (!/^https?:\/\/[^/]+$/.test(url)) {
      throw new Error(`DEMO_PEERS must list base URLs such as http://localhost:3001, comma-separated; got "${entry}"`);
    }
    return url;
  });
}

function onOff(env: NodeJS.ProcessEnv, name: string): boolean {
  const raw = (env[name] ?? 'on').toLowerCase();
  if (raw !== 'on' && raw !== 'off') throw new Error(`${name} must be "on" or "off", got "${env[name]}"`);
  return raw === 'on';
}
