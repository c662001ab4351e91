import type { ChainLease, HoldTicket } from './lease-chain.js';

/**
 * Releases put off until a moment (`holdAtLeast`): a holder done early keeps its lease until then,
 * so that a second process firing the same schedule a little later finds it held and skips. A
 * shutdown (`leaveAllNow`) gives every one back at once, and from then on none waits. The timers do
 * not hold the process open: a process that exits meanwhile leaves its leases to run out.
 */
export class ScheduledLeaves {
  private readonly pending = new Map<NodeJS.Timeout, () => Promise<void>>();
  private closing = false;

  /**
   * `ticket`, whose `leave()` leaves no sooner than `ms` after now (the routine's start), and never
   * more than `ttl` after now: a lease is not kept past its `ttl` for `holdAtLeast`.
   */
  holdAtLeast<L extends ChainLease>(ticket: HoldTicket<L>, ms: number, ttl: number): HoldTicket<L> {
    const until = performance.now() + Math.min(ms, ttl);
    return {
      lease: ticket.lease,
      handle: ticket.handle,
      run: (fn) => ticket.run(fn),
      leave: () => this.leaveAt(() => ticket.leave(), until),
    };
  }

  /** Every release still put off, now (the application shuts down); later ones are not put off. */
  async leaveAllNow(): Promise<void> {
    this.closing = true;
    const leaves = [...this.pending.values()];
    for (const timer of this.pending.keys()) clearTimeout(timer);
    this.pending.clear();
    await Promise.all(leaves.map((leave) => leave()));
  }

  /** Calls `leave` at `until` (`performance.now()` time), or now when that has passed or shutdown began. */
  private leaveAt(leave: () => Promise<void>, until: number): Promise<void> {
    const wait = until - performance.now();
    if (wait <= 0 || this.closing) return leave();
    const timer = setTimeout(() => {
      this.pending.delete(timer);
      void leave();
    }, wait);
    timer.unref();
    this.pending.set(timer, leave);
    return Promise.resolve();
  }
}
