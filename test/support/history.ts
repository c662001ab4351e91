/**
 * A checker of lease histories recorded by worker processes (issue 7, section 3). Pure: no Redis, no clock.
 *
 * All times are `Date.now()` milliseconds of one machine, so that records of different processes compare.
 * A lease is *valid* over [acquiredAt, end], end = min(releasedAt, validUntil, lost.at): the time during which
 * its holder was entitled to act. A lease whose end is not after its start was never valid and is ignored by
 * the interval checks (it was granted after its deadline had already passed, e.g. a reply delayed past the ttl).
 */

/** One acquisition, from the grant to the release, as the holder saw it. */
export interface HoldRecord {
  pid: number;
  /** Which loop of the process held it. */
  worker: number;
  /** Lock key, or semaphore name. */
  key: string;
  kind: 'lock' | 'semaphore';
  /** The semaphore's limit (semaphores only). */
  limit?: number;
  token: string;
  /**
   * The lease's fence, drawn by its holder (`fence()`) at some moment of the hold; absent when no fence
   * was drawn (the draw found the lease lost, or the store away). A hold without one counts for the
   * interval checks, not for the fence order.
   */
  fence?: number;
  /**
   * `Date.now()` right after `fence()` resolved: the fence was drawn after `requestedAt` and before this
   * (a lease handed over by a release came with its fence, drawn before it was granted). Absent: drawn
   * with the grant, before `acquiredAt`.
   */
  fencedAt?: number;
  /** `Date.now()` right before the call that acquired it (lock, withLock, acquire…): it was granted after that. */
  requestedAt?: number;
  /** `Date.now()` right after the grant. */
  acquiredAt: number;
  /**
   * Latest deadline the holder was guaranteed: the largest `Date.now() + lease.validity` it sampled while
   * `validity > 0` (never sampled after the lease is lost, where validity reads 0 and `now + 0` would be
   * later than the real deadline).
   */
  validUntil: number;
  /** `Date.now()` right before the release is sent. */
  releasedAt: number;
  /** When the lease's `signal` aborted, and the `LockLostError`'s reason and code. */
  lost?: { at: number; reason: string; code?: string };
}

/** One attempt to write a unit of work to the fenced resource. */
export interface FencedWorkRecord {
  unit: string;
  fence: number;
  /** `true`: the resource accepted the write; `false`: it rejected it as stale. */
  applied: boolean;
  key?: string;
  pid?: number;
}

/** One entry of the resource's own log of applied writes, in the order the resource applied them. */
export interface AppliedWrite {
  unit: string;
  key: string;
  fence: number;
}

export type ViolationCheck = 'overlap' | 'permit-limit' | 'fence-order' | 'fenced-work';

export interface Violation {
  check: ViolationCheck;
  key: string;
  message: string;
  /** The records involved. */
  holds?: HoldRecord[];
  units?: string[];
}

export interface ValidInterval {
  hold: HoldRecord;
  start: number;
  end: number;
}

/**
 * The interval over which `hold` was valid, or `undefined` when it never was. The end is floored to whole
 * milliseconds like the `Date.now()` stamps of the other holders, so that a deadline of 1000.7 ms and a
 * grant stamped 1000 ms (that happened at 1000.9 ms) are not reported as overlapping.
 */
export function validInterval(hold: HoldRecord): ValidInterval | undefined {
  const end = Math.floor(Math.min(hold.releasedAt, hold.validUntil, hold.lost?.at ?? Infinity));
  return end > hold.acquiredAt ? { hold, start: hold.acquiredAt, end } : undefined;
}

/** (a) No two valid leases of one lock key overlap. Touching intervals (one ends when the next starts) do not. */
export function checkMutualExclusion(holds: readonly HoldRecord[]): Violation[] {
  const violations: Violation[] = [];
  for (const [key, intervals] of validIntervalsByKey(holds, 'lock')) {
    // Sweep by start; `open` keeps every earlier interval that has not ended yet.
    let open: ValidInterval[] = [];
    for (const interval of intervals) {
      open = open.filter((earlier) => earlier.end > interval.start);
      for (const earlier of open) {
        violations.push({
          check: 'overlap',
          key,
          message:
            `lock "${key}": lease ${describeHold(earlier.hold)} valid until ${earlier.end} overlaps ` +
            `lease ${describeHold(interval.hold)} valid from ${interval.start} ` +
            `(${Math.min(earlier.end, interval.end) - interval.start} ms)`,
          holds: [earlier.hold, interval.hold],
        });
      }
      open.push(interval);
    }
  }
  return violations;
}

