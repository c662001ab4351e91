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
 */
export interface RedisScript {
  /** Unique among nest-lock's scripts: it names the script in messages and logs. */
  readonly name: string;
  readonly numberOfKeys: number;
  readonly plain: CompiledScript;
  readonly sharded: CompiledScript;
}

/** The command a wake-up goes out with: PUBLISH, or SPUBLISH on sharded channels. */
export type PublishCommand = 'PUBLISH' | 'SPUBLISH';

const declared = new Set<string>();

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
  declared.add(name);
  const plain = compile(typeof source === 'string' ? source : source('PUBLISH'));
  const sharded = typeof source === 'string' ? plain : compile(source('SPUBLISH'));
  return { name, numberOfKeys, plain, sharded };
}

function compile(source: string): CompiledScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}
