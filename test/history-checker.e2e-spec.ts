import { describe, expect, it } from '@jest/globals';
import {
  type AppliedWrite,
  checkFencedWork,
  checkFenceOrder,
  checkHistory,
  checkMutualExclusion,
  checkPermitLimit,
  type FencedWorkRecord,
  type HoldRecord,
  validInterval,
} from './support/history.js';

/**
 * The history checker of the fault suite, on hand-made histories: each check passes a correct history
 * and reports the one thing wrong with a history made to break it, so that "0 violations" means something.
 */
let tokens = 0;
function hold(fields: Partial<HoldRecord> & Pick<HoldRecord, 'fence' | 'acquiredAt' | 'releasedAt'>): HoldRecord {
  return {
    pid: 100,
    worker: 0,
    key: 'k',
    kind: 'lock',
    token: `t${++tokens}`,
    validUntil: fields.acquiredAt + 1_000,
    ...fields,
  };
}

function permit(fields: Partial<HoldRecord> & Pick<HoldRecord, 'fence' | 'acquiredAt' | 'releasedAt'>): HoldRecord {
  return hold({ kind: 'semaphore', key: 's', limit: 2, ...fields });
}

/** Three holders of `k` one after the other, one of them losing its lease and the next taking it after the deadline. */
const sequentialLocks: HoldRecord[] = [
  hold({ pid: 1, fence: 10, acquiredAt: 1_000, releasedAt: 1_050 }),
  // Handed over in the same millisecond: touching, not overlapping.
  hold({ pid: 2, fence: 11, acquiredAt: 1_050, releasedAt: 1_100 }),
  // Frozen past its deadline (1_400.6), released late at 3_000: its lease ended at the deadline.
  hold({
    pid: 3,
    fence: 12,
    acquiredAt: 1_100,
    validUntil: 1_400.6,
    releasedAt: 3_000,
    lost: { at: 2_990, reason: 'expired' },
  }),
  hold({ pid: 1, fence: 13, acquiredAt: 1_400, releasedAt: 1_500 }),
  // Another key is independent, even with lower fences and overlapping times.
  hold({ key: 'other', pid: 4, fence: 5, acquiredAt: 1_000, releasedAt: 2_000 }),
];

