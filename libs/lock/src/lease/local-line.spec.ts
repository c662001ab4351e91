import { describe, expect, it } from '@jest/globals';
import { LocalLines } from './local-line.js';

const LINE = 'lock\0order:42';

/** Enters `line` and records when the turn came (the order of turns), without leaving. */
function queue(lines: LocalLines, order: string[], name: string, deadlineIn = 10_000, signal?: AbortSignal) {
  return lines.enter(LINE, performance.now() + deadlineIn, signal).then((leave) => {
    order.push(name);
    return leave;
  });
}

describe('LocalLines: the fair waiters of one process', () => {
  it('gives the first caller its turn at once, and the others in order of arrival, one at a time', async () => {
    const lines = new LocalLines();
    const order: string[] = [];
    const first = await queue(lines, order, 'a');
    const second = queue(lines, order, 'b');
    const third = queue(lines, order, 'c');
    await Promise.resolve();
    expect(order).toEqual(['a']);
    expect(lines.isBusy(LINE)).toBe(true);

    first!();
    (await second)!();
    (await third)!();
    expect(order).toEqual(['a', 'b', 'c']);
    expect(lines.isBusy(LINE)).toBe(false);
  });

  it('leaves once only: a second leave() does not give the turn away twice', async () => {
    const lines = new LocalLines();
    const order: string[] = [];
    const first = (await queue(lines, order, 'a'))!;
    const second = queue(lines, order, 'b');
    const third = queue(lines, order, 'c');
    first();
    first();
    const leaveSecond = (await second)!;
    await Promise.resolve();
    expect(order).toEqual(['a', 'b']);
    leaveSecond();
    (await third)!();
    expect(order).toEqual(['a', 'b', 'c']);
  });

  it('answers null when the deadline passes first, and the waiter no longer holds up the line', async () => {
    const lines = new LocalLines();
    const order: string[] = [];
    const first = (await queue(lines, order, 'a'))!;
    const late = await lines.enter(LINE, performance.now() + 20);
    expect(late).toBeNull();
    const next = queue(lines, order, 'b');
    first();
    expect(await next).toBeInstanceOf(Function);
    expect(order).toEqual(['a', 'b']);
  });

  it('rejects with the signal’s reason on abort, and the next waiter still gets its turn', async () => {
    const lines = new LocalLines();
    const order: string[] = [];
    const first = (await queue(lines, order, 'a'))!;
    const abort = new AbortController();
    const aborted = queue(lines, order, 'b', 10_000, abort.signal);
    const next = queue(lines, order, 'c');
    abort.abort(new Error('gave up'));
    await expect(aborted).rejects.toThrow('gave up');
    first();
    await next;
    expect(order).toEqual(['a', 'c']);
  });
});

