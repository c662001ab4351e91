import { describe, expect, it } from '@jest/globals';
import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { lockKind } from '../kinds/lock.kind.js';
import { LockBackendError, type LockLostError } from '../lock.errors.js';
import { DEFAULT_LEASE, type LockMode } from '../options/call-options.js';
import { MemoryStore } from '../store/memory/memory.store.js';
import type { LeaseExtension } from '../store/store.js';
import { LockTelemetry } from '../telemetry/telemetry.js';
import { HeldLease, type KeepPolicy } from './held-lease.js';
import { LeaseEngine } from './lease-engine.js';
import { Watchdog } from './watchdog.js';

/** The memory store, with a record of the renewal round trips and a way to hold their answers back or fail them. */
class WatchedStore extends MemoryStore {
  readonly roundTrips: LeaseExtension[][] = [];
  /** When set, renewals wait for it before they are applied. */
  gate?: Promise<void>;
  /** LeaseExtension round trips to fail (as an unreachable Redis would) before the next succeeds. */
  failures = 0;

  /** The capability the watchdog uses when a store has it: every renewal of a tick in one round trip. */
  async extendAll(renewals: readonly LeaseExtension[]): Promise<(boolean | LockBackendError)[]> {
    this.roundTrips.push([...renewals]);
    await this.gate;
    if (this.failures > 0) {
      this.failures--;
      throw new LockBackendError('Redis is unreachable: could not renew');
    }
    return Promise.all(renewals.map(({ kind, id, token, ttl }) => this.extend(kind, id, token, ttl)));
  }
}

async function engineOn(store: WatchedStore, lost: LockLostError[] = []): Promise<LeaseEngine> {
  const watchdog = new Watchdog(store, (error) => lost.push(error), { warn: () => undefined });
  return new LeaseEngine(store, watchdog, await LockTelemetry.create(), 1_000);
}

const RENEWED: KeepPolicy = { autoExtend: true, reportLoss: true, scoped: true };
const BARE: KeepPolicy = { autoExtend: false, reportLoss: false, scoped: false };

function take(engine: LeaseEngine, key: string, ttl: number, keep: KeepPolicy): Promise<HeldLease<LockMode>> {
  const policy = { ...DEFAULT_LEASE, ttl, fair: true };
  return engine.acquireOrThrow({ kind: lockKind, id: key, request: 'write', policy, keep, view: HeldLease<LockMode> });
}

describe('the watchdog’s decisions (memory store)', () => {
  it('renews a lease every third of its ttl, so that it outlives its ttl', async () => {
    const store = new WatchedStore();
    const engine = await engineOn(store);
    const lease = await take(engine, 'extended', 600, RENEWED);

    await delay(900);

    expect(lease.validity).toBeGreaterThan(0);
    expect(store.roundTrips.length).toBeGreaterThanOrEqual(3);
    await lease.release();
    engine.close();
  });

  it('renews the leases that fall due together in one round trip', async () => {
    const store = new WatchedStore();
    const engine = await engineOn(store);
    const leases = await Promise.all(['a', 'b', 'c'].map((key) => take(engine, key, 300, RENEWED)));

    await delay(150);

    expect(store.roundTrips[0].map((renewal) => renewal.id).sort()).toEqual(['a', 'b', 'c']);
    await Promise.all(leases.map((lease) => lease.release()));
    engine.close();
  });

  it('declares a lease nobody renews lost at its deadline (reason expired), and never renews it', async () => {
    const store = new WatchedStore();
    const engine = await engineOn(store);
    const lease = await take(engine, 'bare', 100, BARE);

    await once(lease.signal, 'abort');

    expect(lease.signal.reason).toMatchObject({ code: 'LOCK_LOST', reason: 'expired' });
    expect(lease.validity).toBe(0);
    expect(store.roundTrips).toEqual([]);
    engine.close();
  });

  it('declares a lease whose renewal finds it gone lost (reason taken), and reports it once', async () => {
    const store = new WatchedStore();
    const lost: LockLostError[] = [];
    const engine = await engineOn(store, lost);
    const lease = await take(engine, 'taken', 150, RENEWED);

    await store.forceRelease(lockKind, 'taken');
    await once(lease.signal, 'abort');

    expect(lease.signal.reason).toMatchObject({ reason: 'taken' });
    expect(lost).toHaveLength(1);
    expect(await store.count(lockKind, 'taken')).toBe(0);
    engine.close();
  });

  it('tries a renewal that failed again soon, and keeps the lease while it still runs', async () => {
    const store = new WatchedStore();
    const engine = await engineOn(store);
    const lease = await take(engine, 'retried', 1_000, RENEWED);
    store.failures = 1;

    await delay(600);

    expect(store.roundTrips.length).toBeGreaterThanOrEqual(2);
    expect(lease.validity).toBeGreaterThan(0);
    expect(lease.signal.aborted).toBe(false);
    await lease.release();
    engine.close();
  });

  it('extends a lease handed over for a short lease to its ttl once, even without autoExtend', async () => {
    const store = new WatchedStore();
    const engine = await engineOn(store);
    // As a release hands it over: the store holds it for a short handover lease, the holder asked for 1 s.
    await store.acquire(lockKind, 'handed', 'write', 'waiter', 90, { fair: true, liveness: 0, inLine: false });
    const grant = {
      token: 'waiter',
      ownToken: false,
      fence: 7,
      elapsed: 0,
      ttl: 1_000,
      serverTtl: 90,
      sentAt: performance.now(),
    };
    const lease = new HeldLease(lockKind, 'handed', 'write', grant, engine, BARE, { end: () => undefined });

    await delay(200);

    expect(store.roundTrips.flat().map((renewal) => renewal.ttl)).toEqual([1_000]);
    expect(lease.validity).toBeGreaterThan(500);
    await lease.release();
    engine.close();
  });

  it('answers an expire() only after a renewal on its way is answered, and counts a shorter ttl from when it is sent', async () => {
    const store = new WatchedStore();
    const engine = await engineOn(store);
    const lease = await take(engine, 'expire-during-renewal', 600, RENEWED);
    let open!: () => void;
    store.gate = new Promise((resolve) => (open = resolve));
    // The renewal (due at 200 ms) is now on its way, held back.
    await delay(240);
    expect(store.roundTrips).toHaveLength(1);

    const expired = lease.expire(150);
    await delay(20);
    const beforeAnswer = lease.validity;
    store.gate = undefined;
    open();
    expect(await expired).toBe(true);

    // Sent after the renewal's answer: the shorter lease counts from then, and the renewals follow it.
    expect(beforeAnswer).toBeGreaterThan(150);
    expect(lease.validity).toBeLessThanOrEqual(150);
    expect(lease.ttl).toBe(150);
    while (store.roundTrips.length < 2) await delay(10);
    expect(store.roundTrips[1].map((renewal) => renewal.ttl)).toEqual([150]);
    await lease.release();
    engine.close();
  });
});
