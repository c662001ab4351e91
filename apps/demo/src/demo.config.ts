/** The demo's settings, read from the environment and checked at start. */
export interface DemoConfig {
  port: number;
  /** Unset: the embedded memory store (one process). */
  redisUrl?: string;
}

export function readDemoConfig(env: NodeJS.ProcessEnv): DemoConfig {
  const port = Number(env.PORT ?? 3000);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new Error(`PORT must be a port number (0-65535), got "${env.PORT}"`);
  }
  return { port, redisUrl: env.REDIS_URL || undefined };
}