describe('LocalLines: passing a lease inside the process (the cohort)', () => {
  /**
   * A line whose holder took the lease (`won`) at `wonAt`, with `head` now first of this process,
   * waiting on the store since `headSince`.
   */
  async function lineWithHolder(lines: LocalLines, headSince: (wonAt: number) => number) {
    const leaveHolder = (await lines.enter(LINE, performance.now() + 10_000))!;
    lines.waitsOnStore(LINE, 'holder', 1_000, undefined, performance.now());
    const headTurn = lines.enter(LINE, performance.now() + 10_000);
    const wonAt = performance.now();
    const runsOutBy = wonAt + 1_000;
    lines.won(LINE, 'holder', runsOutBy);
    leaveHolder();
    const leaveHead = (await headTurn)!;
    lines.waitsOnStore(LINE, 'head', 1_000, undefined, headSince(wonAt));
    return { leaveHead, runsOutBy };
  }

  it('lets a head that was waiting before this process took the lease go ahead of the store’s line', async () => {
    const lines = new LocalLines();
    const { runsOutBy } = await lineWithHolder(lines, (wonAt) => wonAt - 1_000);

    // It counts on a pass until the holder's lease runs out, moved on by each renewal.
    expect(lines.expectsPassBy(LINE, 'head')).toBe(runsOutBy);
    lines.extended(LINE, 'holder', runsOutBy + 500);
    expect(lines.expectsPassBy(LINE, 'head')).toBe(runsOutBy + 500);
    expect(lines.successor(LINE, 'holder')).toMatchObject({ token: 'head', jump: true });
  });

  it('keeps a head that arrived after this process took the lease behind the store’s line', async () => {
    const lines = new LocalLines();
    await lineWithHolder(lines, () => performance.now() + 1);

    expect(lines.expectsPassBy(LINE, 'head')).toBeUndefined();
    expect(lines.successor(LINE, 'holder')).toMatchObject({ token: 'head', jump: false });
  });

  it('never names the releasing holder as its own successor', async () => {
    const lines = new LocalLines();
    await lineWithHolder(lines, (wonAt) => wonAt - 1_000);

    expect(lines.successor(LINE, 'head')).toBeUndefined();
  });

  it('serves at most 16 passes in a row, then the store’s line moves on (a new tenure begins)', async () => {
    const lines = new LocalLines();
    let holder = 'holder-0';
    let leave = (await lines.enter(LINE, performance.now() + 60_000))!;
    lines.waitsOnStore(LINE, holder, 1_000, undefined, performance.now());
    // Twenty waiters of this process, all queued before the first tenure began.
    const turns = Array.from({ length: 20 }, () => lines.enter(LINE, performance.now() + 60_000));
    const arrivedBefore = performance.now() - 1_000;
    lines.won(LINE, holder, performance.now() + 1_000);
    const jumps: boolean[] = [];
    for (let i = 1; i <= 20; i++) {
      leave();
      leave = (await turns[i - 1])!;
      const next = `holder-${i}`;
      lines.waitsOnStore(LINE, next, 1_000, undefined, arrivedBefore);
      const successor = lines.successor(LINE, holder)!;
      jumps.push(successor.jump);
      successor.passed(1_000 + i);
      lines.won(LINE, next, performance.now() + 1_000);
      holder = next;
    }
    leave();

    expect(jumps).toEqual([...Array.from({ length: 16 }, () => true), false, true, true, true]);
  });

  it('remembers when the release that passed a fence was sent; a release that passed nothing ends the wait for it', async () => {
    const lines = new LocalLines();
    await lineWithHolder(lines, (wonAt) => wonAt - 1_000);
    let notPassed = 0;
    lines.awaitsPass(LINE, 'head', {
      notPassed: () => notPassed++,
      passedHere: () => undefined,
      passedByStore: () => undefined,
    });

    lines.successor(LINE, 'holder')!.passed(0);
    expect(notPassed).toBe(1);

    const before = performance.now();
    lines.successor(LINE, 'holder')!.passed(77);
    expect(lines.passSentAt(LINE, 'head', 77)).toBeGreaterThanOrEqual(before);
    expect(lines.passSentAt(LINE, 'head', 78)).toBeUndefined();
    expect(lines.passSentAt(LINE, 'someone-else', 77)).toBeUndefined();
  });

  it("names the oldest strict waiter standing in the store's line as the successor, never ahead of that line", () => {
    const lines = new LocalLines();
    const leaveFirst = lines.standsInStoreLine(LINE, 'first', 300, undefined);
    lines.standsInStoreLine(LINE, 'second', 2_000, undefined);

    expect(lines.successor(LINE, 'holder')).toMatchObject({ token: 'first', jump: false, ttl: 300 });
    // A strict waiter that holds the lease (its release) is never its own successor.
    expect(lines.successor(LINE, 'first')).toMatchObject({ token: 'second', jump: false, ttl: 2_000 });
    leaveFirst();
    leaveFirst();
    expect(lines.successor(LINE, 'holder')).toMatchObject({ token: 'second' });
  });

  it('passes the lease without a command to the head that waits for a pass and asks the same; else nothing is passed', async () => {
    const lines = new LocalLines();
    await lineWithHolder(lines, (wonAt) => wonAt - 1_000);
    const now = performance.now();
    const times = { sentAt: now, serverTtl: 1_000, validUntil: now + 990, extendAt: now + 333 };
    const pass = { storeToken: 'holder', request: 'write', ...times, passesInARow: 1 };
    const told: unknown[] = [];
    const listener = {
      notPassed: () => told.push('not passed'),
      passedHere: (passed: unknown) => told.push(passed),
      passedByStore: () => told.push('by store'),
    };

    // Not listening (it attempts on the store instead): nothing passed.
    expect(lines.passHere(LINE, 'holder', pass)).toBe(false);
    lines.awaitsPass(LINE, 'head', listener);
    // It asked for something else (the head asked `undefined` in lineWithHolder).
    expect(lines.passHere(LINE, 'holder', pass)).toBe(false);
    expect(lines.passHere(LINE, 'holder', { ...pass, request: undefined })).toBe(true);
    expect(told).toEqual([{ ...pass, request: undefined }]);
    // The head holds it now, one pass into the tenure; the store's token is the first holder's still,
    // which by-token calls may not use, until the lease leaves the process.
    lines.won(LINE, 'head', performance.now() + 1_000);
    expect(lines.heldHere(LINE)).toBe(true);
    expect(lines.isPassedOn(LINE, 'holder')).toBe(true);
    expect(lines.isPassedOn(LINE, 'head')).toBe(false);
    lines.leaseLeft(LINE, 'holder');
    expect(lines.isPassedOn(LINE, 'holder')).toBe(false);
  });

  it('lets a head that arrived after the tenure began go ahead once an attempt found nobody in the store’s line', async () => {
    const lines = new LocalLines();
    const arrivedAt = (wonAt: number) => wonAt + 1;
    const { runsOutBy } = await lineWithHolder(lines, arrivedAt);
    const headArrived = arrivedAt(runsOutBy - 1_000);
    // Arrived after this process took the lease: it may not, unless nobody of another process waits.
    expect(lines.expectsPassBy(LINE, 'head')).toBeUndefined();
    expect(lines.passableIfNobodyWaits(LINE, 'head')).toBe(true);
    expect(lines.passableIfNobodyWaits(LINE, 'someone-else')).toBe(false);

    // Once an attempt found nobody in the store's line, until the lease leaves the process (a new tenure).
    lines.nobodyInStoreLine(LINE);
    expect(lines.expectsPassBy(LINE, 'head')).toBeDefined();
    expect(headArrived).toBeGreaterThan(runsOutBy - 1_000);
  });

  it('does not count on a holder whose lease ran out by what this process knows', async () => {
    const lines = new LocalLines();
    await lineWithHolder(lines, (wonAt) => wonAt + 1);
    lines.extended(LINE, 'holder', performance.now() - 1);
    expect(lines.heldHere(LINE)).toBe(false);
    expect(lines.passableIfNobodyWaits(LINE, 'head')).toBe(false);
  });

  it('counts the callers on the waiters’ path, fair or not: a newcomer joins them rather than try ahead', () => {
    const lines = new LocalLines();
    expect(lines.contended(LINE)).toBe(false);
    lines.arrive(LINE);
    lines.arrive(LINE);
    lines.depart(LINE);
    expect(lines.contended(LINE)).toBe(true);
    lines.depart(LINE);
    expect(lines.contended(LINE)).toBe(false);
  });
});