/** (b) At every instant a semaphore has at most `limit` valid leases. One violation per excursion above the limit. */
export function checkPermitLimit(holds: readonly HoldRecord[]): Violation[] {
  const violations: Violation[] = [];
  for (const [name, intervals] of validIntervalsByKey(holds, 'semaphore')) {
    const limit = intervals.reduce((lowest, { hold }) => Math.min(lowest, limitOf(hold)), Infinity);
    // At equal times an end sorts before a start: a permit handed over at one instant is not two holders.
    const events = intervals
      .flatMap((interval) => [
        { at: interval.start, delta: +1, interval },
        { at: interval.end, delta: -1, interval },
      ])
      .sort((a, b) => a.at - b.at || a.delta - b.delta);
    const inside = new Set<ValidInterval>();
    let overLimit = false;
    for (const { at, delta, interval } of events) {
      if (delta < 0) inside.delete(interval);
      else inside.add(interval);
      if (inside.size > limit && !overLimit) {
        violations.push({
          check: 'permit-limit',
          key: name,
          message: `semaphore "${name}": ${inside.size} valid leases at ${at}, limit ${limit}`,
          holds: [...inside].map(({ hold }) => hold),
        });
      }
      overLimit = inside.size > limit;
    }
  }
  return violations;
}

export interface FenceOrderOptions {
  /**
   * Also order lock leases by their valid intervals: a lease that ended before another began was granted
   * first. That holds only while mutual exclusion does, so a history with FLUSHALL in it turns it off.
   * Default `true`.
   */
  leaseOrder?: boolean;
}

/**
 * (c) Fences of one key increase strictly in acquisition order. A fence is drawn when its holder asks, at
 * any moment of its hold (or came with a lease handed over by a release); holds without one are not
 * judged here. The order of two acquisitions is judged only where it is known for sure:
 * - request order: a hold whose fence was known before another was even requested (`requestedAt`) has
 *   the lower fence, whatever the faults. Known from the grant (`acquiredAt`) for a lock: its fence is
 *   drawn while it holds the lock, and every later holder's only once the lock is theirs. Known once
 *   drawn (`fencedAt`, else `acquiredAt`) for a permit: permits are held side by side, and their fences
 *   increase in the order they are drawn;
 * - lease order (locks, `leaseOrder`): a lease whose valid interval ended before another's began was
 *   granted first, since the key cannot be granted twice at once. Never for semaphores: several permits are
 *   granted at once, and a reply delayed past another's whole lease would look like a later grant.
 * Besides, two acquisitions of one key never share a fence.
 */
