import { Inject, Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { errorMessage, LockError } from '../lock.errors.js';
import { LockService } from '../lock.service.js';
import { LeaderService } from '../leader/leader.service.js';

/** The lock the probe reads (never takes): one read of an ordinary key is a round trip like any lock call's. */
const PROBE_KEY = 'health-check';

/**
 * A `@nestjs/terminus` health indicator for the store behind `LockModule`: add it to the providers
 * of the module that imports `TerminusModule` (`LockModule` must be imported in the application).
 */
@Injectable()
export class LockHealthIndicator {
  constructor(
    @Inject(HealthIndicatorService) private readonly health: HealthIndicatorService,
    @Inject(LockService) private readonly locks: LockService,
    @Inject(LeaderService) private readonly leaders: LeaderService,
  ) {}

  /**
   * One read through the store, bounded by the module's `commandTimeout`: `up` with `latency`,
   * the round trip in ms; `down` with the `message` (and `code`) of the error that read met.
   * The memory store is always up.
   */
  async pingCheck<const Key extends string = 'lock'>(key: Key = 'lock' as Key): Promise<HealthIndicatorResult<Key>> {
    const indicator = this.health.check(key);
    const start = performance.now();
    try {
      await this.locks.isLocked(PROBE_KEY);
    } catch (error) {
      const code = error instanceof LockError ? error.code : 'UNKNOWN';
      return indicator.down({ message: errorMessage(error), code });
    }
    return indicator.up({ latency: Math.round((performance.now() - start) * 10) / 10 });
  }

  /**
   * This process's campaign for the leadership `name` (`LeaderService`): `up` with `leading`, and
   * while it leads its `term` and `since` (an ISO date) — a follower is healthy too; `down` when this
   * process does not campaign for `name` (never started, resigned, or shutting down).
   */
  leaderCheck<const Key extends string>(name: string, key: Key = name as Key): HealthIndicatorResult<Key> {
    const indicator = this.health.check(key);
    const leadership = this.leaders.leadership(name);
    if (leadership === undefined) return indicator.down({ message: `this process does not campaign for "${name}"` });
    const { isLeader, term, since } = leadership;
    if (!isLeader || term === undefined || since === undefined) return indicator.up({ leading: false });
    return indicator.up({ leading: true, term, since: new Date(since).toISOString() });
  }
}
