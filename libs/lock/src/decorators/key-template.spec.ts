import { describe, expect, it } from '@jest/globals';
import { InvalidArgumentError } from '../lock.errors.js';
import { compileKeyTemplate, isKeyTemplateFault } from './key-template.js';

describe('compileKeyTemplate', () => {
  it('fills placeholders from the arguments and property paths into them', () => {
    const keyOf = compileKeyTemplate('order:{0}:line:{1.line.id}');

    expect(keyOf(['42', { line: { id: 7 } }])).toBe('order:42:line:7');
  });

  it('keeps a template without placeholders as it is', () => {
    expect(compileKeyTemplate('reindex')([])).toBe('reindex');
  });

  it('calls a key function with the arguments', () => {
    const keyOf = compileKeyTemplate((order: { id: number }) => `order:${order.id}`);

    expect(keyOf([{ id: 9 }])).toBe('order:9');
  });

  it.each([
    ['undefined', [undefined]],
    ['null', [null]],
    ["''", ['']],
    ['a missing argument', []],
    ['an object', [{ id: 1 }]],
  ])('refuses a placeholder that resolves to %s', (_, args) => {
    expect(() => compileKeyTemplate('order:{0}')(args)).toThrow(InvalidArgumentError);
  });

  // Found by the fourth outside review: 'order:{0' locked one constant key for every call.
  it.each([
    ['order:{0', '"{" is never closed'],
    ['order:{0}:{1', '"{" is never closed'],
    ['{0}}', '"}" closes nothing'],
    ['order:0}', '"}" closes nothing'],
    ['{{0}', '"{" is never closed'],
  ])('refuses %s when it is compiled (the class is defined), not per call', (template, why) => {
    expect(() => compileKeyTemplate(template)).toThrow(InvalidArgumentError);
    expect(() => compileKeyTemplate(template)).toThrow(why);
  });

  it('names the placeholder and the template in the error', () => {
    expect(() => compileKeyTemplate('order:{0.id}')([{ id: undefined }])).toThrow(
      '{0.id} of "order:{0.id}" resolved to undefined',
    );
  });

  it('marks a path through a property its object does not have as the template’s fault, not the input’s', () => {
    const keyOf = compileKeyTemplate('order:{0.idd}');
    const fault = (() => {
      try {
        keyOf([{ id: 42 }]);
      } catch (error) {
        return error;
      }
    })();
    expect(fault).toBeInstanceOf(InvalidArgumentError);
    expect(String((fault as Error).message)).toContain(
      '{0.idd} of "order:{0.idd}" names "idd", which its argument does not have',
    );
    expect(isKeyTemplateFault(fault)).toBe(true);
    let inputError: unknown;
    try {
      compileKeyTemplate('order:{0.id}')([{ id: '' }]);
    } catch (error) {
      inputError = error;
    }
    expect(isKeyTemplateFault(inputError)).toBe(false);
  });

  it('counts the arguments a template reads', () => {
    expect(compileKeyTemplate('order:{0}:{2.id}').argumentsRead).toBe(3);
    expect(compileKeyTemplate('reindex').argumentsRead).toBe(0);
    expect(compileKeyTemplate((id: string) => id).argumentsRead).toBe(0);
  });

  it('refuses a key function that returns no string', () => {
    expect(() => compileKeyTemplate(() => undefined as unknown as string)([])).toThrow(InvalidArgumentError);
  });

  it('turns a key function that throws into InvalidArgumentError (key), with the error as its cause', () => {
    const failure = new TypeError("Cannot read properties of undefined (reading 'id')");
    const keyOf = compileKeyTemplate(() => {
      throw failure;
    });

    let error: unknown;
    try {
      keyOf([]);
    } catch (thrown) {
      error = thrown;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ argument: 'key', cause: failure });
    expect((error as Error).message).toContain('the key function threw');
    expect((error as Error).message).toContain(failure.message);
  });

  it('turns a getter that throws on a placeholder path into InvalidArgumentError (key), with the error as its cause', () => {
    const failure = new Error('not loaded');
    const order = Object.defineProperty({}, 'customer', {
      get() {
        throw failure;
      },
    });

    let error: unknown;
    try {
      compileKeyTemplate('order:{0.customer.id}')([order]);
    } catch (thrown) {
      error = thrown;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ argument: 'key', cause: failure });
    expect((error as Error).message).toContain('{0.customer.id} of "order:{0.customer.id}"');
  });

  it.each([
    ['an object without a prototype', () => Object.create(null) as unknown],
    [
      'an object whose toString throws',
      () => ({
        toString: () => {
          throw new Error('no string');
        },
      }),
    ],
    [
      'a revoked Proxy',
      () => {
        const { proxy, revoke } = Proxy.revocable({}, {});
        revoke();
        return proxy;
      },
    ],
    [
      'an Error whose message getter throws',
      () =>
        Object.defineProperty(new Error(), 'message', {
          get() {
            throw new Error('no message');
          },
        }),
    ],
  ])('turns a key function that throws %s into InvalidArgumentError (key)', (_, thrown) => {
    const value = thrown();
    let error: unknown;
    try {
      compileKeyTemplate(() => {
        throw value;
      })([]);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('key');
    expect((error as Error).cause).toBe(value);
  });

  it('turns a getter that throws an object without a prototype into InvalidArgumentError (key)', () => {
    const value = Object.create(null) as unknown;
    const order = Object.defineProperty({}, 'id', {
      get() {
        throw value;
      },
    });
    expect(() => compileKeyTemplate('order:{0.id}')([order])).toThrow(InvalidArgumentError);
  });

  it('refuses a key function that returns a promise, and handles its rejection (no unhandled rejection)', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const keyOf = compileKeyTemplate((() => Promise.reject(new Error('async key'))) as unknown as () => string);
      expect(() => keyOf([])).toThrow(/returned a promise/);
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it.each(['order:{id}', 'order:{}', 'order:{0.}', ''])(
    'refuses the template %p when the class is defined',
    (template) => {
      expect(() => compileKeyTemplate(template)).toThrow(InvalidArgumentError);
    },
  );
});
