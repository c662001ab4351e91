import { Controller, Get, Param, Post } from '@nestjs/common';
import { Semaphore, WithLock } from 'nest-lock';

/** A promise the checks open from outside, so that a request holds its lock or permit until then. */
export class Gate {
  private opened = Promise.resolve();
  private open = () => {};

  close(): void {
    this.opened = new Promise((resolve) => (this.open = resolve));
  }
  release(): void {
    this.open();
  }
  passed(): Promise<void> {
    return this.opened;
  }
}

export const gate = new Gate();

@Controller('orders')
export class OrdersController {
  @Post(':id/ship')
  @WithLock('order:{0}', { timeout: 0 })
  async ship(@Param('id') id: string): Promise<{ shipped: string }> {
    await gate.passed();
    return { shipped: id };
  }

  @Get('report')
  @Semaphore(1, { timeout: 0 })
  async report(): Promise<{ report: string }> {
    await gate.passed();
    return { report: 'ready' };
  }
}
