import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { Injectable } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { LockModule, LockService, LockTimeoutError, WithLock } from 'nest-lock';

@Injectable()
class OrdersService {
  readonly shipped: string[] = [];

  constructor(private readonly locks: LockService) {}

  @WithLock('order:{0}', { timeout: 0 })
  async ship(orderId: string): Promise<void> {
    this.shipped.push(orderId);
  }

  async refund(orderId: string): Promise<boolean> {
    return this.locks.withLock(`order:${orderId}`, async () => true, { timeout: 0 });
  }
}

describe('OrdersService', () => {
  let module: TestingModule;
  let orders: OrdersService;
  let locks: LockService;

  beforeEach(async () => {
    module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ store: 'memory' })],
      providers: [OrdersService],
    }).compile();
    orders = module.get(OrdersService);
    locks = module.get(LockService);
  });
  afterEach(async () => {
    await module.close();
  });

  it('ships an order that nobody else holds', async () => {
    await orders.ship('42');
    expect(orders.shipped).toEqual(['42']);
  });

  it('refuses to ship or refund an order whose lock is held', async () => {
    const held = await locks.lock('order:42');

    await expect(orders.ship('42')).rejects.toThrow(LockTimeoutError);
    await expect(orders.refund('42')).rejects.toThrow(LockTimeoutError);

    await held.unlock();
    expect(await orders.refund('42')).toBe(true);
  });
});
