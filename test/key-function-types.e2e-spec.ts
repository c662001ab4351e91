import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { currentLock, InvalidArgumentError, LockModule, WithLock } from 'nest-lock';
import { useBuilt } from './support/built.js';
import { compileSnippets } from './support/typescript.js';

interface Order {
  id: string;
}

/**
 * `@WithLock`'s key function is type-checked against the decorated method's parameters: `npm run lint`
 * runs tsc over this file, and each `@ts-expect-error` below fails it if the mismatch compiled.
 */
@Injectable()
class Orders {
  @WithLock((order: Order) => `order:${order.id}`)
  async ship(order: Order, _carrier: string) {
    return `${currentLock()?.key} for ${order.id}`;
  }

  // A key function may accept more than the method passes.
  @WithLock((id: string | number) => `order:${id}`)
  async cancel(id: string) {
    return `${currentLock()?.key} for ${id}`;
  }

  // Without parameter types the arguments are `unknown`: a key function that needs more annotates them.
  @WithLock((id) => `order:${String(id)}`)
  async refund(id: number) {
    return `${currentLock()?.key} for ${id}`;
  }

  // @ts-expect-error -- the key function takes an Order, the method passes a string
  @WithLock((order: Order) => `order:${order.id}`)
  async archive(id: string) {
    return id;
  }

  // @ts-expect-error -- the key function needs two arguments, the method passes one
  @WithLock((region: string, id: string) => `order:${region}:${id}`)
  async split(id: string) {
    return id;
  }
}

describe('@WithLock key functions typed against the method', () => {
  let module: TestingModule;
  let orders: Orders;

  beforeAll(async () => {
    module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ store: 'memory' })],
      providers: [Orders],
    }).compile();
    orders = module.get(Orders);
  });
  afterAll(async () => {
    await module.close();
  });

  it('lock the key the typed functions build from the arguments', async () => {
    expect(await orders.ship({ id: '42' }, 'post')).toBe('order:42 for 42');
    expect(await orders.cancel('43')).toBe('order:43 for 43');
    expect(await orders.refund(44)).toBe('order:44 for 44');
  });
});

describe('mistakes in decorator options and templates, caught where they are made', () => {
  // compileSnippets checks against the built declarations.
  useBuilt('library');
  const decorated = (decorator: string, method = 'ship(id: string): Promise<void>') =>
    `import { Semaphore, WithLock } from 'nest-lock';
class Orders {
  ${decorator}
  async ${method.replace(': Promise<void>', '')} {}
}
export { Orders };
`;

  // Found by the first-hour review: the error pointed at the key ("not assignable to 'readonly KeyTemplate[]'").
  it.each([
    ["@WithLock('order:{0}', { timout: 0 })", /'timout' does not exist in type 'WithLockOptions'/],
    ["@WithLock('order:{0}', { onBusy: 'ignore' })", /'"ignore"' is not assignable to type 'OnBusy/],
    ["@WithLock(['a:{0}', 'b:{0}'], { timout: 0 })", /'timout' does not exist/],
    ['@WithLock((id: string) => `order:${id}`, { timout: 0 })', /'timout' does not exist/],
    ["@WithLock('order:{0}', { token: 't' })", /'token' does not exist in type 'WithLockOptions'/],
    ['@Semaphore(2, { timout: 0 })', /'timout' does not exist in type 'SemaphoreDecoratorOptions'/],
    ['@Semaphore(2, { signal: new AbortController().signal })', /'signal' does not exist/],
  ])(
    '%s fails to compile, saying what is wrong with the option',
    (decorator, why) => {
      const errors = compileSnippets([decorated(decorator)]);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(why);
    },
    60_000,
  );

  it('a correct decorator compiles (the check is real)', () => {
    expect(compileSnippets([decorated("@WithLock('order:{0}', { timeout: 0, onBusy: 'skip' })")])).toEqual([]);
  }, 60_000);

  // Found by the first-hour review: '{1}' on a one-argument method failed on every call, not before.
  it('refuses a template naming an argument the method does not take, when the class is defined', () => {
    const define = (template: string) => {
      class Shipping {
        @WithLock(template)
        async ship(id: string) {
          return id;
        }
      }
      return Shipping;
    };
    expect(() => define('order:{1}')).toThrow(InvalidArgumentError);
    expect(() => define('order:{1}')).toThrow(/names argument \{1\}, but Shipping.ship takes 1 argument/);
    expect(() => define('order:{0}')).not.toThrow();
    expect(() => define('order:{0.length}')).not.toThrow();
  });
});
