import { describe, expect, it, jest } from '@jest/globals';
import { setTimeout as delay } from 'node:timers/promises';
import { lockKind } from '../kinds/lock.kind.js';
import { semaphoreKind } from '../kinds/semaphore.kind.js';
import { DEFAULT_LEASE } from '../options/call-options.js';
import { MemoryStore } from '../store/memory/memory.store.js';
import { acquireLease, type LeaseCall } from './acquire-lease.js';
import { acceptedHandover } from './handover-rules.js';
import { LocalLines, lineOf } from './local-line.js';
import { ReleaseRetries } from './release-retries.js';
import { Watchdog } from './watchdog.js';

const HANDOVER = 1_000;
/** A lease of `leaseMs` that began at `sentAt` still runs until `sentAt + leaseMs` (no drift here). */
const stillRunsAt = (now: number) => (sentAt: number, leaseMs: number) => now < sentAt + leaseMs;

describe('acceptedHandover: the handover rules', () => {
  const refused = { at: 100, lastFence: 50 };

  it('takes a lease passed by a release of this process, counting from when that release was sent', () => {
    expect(acceptedHandover({ fence: 40, lease: HANDOVER, passedAt: 300 }, refused, stillRunsAt(500))).toEqual({
      fence: 40,
      sentAt: 300,
      serverTtl: HANDOVER,
    });
  });

  it('takes a lease told by a message when its fence is above the last fence the refused attempt saw', () => {
    expect(acceptedHandover({ fence: 51, lease: HANDOVER }, refused, stillRunsAt(500))).toEqual({
      fence: 51,
      sentAt: 100,
      serverTtl: HANDOVER,
    });
  });

  it('refuses a message whose fence is at or below it: handed over before that attempt ran (stale)', () => {
    expect(acceptedHandover({ fence: 50, lease: HANDOVER }, refused, stillRunsAt(500))).toBeNull();
    expect(acceptedHandover({ fence: 12, lease: HANDOVER }, refused, stillRunsAt(500))).toBeNull();
  });

  it('refuses a handover read after its lease ran out by this waiter’s clock, passed or told', () => {
    expect(acceptedHandover({ fence: 51, lease: HANDOVER }, refused, stillRunsAt(100 + HANDOVER))).toBeNull();
    expect(
      acceptedHandover({ fence: 40, lease: HANDOVER, passedAt: 300 }, refused, stillRunsAt(300 + HANDOVER)),
    ).toBeNull();
  });

  it('confirms by an attempt a handover read with less than a third of its lease left, passed or told', () => {
    const lateInLease = (sentAt: number) => stillRunsAt(sentAt + (HANDOVER * 3) / 4);
    expect(acceptedHandover({ fence: 51, lease: HANDOVER }, refused, lateInLease(100))).toBeNull();
    expect(acceptedHandover({ fence: 40, lease: HANDOVER, passedAt: 300 }, refused, lateInLease(300))).toBeNull();
    expect(acceptedHandover({ fence: 51, lease: HANDOVER }, refused, stillRunsAt(100 + HANDOVER / 2))).not.toBeNull();
  });

  it('counts the lease as the releaser wrote it, whatever this waiter’s own handover lease', () => {
    // Another process's release, with other settings, wrote 200 ms: taken, and runs out by 300.
    expect(acceptedHandover({ fence: 51, lease: 200 }, refused, stillRunsAt(150))).toEqual({
      fence: 51,
      sentAt: 100,
      serverTtl: 200,
    });
    // Read at 250, a third of those 200 ms is no longer ahead: confirmed by an attempt instead.
    expect(acceptedHandover({ fence: 51, lease: 200 }, refused, stillRunsAt(250))).toBeNull();
  });

  it('refuses a message before any attempt was refused (nothing to compare its fence with)', () => {
    const none = { at: -Infinity, lastFence: Infinity };
    expect(acceptedHandover({ fence: 99, lease: HANDOVER }, none, stillRunsAt(0))).toBeNull();
  });
});

