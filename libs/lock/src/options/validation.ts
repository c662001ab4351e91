import { InvalidArgumentError } from '../lock.errors.js';

/** A plain options object: not null, not an array. */
export function isPlainObject(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Refuses an option name that is not `known`: a misspelt option must not be silently ignored. */
export function rejectUnknownNames(prefix: string, options: object, known: ReadonlySet<string>): void {
  for (const name in options) {
    if (Object.hasOwn(options, name) && !known.has(name)) {
      throw new InvalidArgumentError(`${prefix}${name}`, `unknown option (known: ${[...known].join(', ')})`);
    }
  }
}

/** A value as an error message shows it: strings quoted, objects by their type. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  return typeof value;
}

export function validateBoolean(value: unknown, argument: string): boolean | undefined {
  if (value !== undefined && typeof value !== 'boolean') {
    throw new InvalidArgumentError(argument, `must be true or false, got ${describe(value)}`);
  }
  return value;
}

/** A lone surrogate: two different ones encode to the same bytes (U+FFFD) in Redis, so their keys would collide. */
const LONE_SURROGATE = /\p{Surrogate}/u;

/** Well-formed Unicode: no lone surrogate. */
export function isWellFormed(text: string): boolean {
  return !LONE_SURROGATE.test(text);
}