export function checkFenceOrder(
  holds: readonly HoldRecord[],
  { leaseOrder = true }: FenceOrderOptions = {},
): Violation[] {
  const violations: Violation[] = [];
  for (const hold of holds) {
    if (hold.requestedAt !== undefined && hold.acquiredAt < hold.requestedAt) {
      throw new Error(`${describeHold(hold)} was granted before it was requested`);
    }
  }
  // One violation per late hold, even when both orders find it.
  const reported = new Set<HoldRecord>();
  const report = (earlier: FencedHold, later: FencedHold, why: string) => {
    if (reported.has(later)) return;
    reported.add(later);
    violations.push({
      check: 'fence-order',
      key: later.key,
      message:
        `${later.kind} "${later.key}": fence ${later.fence} of ${holderOf(later)} is not above fence ` +
        `${earlier.fence} of ${holderOf(earlier)}, ${why}`,
      holds: [earlier, later],
    });
  };

  const fenced = holds.filter((hold): hold is FencedHold => hold.fence !== undefined);
  for (const keyHolds of groupBy(fenced, (hold) => `${hold.kind}:${hold.key}`).values()) {
    const byFence = new Map<number, FencedHold>();
    for (const hold of keyHolds) {
      const same = byFence.get(hold.fence);
      if (same && same.token !== hold.token) {
        violations.push({
          check: 'fence-order',
          key: hold.key,
          message: `${hold.kind} "${hold.key}": fence ${hold.fence} given twice (${describeHold(same)}, ${describeHold(hold)})`,
          holds: [same, hold],
        });
      }
      byFence.set(hold.fence, hold);
    }

    // Request order: walk the requests in time; every fence known before a request must be lower.
    const knownAt = (hold: FencedHold) => (hold.kind === 'lock' ? hold.acquiredAt : (hold.fencedAt ?? hold.acquiredAt));
    const knownSince = (hold: FencedHold) =>
      hold.kind === 'lock' || hold.fencedAt === undefined
        ? `granted at ${hold.acquiredAt}`
        : `drawn at ${hold.fencedAt}`;
    const byKnown = [...keyHolds].sort((a, b) => knownAt(a) - knownAt(b));
    const byRequest = keyHolds
      .filter((hold): hold is FencedHold & { requestedAt: number } => hold.requestedAt !== undefined)
      .sort((a, b) => a.requestedAt - b.requestedAt);
    let highestKnown: FencedHold | undefined;
    let known = 0;
    for (const hold of byRequest) {
      // Strictly before: two stamps of the same millisecond say nothing about which came first.
      for (; known < byKnown.length && knownAt(byKnown[known]) < hold.requestedAt; known++) {
        if (!highestKnown || byKnown[known].fence > highestKnown.fence) highestKnown = byKnown[known];
      }
      if (highestKnown && highestKnown.fence >= hold.fence) {
        report(highestKnown, hold, `${knownSince(highestKnown)}, before this was requested at ${hold.requestedAt}`);
      }
    }

    // Lease order: walk the leases by start; every lease over by then must have a lower fence.
    if (!leaseOrder || keyHolds[0].kind !== 'lock') continue;
    const intervals = keyHolds.map(validInterval).filter((interval) => interval !== undefined) as (ValidInterval & {
      hold: FencedHold;
    })[];
    const byStart = [...intervals].sort((a, b) => a.start - b.start);
    const byEnd = [...intervals].sort((a, b) => a.end - b.end);
    let highestEnded: (ValidInterval & { hold: FencedHold }) | undefined;
    let ended = 0;
    for (const interval of byStart) {
      for (; ended < byEnd.length && byEnd[ended].end <= interval.start; ended++) {
        if (!highestEnded || byEnd[ended].hold.fence > highestEnded.hold.fence) highestEnded = byEnd[ended];
      }
      if (highestEnded && highestEnded.hold.fence >= interval.hold.fence) {
        report(
          highestEnded.hold,
          interval.hold,
          `whose lease ended at ${highestEnded.end}, before this one began at ${interval.start}`,
        );
      }
    }
  }
  return violations;
}

/** A hold whose holder drew a fence. */
type FencedHold = HoldRecord & { fence: number };

export interface FencedWorkExpectation {
  /** Every unit that had to be applied: each must have been applied exactly once. */
  units: Iterable<string>;
  /** Units still waiting in the queue at the end: none may have been applied. */
  pending?: Iterable<string>;
  /** The resource's own log; when given it is the truth about what was applied, the records are checked against it. */
  resourceLog?: readonly AppliedWrite[];
}

/**
 * (d) Every unit of fenced work was applied exactly once. With the resource's log, also: every write a
 * worker saw accepted is in the log with its fence, and per key the log's fences never go down (no write
 * was accepted after a write of a newer holder).
 */