describe('acquireLease on the memory store', () => {
  const store = new MemoryStore();
  const keeping = {
    store,
    lines: new LocalLines(),
    watchdog: new Watchdog(store, undefined, { warn: () => undefined }),
    releases: new ReleaseRetries(),
  };
  const call = <R>(kind: LeaseCall<R>['kind'], id: string, request: R, overrides = {}): LeaseCall<R> => ({
    kind,
    id,
    request,
    policy: { ...DEFAULT_LEASE, ttl: 1_000, timeout: 500, fair: true, ...overrides },
  });

  it('grants a free lease at once, with elapsed exactly 0 and the ttl asked for', async () => {
    const grant = await acquireLease(keeping, call(lockKind, 'free', undefined), 1_000);

    expect(grant).toMatchObject({ elapsed: 0, ttl: 1_000, serverTtl: 1_000 });
    // No fence is drawn for it: its holder draws one when it asks (`HeldLease.fence()`).
    expect(grant).not.toHaveProperty('fence');
  });

  it('takes a free lease in one step when nobody of this process holds or waits for it: no turn, no line', async () => {
    const openTurn = jest.spyOn(store, 'openTurn');
    try {
      const grant = await acquireLease(keeping, call(lockKind, 'one-step', undefined), 1_000);

      expect(grant).toMatchObject({ elapsed: 0, ttl: 1_000 });
      expect(openTurn).not.toHaveBeenCalled();
    } finally {
      openTurn.mockRestore();
    }
  });

  it('goes the waiters’ path, not ahead of them, when a caller of this process is on it', async () => {
    const acquireIfFree = jest.spyOn(store, 'acquireIfFree');
    const line = lineOf(lockKind, 'behind-a-waiter');
    keeping.lines.arrive(line);
    try {
      const grant = await acquireLease(keeping, call(lockKind, 'behind-a-waiter', undefined), 1_000);

      expect(grant).toMatchObject({ ttl: 1_000 });
      expect(acquireIfFree).not.toHaveBeenCalled();
    } finally {
      keeping.lines.depart(line);
      acquireIfFree.mockRestore();
    }
  });

  it('queues the fair waiters of this process in order of arrival, and serves them as the lease frees up', async () => {
    const held = await acquireLease(keeping, call(lockKind, 'queued', undefined, { ttl: 60 }), 1_000);
    const order: string[] = [];
    const waiters = ['first', 'second', 'third'].map((name) =>
      acquireLease(keeping, call(lockKind, 'queued', undefined, { ttl: 60 }), 1_000).then((grant) => {
        order.push(name);
        return grant;
      }),
    );
    await Promise.all(waiters);

    expect('token' in held).toBe(true);
    expect(order).toEqual(['first', 'second', 'third']);
  });

  it('answers how long it waited when the timeout passes, and asks the kind nothing else', async () => {
    await acquireLease(keeping, call(semaphoreKind, 'full', 1, { ttl: 2_000 }), 1_000);
    const refused = await acquireLease(keeping, call(semaphoreKind, 'full', 1, { timeout: 50 }), 1_000);

    expect(refused).toEqual({ waited: expect.any(Number) });
    expect((refused as { waited: number }).waited).toBeGreaterThanOrEqual(45);
  });

  it('gives a lease that arrives after the caller aborted back to the store', async () => {
    const abort = new AbortController();
    await acquireLease(keeping, call(lockKind, 'aborted', undefined, { ttl: 80 }), 1_000);
    const waiting = acquireLease(
      keeping,
      call(lockKind, 'aborted', undefined, { signal: abort.signal, timeout: 2_000 }),
      1_000,
    );
    abort.abort(new Error('gave up'));

    await expect(waiting).rejects.toThrow('gave up');
    await delay(100);
    expect(await store.count(lockKind, 'aborted')).toBe(0);
  });
});
