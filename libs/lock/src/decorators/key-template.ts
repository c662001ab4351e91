import { errorMessage, InvalidArgumentError } from '../lock.errors.js';

/** A lock key from a decorated method's arguments: a template like `'order:{0.id}'`, or a function. */
// `any[]` so that a function with the method's own parameter types fits, e.g. `(order: Order) => …`.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type KeyTemplate = string | ((...args: any[]) => string);

/** `{0}` is argument 0; `{0.id}` / `{1.customer.id}` a property path into it. */
const PLACEHOLDER = /\{([^{}]*)\}/g;
const ARGUMENT_PATH = /^(\d+)((?:\.[A-Za-z_$][\w$]*)*)$/;

type Part = string | { placeholder: string; index: number; path: string[] };

/**
 * Compiles a template once, when the class is defined, into a function of the method's
 * arguments. A placeholder that resolves to `undefined`, `null`, `''` or an object rejects
 * with `InvalidArgumentError`, so that no call ever locks `order:undefined`; so does a key
 * function or a getter on a placeholder's path that throws (with what it threw as the `cause`):
 * the caller's input could not make a key, which is a 400 on a route, not a 500.
 */
export function compileKeyTemplate(template: KeyTemplate): (args: unknown[]) => string {
  if (typeof template === 'function') {
    return (args) => {
      let key: unknown;
      try {
        key = template(...args);
      } catch (error) {
        throw new InvalidArgumentError('key', `the key function threw: ${errorMessage(error)}`, { cause: error });
      }
      if (isThenable(key)) {
        // Nobody awaits it: its rejection must not go unhandled (it would end the process).
        Promise.resolve(key).catch(() => undefined);
        throw new InvalidArgumentError('key', 'the key function returned a promise: a key is computed synchronously');
      }
      if (typeof key !== 'string' || key === '') {
        throw new InvalidArgumentError('key', `the key function returned ${describe(key)}, not a non-empty string`);
      }
      return key;
    };
  }
  if (typeof template !== 'string' || template === '') {
    throw new InvalidArgumentError('key', 'a key template must be a non-empty string or a function');
  }
  const parts = parse(template);
  return (args) => parts.map((part) => (typeof part === 'string' ? part : resolve(template, part, args))).join('');
}

/** Braces belong to placeholders: one left in the text around them is a placeholder left open (or never opened). */
function parse(template: string): Part[] {
  const parts: Part[] = [];
  const text = (from: number, to?: number) => {
    const literal = template.slice(from, to);
    const brace = /[{}]/.exec(literal);
    if (brace !== null) {
      const what = brace[0] === '{' ? '"{" is never closed' : '"}" closes nothing';
      throw new InvalidArgumentError('key', `${what} in "${template}": a placeholder is like {0} or {0.id}`);
    }
    parts.push(literal);
  };
  let last = 0;
  for (const match of template.matchAll(PLACEHOLDER)) {
    const path = ARGUMENT_PATH.exec(match[1]);
    if (path === null) {
      throw new InvalidArgumentError('key', `"${match[0]}" in "${template}" is not a placeholder like {0} or {0.id}`);
    }
    text(last, match.index);
    parts.push({ placeholder: match[0], index: Number(path[1]), path: path[2].split('.').filter(Boolean) });
    last = match.index + match[0].length;
  }
  text(last);
  return parts.filter((part) => part !== '');
}

function resolve(template: string, part: Exclude<Part, string>, args: unknown[]): string {
  let value: unknown = args[part.index];
  try {
    for (const property of part.path) {
      value = value == null ? undefined : (value as Record<string, unknown>)[property];
    }
  } catch (error) {
    throw new InvalidArgumentError(
      'key',
      `${part.placeholder} of "${template}" could not be read: ${errorMessage(error)}`,
      { cause: error },
    );
  }
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (typeof value === 'string' && value !== '') return value;
  throw new InvalidArgumentError('key', `${part.placeholder} of "${template}" resolved to ${describe(value)}`);
}

function isThenable(value: unknown): boolean {
  try {
    return typeof (value as { then?: unknown } | null)?.then === 'function';
  } catch {
    return false; // a revoked Proxy: not a promise, refused below like any other object
  }
}

function describe(value: unknown): string {
  if (value === '') return 'an empty string';
  if (value === null || value === undefined) return String(value);
  return typeof value === 'object' ? 'an object' : typeof value;
}
