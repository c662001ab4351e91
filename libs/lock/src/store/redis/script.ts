import { createHash } from 'node:crypto';

/** One compiled Lua script: its text and the SHA1 `EVALSHA` calls it by. */
export interface CompiledScript {
  readonly source: string;
  readonly sha: string;
}

/**
 * A Lua script declared once, called by SHA (`EVALSHA`, with `EVAL` after `NOSCRIPT`), with
 * `numberOfKeys` beside it as ioredis's `defineCommand` has it. A script that publishes wake-ups is
 * declared in two variants: `plain` publishes with PUBLISH; `sharded` with SPUBLISH, for sharded
 * pub/sub on a Redis Cluster (its channels share the hash tag of the script's keys, so the primary
 * that runs the script serves them). A script that publishes nothing has one text for both.
 *
 * A script is called with its KEYS and ARGV as one typed builder writes them from named fields
 * (`acquireArgv` and its kin in `redis-layout.ts`, `redlockAcquire` and its kin in
 * `redlock.scripts.ts`), and reads them by name: its text begins with a header binding each to a
 * local (`local token, ttl = ARGV[1], ARGV[2]`), written beside the builder.
 */
export interface RedisScript {
  /** Unique among nest-lock's scripts: it names the script in messages and logs. */
  readonly name: string;
  readonly numberOfKeys: number;
  readonly plain: CompiledScript;
  readonly sharded: CompiledScript;
}

/** One call of a script: its KEYS and ARGV, in the order its Lua reads them (made by the script's builder). */
export interface ScriptCall {
  readonly script: RedisScript;
  readonly keys: readonly string[];
  readonly argv: readonly (string | number)[];
}

/** The command a wake-up goes out with: PUBLISH, or SPUBLISH on sharded channels. */
export type PublishCommand = 'PUBLISH' | 'SPUBLISH';

const declared = new Map<string, RedisScript>();

/**
 * Declares a script: `source` is its text, or the text as a function of the publish command for a
 * script that publishes wake-ups (both variants are compiled here, once).
 */
export function script(
  name: string,
  numberOfKeys: number,
  source: string | ((publish: PublishCommand) => string),
): RedisScript {
  if (declared.has(name)) throw new Error(`a Redis script named ${name} is declared twice`);
  const plain = compile(typeof source === 'string' ? source : source('PUBLISH'));
  const sharded = typeof source === 'string' ? plain : compile(source('SPUBLISH'));
  const declaredScript = { name, numberOfKeys, plain, sharded };
  declared.set(name, declaredScript);
  return declaredScript;
}

/** Every script declared so far (by the modules imported), in the order of declaration: for the specs. */
export function declaredScripts(): readonly RedisScript[] {
  return [...declared.values()];
}

/**
 * The Lua header that binds KEYS to `names` in order: `local lease, counter = KEYS[1], KEYS[2]`. A
 * script given fewer keys leaves the rest nil.
 */
export function keysHeader(names: readonly string[]): string {
  return `\nlocal ${names.join(', ')} = ${names.map((_, i) => `KEYS[${i + 1}]`).join(', ')}\n`;
}

function compile(source: string): CompiledScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}
