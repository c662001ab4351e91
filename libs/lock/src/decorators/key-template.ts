import { errorMessage, InvalidArgumentError } from '../lock.errors.js';

/**
 * A lock key from a decorated method's arguments: a template like `'order:{0.id}'`, or a function
 * of them. `never[]` so that a function of any parameter types fits, e.g. `(order: Order) => …`.
 */
export type KeyTemplate = string | ((...args: never[]) => string);

/** `{0}` is argument 0; `{0.id}` / `{1.customer.id}` a property path into it. */
const PLACEHOLDER = /\{([^{}]*)\}/g;
const ARGUMENT_PATH = /^(\d+)((?:\.[A-Za-z_$][\w$]*)*)$/;

type Part = string | { placeholder: string; index: number; path: string[] };

/** A compiled template: the key of one call's arguments, and how many arguments it reads. */
export interface CompiledKey {
  (args: unknown[]): string;
  /** One more than the highest argument a placeholder names (`{1}`: 2); 0 for a key function or constant. */
  readonly argumentsRead: number;
}

/** Errors of a template that names a property its argument does not have: the code's fault, not the request's. */
const templateFaults = new WeakSet<object>();

/** Whether `error` is a key template naming a property its argument does not have (a 500, not a 400). */
export function isKeyTemplateFault(error: unknown): boolean {
  return typeof error === 'object' && error !== null && templateFaults.has(error);
}

/**
 * Compiles a template once, when the class is defined, into a function of the method's
 * arguments. A placeholder that resolves to `undefined`, `null`, `''` or an object rejects
 * with `InvalidArgumentError`, so that no call ever locks `order:undefined`; so does a key
 * function or a getter on a placeholder's path that throws (with what it threw as the `cause`):
 * the caller's input could not make a key, which is a 400 on a route. A path through a property
 * its object does not have (`{0.idd}` of `{ id: 1 }`) rejects too, marked as the template's fault
 * (`isKeyTemplateFault`): a 500, since the code names what its arguments never have.
 */
export function compileKeyTemplate(template: KeyTemplate): CompiledKey {
  if (typeof template === 'function') {
    const keyFunction = template as (...args: unknown[]) => unknown;
    return Object.assign(
      (args: unknown[]) => {
        let key: unknown;
        try {
          key = keyFunction(...args);
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
      },
      { argumentsRead: 0 },
    );
  }
  if (typeof template !== 'string' || template === '') {
    throw new InvalidArgumentError('key', 'a key template must be a non-empty string or a function');
  }
  const parts = parse(template);
  const argumentsRead = Math.max(0, ...parts.map((part) => (typeof part === 'string' ? 0 : part.index + 1)));
  return Object.assign(
    (args: unknown[]) =>
      parts.map((part) => (typeof part === 'string' ? part : resolve(template, part, args))).join(''),
    { argumentsRead },
  );
}

/**
 * Refuses, when the class is defined, a template that names an argument the method does not take
 * (`{1}` on `ship(id)`): every call would fail. The method's parameters as TypeScript declared them
 * (`design:paramtypes`, optional ones included; a rest parameter counts once), else its `length`
 * when it has one (plain JavaScript: parameters with defaults are not counted there).
 */
export function checkArgumentsRead(
  compiled: { readonly argumentsRead: number },
  template: unknown,
  target: object,
  propertyKey: string | symbol,
  where: string,
): void {
  if (compiled.argumentsRead === 0) return;
  const declared: unknown = Reflect.getMetadata('design:paramtypes', target, propertyKey);
  const method: unknown = (target as Record<string | symbol, unknown>)[propertyKey];
  const taken = Array.isArray(declared) ? declared.length : typeof method === 'function' ? method.length : 0;
  if (!Array.isArray(declared) && taken === 0) return;
  if (compiled.argumentsRead > taken) {
    const last = compiled.argumentsRead - 1;
    throw new InvalidArgumentError(
      'key',
      `"${String(template)}" names argument {${last}}, but ${where} takes ${taken} argument${taken === 1 ? '' : 's'} ` +
        '(placeholders count from {0}; a rest parameter needs a key function)',
    );
  }
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
      if (value == null) break;
      if ((typeof value === 'object' || typeof value === 'function') && !(property in value)) {
        const fault = new InvalidArgumentError(
          'key',
          `${part.placeholder} of "${template}" names "${property}", which its argument does not have`,
        );
        templateFaults.add(fault);
        throw fault;
      }
      value = (value as Record<string, unknown>)[property];
    }
  } catch (error) {
    if (isKeyTemplateFault(error)) throw error;
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
