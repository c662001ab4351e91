import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { currentLock, LockModule, WithLock } from 'nest-lock';

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

  // Without parameter types the arguments are `any`, as they always were.
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