export function checkFencedWork(records: readonly FencedWorkRecord[], expected: FencedWorkExpectation): Violation[] {
  const violations: Violation[] = [];
  const fencedWork = (key: string, message: string, units: string[]) =>
    violations.push({ check: 'fenced-work', key, message, units });

  const { resourceLog } = expected;
  const appliedFences = new Map<string, number[]>();
  const keyOfUnit = new Map<string, string>();
  if (resourceLog) {
    for (const write of resourceLog) {
      appliedFences.set(write.unit, [...(appliedFences.get(write.unit) ?? []), write.fence]);
      keyOfUnit.set(write.unit, write.key);
    }
  } else {
    for (const record of records.filter((record) => record.applied)) {
      appliedFences.set(record.unit, [...(appliedFences.get(record.unit) ?? []), record.fence]);
      keyOfUnit.set(record.unit, record.key ?? '');
    }
  }

  for (const unit of expected.units) {
    const fences = appliedFences.get(unit) ?? [];
    if (fences.length === 0) fencedWork(keyOfUnit.get(unit) ?? '', `unit ${unit} was never applied`, [unit]);
    if (fences.length > 1) {
      fencedWork(
        keyOfUnit.get(unit) ?? '',
        `unit ${unit} was applied ${fences.length} times (fences ${fences.join(', ')})`,
        [unit],
      );
    }
  }
  for (const unit of expected.pending ?? []) {
    if (appliedFences.has(unit))
      fencedWork(keyOfUnit.get(unit) ?? '', `unit ${unit} is still queued but was applied`, [unit]);
  }

  if (resourceLog) {
    for (const record of records.filter((record) => record.applied)) {
      if (!(appliedFences.get(record.unit) ?? []).includes(record.fence)) {
        fencedWork(
          record.key ?? '',
          `unit ${record.unit} was reported applied with fence ${record.fence}, but the resource has no such write`,
          [record.unit],
        );
      }
    }
    const highestByKey = new Map<string, AppliedWrite>();
    for (const write of resourceLog) {
      const highest = highestByKey.get(write.key);
      if (highest && write.fence < highest.fence) {
        fencedWork(
          write.key,
          `key "${write.key}": unit ${write.unit} applied with fence ${write.fence} after unit ${highest.unit} with fence ${highest.fence}`,
          [highest.unit, write.unit],
        );
      }
      if (!highest || write.fence > highest.fence) highestByKey.set(write.key, write);
    }
  }
  return violations;
}

export interface HistoryReport {
  overlaps: Violation[];
  permitLimit: Violation[];
  fenceOrder: Violation[];
  fencedWork: Violation[];
}

/** Every check at once; `fencedWork` only when an expectation is given. */
export function checkHistory(
  holds: readonly HoldRecord[],
  work: readonly FencedWorkRecord[] = [],
  expected?: FencedWorkExpectation,
  fenceOrder: FenceOrderOptions = {},
): HistoryReport {
  return {
    overlaps: checkMutualExclusion(holds),
    permitLimit: checkPermitLimit(holds),
    fenceOrder: checkFenceOrder(holds, fenceOrder),
    fencedWork: expected ? checkFencedWork(work, expected) : [],
  };
}

function validIntervalsByKey(holds: readonly HoldRecord[], kind: HoldRecord['kind']): Map<string, ValidInterval[]> {
  const intervals = holds
    .filter((hold) => hold.kind === kind)
    .map(validInterval)
    .filter((interval) => interval !== undefined)
    .sort((a, b) => a.start - b.start || a.end - b.end);
  return groupBy(intervals, ({ hold }) => hold.key);
}

function limitOf(hold: HoldRecord): number {
  if (hold.limit === undefined || !Number.isInteger(hold.limit) || hold.limit < 1) {
    throw new Error(`semaphore hold ${describeHold(hold)} of "${hold.key}" has no valid limit`);
  }
  return hold.limit;
}

function groupBy<T>(items: readonly T[], keyOf: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const key = keyOf(item);
    const group = groups.get(key);
    if (group) group.push(item);
    else groups.set(key, [item]);
  }
  return groups;
}

function describeHold(hold: HoldRecord): string {
  return `${holderOf(hold)} ${hold.fence === undefined ? 'without a fence' : `fence ${hold.fence}`}`;
}

function holderOf(hold: HoldRecord): string {
  return `pid ${hold.pid}/${hold.worker}`;
}
