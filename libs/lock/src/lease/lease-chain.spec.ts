import { describe, expect, it } from '@jest/globals';
import { setTimeout as delay } from 'node:timers/promises';
import { type ChainLease, enterHold, type HoldEntry, leaseOfChain, runHolding } from './lease-chain.js';

/** Runs `fn` holding the lease on `entry`, joined or new (what withLock does), and leaves afterwards. */
function holdDuring<T>(entry: HoldEntry, acquire: () => Promise<ChainLease>, fn: () => T | Promise<T>): Promise<T> {
  return runHolding(enterHold(entry, acquire), fn);
}

/** A lease as the chain sees one: it records its releases and renewals from now on. */
class RecordedLease implements ChainLease {
  held = true;
  releases = 0;
  keptAlive = 0;

  async release(): Promise<boolean> {
    this.releases++;
    this.held = false;
    return true;
  }

  async releaseQuietly(): Promise<void> {
    await this.release();
  }

  keepExtending(): void {
    this.keptAlive++;
  }
}

/** An acquisition that hands out a new recorded lease each time, and counts how many it made. */
function acquisitions() {
  const leases: RecordedLease[] = [];
  return {
    leases,
    acquire: async () => {
      const lease = new RecordedLease();
      leases.push(lease);
      return lease;
    },
  };
}

const scope = {};
const entry = { kind: 'lock', id: 'order:42', scope };

describe('lease-chain: re-entrancy by holder count', () => {
  it('lets a nested hold of the same lease in the same call chain join it: one acquisition, one release', async () => {
    const { leases, acquire } = acquisitions();

    await holdDuring(entry, acquire, () => holdDuring(entry, acquire, async () => undefined));

    expect(leases).toHaveLength(1);
    expect(leases[0].releases).toBe(1);
  });

  it('gives the lease back when the last holder leaves: a nested holder that outlives the outer one keeps it, renewed', async () => {
    const { leases, acquire } = acquisitions();
    let nested!: Promise<void>;

    await holdDuring(entry, acquire, async () => {
      // Started and not awaited: it outlives the outer holder.
      nested = holdDuring(entry, acquire, () => delay(30));
    });
    expect(leases[0].releases).toBe(0);
    expect(leases[0].keptAlive).toBe(1);

    await nested;
    expect(leases[0].releases).toBe(1);
  });

  it('does not join a lease that was lost: the nested call takes a new one', async () => {
    const { leases, acquire } = acquisitions();

    await holdDuring(entry, acquire, async () => {
      leases[0].held = false;
      await holdDuring(entry, acquire, async () => undefined);
    });

    expect(leases).toHaveLength(2);
  });

  it('keeps other call chains, other keys, other kinds and other scopes (applications) out of the lease', async () => {
    const { leases, acquire } = acquisitions();
    let endOuter!: () => void;
    const outer = holdDuring(entry, acquire, async () => {
      await holdDuring({ ...entry, id: 'order:43' }, acquire, async () => undefined);
      await holdDuring({ ...entry, scope: {} }, acquire, async () => undefined);
      await holdDuring({ ...entry, kind: 'semaphore' }, acquire, async () => undefined);
      await new Promise<void>((resolve) => (endOuter = resolve));
    });
    // Started here, outside the outer hold: another call chain (timers and callbacks started inside a
    // hold would inherit its chain).
    await delay(5);
    await holdDuring(entry, acquire, async () => undefined);
    endOuter();
    await outer;

    expect(leases).toHaveLength(5);
  });

  it('joins synchronously, so that an outer holder cannot give the lease back between a nested start and its join', async () => {
    const { leases, acquire } = acquisitions();
    let nestedTicket!: Promise<unknown>;

    await holdDuring(entry, acquire, () => {
      nestedTicket = enterHold(entry, acquire);
    });
    const ticket = (await nestedTicket) as { leave(): Promise<void> };
    expect(leases[0].releases).toBe(0);
    await ticket.leave();
    expect(leases[0].releases).toBe(1);
  });

  it('finds the innermost lease of a kind the chain holds, or the one of a given key', async () => {
    const { acquire } = acquisitions();
    const seen: (ChainLease | undefined)[] = [];

    await holdDuring(entry, acquire, async () => {
      await holdDuring({ ...entry, id: 'order:43' }, acquire, async () => {
        seen.push(leaseOfChain('lock'), leaseOfChain('lock', 'order:42'), leaseOfChain('semaphore'));
      });
    });

    expect(seen[0]).not.toBe(seen[1]);
    expect(seen[0]).toBeInstanceOf(RecordedLease);
    expect(seen[1]).toBeInstanceOf(RecordedLease);
    expect(seen[2]).toBeUndefined();
    expect(leaseOfChain('lock')).toBeUndefined();
  });
});