describe('history checker', () => {
  describe('valid intervals', () => {
    it('end at the earliest of release, deadline and loss, floored to whole milliseconds', () => {
      expect(validInterval(hold({ fence: 1, acquiredAt: 0, releasedAt: 50, validUntil: 900 }))).toMatchObject({
        end: 50,
      });
      expect(validInterval(hold({ fence: 1, acquiredAt: 0, releasedAt: 950, validUntil: 900.9 }))).toMatchObject({
        end: 900,
      });
      const lost = hold({
        fence: 1,
        acquiredAt: 0,
        releasedAt: 950,
        validUntil: 900,
        lost: { at: 600, reason: 'taken' },
      });
      expect(validInterval(lost)).toMatchObject({ start: 0, end: 600 });
    });

    it('leave out a lease that was granted after its deadline', () => {
      expect(validInterval(hold({ fence: 1, acquiredAt: 500, releasedAt: 600, validUntil: 500 }))).toBeUndefined();
    });
  });

  describe('(a) mutual exclusion of lock leases', () => {
    it('passes leases that follow each other, touch, or end at their deadline', () => {
      expect(checkMutualExclusion(sequentialLocks)).toEqual([]);
    });

    it('reports two valid leases of one key that overlap, with both holders', () => {
      const first = hold({ pid: 1, fence: 1, acquiredAt: 1_000, releasedAt: 1_100 });
      const second = hold({ pid: 2, fence: 2, acquiredAt: 1_099, releasedAt: 1_200 });

      const violations = checkMutualExclusion([second, first]);

      expect(violations).toHaveLength(1);
      expect(violations[0]).toMatchObject({ check: 'overlap', key: 'k', holds: [first, second] });
      expect(violations[0].message).toMatch(/overlaps.*\(1 ms\)/);
    });

    it('reports a holder that kept acting after the deadline it was told, when another took the key', () => {
      const stale = hold({ pid: 1, fence: 1, acquiredAt: 1_000, validUntil: 1_300, releasedAt: 1_500 });
      const next = hold({ pid: 2, fence: 2, acquiredAt: 1_299, releasedAt: 1_400 });

      expect(checkMutualExclusion([stale, next])).toHaveLength(1);
    });

    it('reports every pair when three leases overlap, and ignores semaphores', () => {
      const overlapping = [0, 1, 2].map((i) => hold({ pid: i, fence: i, acquiredAt: 1_000 + i, releasedAt: 2_000 }));
      const permits = [0, 1, 2].map((i) =>
        permit({ pid: i, fence: i, acquiredAt: 1_000, releasedAt: 2_000, limit: 3 }),
      );

      expect(checkMutualExclusion([...overlapping, ...permits])).toHaveLength(3);
    });
  });

  describe('(b) permit limit of semaphores', () => {
    it('passes at most `limit` valid permits at every instant, handed over in the same millisecond', () => {
      const permits = [
        permit({ fence: 1, acquiredAt: 1_000, releasedAt: 1_100 }),
        permit({ fence: 2, acquiredAt: 1_000, releasedAt: 1_050 }),
        permit({ fence: 3, acquiredAt: 1_050, releasedAt: 1_200 }),
        permit({
          fence: 4,
          acquiredAt: 1_100,
          releasedAt: 1_300,
          validUntil: 1_150,
          lost: { at: 1_290, reason: 'expired' },
        }),
        permit({ fence: 5, acquiredAt: 1_150, releasedAt: 1_300 }),
      ];

      expect(checkPermitLimit(permits)).toEqual([]);
    });

    it('reports an instant with more than `limit` valid permits once, with the holders inside', () => {
      const permits = [
        permit({ fence: 1, acquiredAt: 1_000, releasedAt: 1_100 }),
        permit({ fence: 2, acquiredAt: 1_010, releasedAt: 1_100 }),
        permit({ fence: 3, acquiredAt: 1_020, releasedAt: 1_030 }),
        permit({ fence: 4, acquiredAt: 1_025, releasedAt: 1_040 }),
        permit({ fence: 5, acquiredAt: 1_200, releasedAt: 1_300 }),
      ];

      const violations = checkPermitLimit(permits);

      expect(violations).toHaveLength(1);
      expect(violations[0]).toMatchObject({ check: 'permit-limit', key: 's' });
      expect(violations[0].message).toMatch(/3 valid leases at 1020, limit 2/);
      expect(violations[0].holds?.map((held) => held.fence)).toEqual([1, 2, 3]);
    });

    it('rejects a semaphore record without a limit rather than guess one', () => {
      expect(() => checkPermitLimit([permit({ fence: 1, acquiredAt: 0, releasedAt: 10, limit: undefined })])).toThrow(
        /no valid limit/,
      );
    });
  });

  describe('(c) fence order', () => {
    it('passes fences that grow with acquisition order, and ignores the lease order of permits', () => {
      const permits = [
        permit({ fence: 7, requestedAt: 990, acquiredAt: 1_000, releasedAt: 1_100 }),
        // Granted before fence 7 but its reply came late: requested before 7 was granted, so not judged.
        permit({ fence: 6, requestedAt: 995, acquiredAt: 1_150, releasedAt: 1_200 }),
        permit({ fence: 8, requestedAt: 1_001, acquiredAt: 1_100, releasedAt: 1_200 }),
      ];

      expect(checkFenceOrder([...sequentialLocks, ...permits])).toEqual([]);
    });

    it('reports a later lease with a lower fence, naming both', () => {
      const earlier = hold({ pid: 1, fence: 20, acquiredAt: 1_000, releasedAt: 1_100 });
      const later = hold({ pid: 2, fence: 19, acquiredAt: 1_100, releasedAt: 1_200 });

      const violations = checkFenceOrder([later, earlier]);

      expect(violations).toHaveLength(1);
      expect(violations[0]).toMatchObject({ check: 'fence-order', holds: [earlier, later] });
      expect(violations[0].message).toMatch(
        /fence 19 of pid 2\/0 is not above fence 20 of pid 1\/0, whose lease ended/,
      );
    });

    it('reports a fence that did not grow (equal), and a fence given to two acquisitions', () => {
      const first = hold({ fence: 30, acquiredAt: 1_000, releasedAt: 1_100 });
      const second = hold({ fence: 30, acquiredAt: 1_200, releasedAt: 1_300 });

      const messages = checkFenceOrder([first, second]).map(({ message }) => message);

      expect(messages).toEqual([
        expect.stringMatching(/fence 30 given twice/),
        expect.stringMatching(/not above fence 30/),
      ]);
    });

    it('reports a lower fence after a lease that ended by expiry, judged against the highest ended one', () => {
      const holds = [
        hold({ fence: 40, acquiredAt: 1_000, releasedAt: 1_100 }),
        hold({ fence: 42, acquiredAt: 1_100, validUntil: 1_200, releasedAt: 5_000 }),
        hold({ fence: 41, acquiredAt: 1_250, releasedAt: 1_300 }),
      ];

      const violations = checkFenceOrder(holds);

      expect(violations).toHaveLength(1);
      expect(violations[0].message).toMatch(/fence 41 of .* is not above fence 42/);
    });

    it('reports a permit requested after a higher-fenced permit was granted, once even if both orders see it', () => {
      const permits = [
        permit({ fence: 50, requestedAt: 1_000, acquiredAt: 1_001, releasedAt: 1_500 }),
        permit({ fence: 49, requestedAt: 1_002, acquiredAt: 1_003, releasedAt: 1_010 }),
      ];
      const locks = [
        hold({ fence: 60, requestedAt: 1_000, acquiredAt: 1_001, releasedAt: 1_002 }),
        hold({ fence: 59, requestedAt: 1_002, acquiredAt: 1_003, releasedAt: 1_010 }),
      ];

      const messages = checkFenceOrder([...permits, ...locks]).map(({ message }) => message);

      expect(messages).toEqual([
        expect.stringMatching(
          /^semaphore "s": fence 49 .* not above fence 50 .*granted at 1001, before this was requested at 1002/,
        ),
        expect.stringMatching(
          /^lock "k": fence 59 .* not above fence 60 .*granted at 1001, before this was requested at 1002/,
        ),
      ]);
    });

    it('judges a permit whose fence was drawn late from its draw, and a lock from its grant however late its draw', () => {
      // Permits held side by side: the first draws its fence late; the second, asked for meanwhile, draws first.
      const drawnLate = permit({ fence: 81, requestedAt: 990, acquiredAt: 1_000, fencedAt: 1_050, releasedAt: 1_100 });
      const drawnFirst = permit({
        fence: 80,
        requestedAt: 1_010,
        acquiredAt: 1_011,
        fencedAt: 1_012,
        releasedAt: 1_100,
      });
      expect(checkFenceOrder([drawnLate, drawnFirst])).toEqual([]);
      // Asked for after the late draw: its fence must be above it.
      const after = permit({ fence: 79, requestedAt: 1_051, acquiredAt: 1_060, fencedAt: 1_061, releasedAt: 1_200 });
      expect(checkFenceOrder([drawnLate, drawnFirst, after]).map(({ message }) => message)).toEqual([
        expect.stringMatching(
          /^semaphore "s": fence 79 .* not above fence 81 .*drawn at 1050, before this was requested at 1051/,
        ),
      ]);

      // A lock's fence, however late in its hold, is drawn while it holds the lock: a holder that asked
      // for the lock after that grant must be above it.
      const lockedLate = hold({ fence: 91, requestedAt: 990, acquiredAt: 1_000, fencedAt: 1_090, releasedAt: 1_100 });
      const next = hold({ fence: 90, requestedAt: 1_010, acquiredAt: 1_100, fencedAt: 1_101, releasedAt: 1_200 });
      expect(checkFenceOrder([lockedLate, next], { leaseOrder: false }).map(({ message }) => message)).toEqual([
        expect.stringMatching(
          /^lock "k": fence 90 .* not above fence 91 .*granted at 1000, before this was requested at 1010/,
        ),
      ]);
    });

    it('leaves a hold without a fence out of the fence order, not out of the interval checks', () => {
      const unfenced = hold({ pid: 9, fence: undefined, requestedAt: 1_055, acquiredAt: 1_060, releasedAt: 1_070 });

      expect(checkFenceOrder([...sequentialLocks, unfenced])).toEqual([]);
      const overlaps = checkMutualExclusion([...sequentialLocks, unfenced]);
      expect(overlaps.map(({ message }) => message)).toEqual([expect.stringMatching(/pid 9\/0 without a fence/)]);
      expect(() => checkFenceOrder([{ ...unfenced, requestedAt: 1_061 }])).toThrow(/granted before it was requested/);
    });

    it('judges lock leases by request order only when lease order is off (histories with FLUSHALL)', () => {
      // The two leases overlapped at the server (FLUSHALL dropped the first): the second's reply was late.
      const flushed = hold({ fence: 70, requestedAt: 999, acquiredAt: 1_000, releasedAt: 1_010 });
      const lateReply = hold({ fence: 69, requestedAt: 998, acquiredAt: 1_020, releasedAt: 1_030 });

      expect(checkFenceOrder([flushed, lateReply])).toHaveLength(1);
      expect(checkFenceOrder([flushed, lateReply], { leaseOrder: false })).toEqual([]);
      expect(checkFenceOrder([flushed, { ...lateReply, requestedAt: 1_001 }], { leaseOrder: false })).toHaveLength(1);
    });
  });

  describe('(d) fenced work applied exactly once', () => {
    const log: AppliedWrite[] = [
      { unit: 'u1', key: 'k', fence: 10 },
      { unit: 'u2', key: 'k', fence: 11 },
      { unit: 'u3', key: 'k', fence: 11 },
      { unit: 'u4', key: 'other', fence: 3 },
    ];
    const records: FencedWorkRecord[] = [
      { unit: 'u1', fence: 10, applied: true, key: 'k' },
      // A stale holder's write rejected, then applied by the next holder.
      { unit: 'u2', fence: 9, applied: false, key: 'k' },
      { unit: 'u2', fence: 11, applied: true, key: 'k' },
      { unit: 'u3', fence: 11, applied: true, key: 'k' },
      // u4's writer died before it could report: the resource's log is the truth.
    ];

    it('passes every unit applied once, with rejected retries and pending units', () => {
      expect(checkFencedWork(records, { units: ['u1', 'u2', 'u3', 'u4'], pending: ['u5'], resourceLog: log })).toEqual(
        [],
      );
      expect(checkFencedWork(records, { units: ['u1', 'u2', 'u3'] })).toEqual([]);
    });

    it('reports a unit never applied, one applied twice, and a queued unit that was applied', () => {
      const messages = checkFencedWork(records, {
        units: ['u1', 'u2', 'u3', 'u4', 'u6'],
        pending: ['u3'],
        resourceLog: [...log, { unit: 'u1', key: 'k', fence: 12 }],
      }).map(({ message }) => message);

      expect(messages).toEqual([
        'unit u1 was applied 2 times (fences 10, 12)',
        'unit u6 was never applied',
        'unit u3 is still queued but was applied',
      ]);
    });

    it('reports a write a worker saw accepted that the resource does not have', () => {
      const violations = checkFencedWork([...records, { unit: 'u4', fence: 2, applied: true, key: 'other' }], {
        units: ['u1', 'u2', 'u3', 'u4'],
        resourceLog: log,
      });

      expect(violations).toHaveLength(1);
      expect(violations[0].message).toMatch(/u4 was reported applied with fence 2, but the resource has no such write/);
    });

    it('reports a stale write the resource accepted after a newer holder wrote', () => {
      const staleAccepted = [...log, { unit: 'u5', key: 'k', fence: 9 }];

      const violations = checkFencedWork(records, {
        units: ['u1', 'u2', 'u3', 'u4', 'u5'],
        resourceLog: staleAccepted,
      });

      expect(violations).toHaveLength(1);
      expect(violations[0]).toMatchObject({ check: 'fenced-work', key: 'k', units: ['u2', 'u5'] });
    });

    it('counts applications from the records when there is no resource log', () => {
      const twice = [...records, { unit: 'u1', fence: 11, applied: true }];

      expect(checkFencedWork(twice, { units: ['u1', 'u2', 'u3'] }).map(({ message }) => message)).toEqual([
        'unit u1 was applied 2 times (fences 10, 11)',
      ]);
    });
  });

  it('runs every check at once', () => {
    const broken = [...sequentialLocks, hold({ pid: 9, fence: 11, acquiredAt: 1_060, releasedAt: 1_070 })];

    const report = checkHistory(broken, [], { units: ['u1'] });

    expect(report.overlaps).toHaveLength(1);
    expect(report.fenceOrder.map(({ message }) => message)).toEqual([expect.stringMatching(/fence 11 given twice/)]);
    expect(report.permitLimit).toEqual([]);
    expect(report.fencedWork.map(({ message }) => message)).toEqual(['unit u1 was never applied']);
  });
});
