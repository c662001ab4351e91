import type { CampaignOptions } from '../leader/campaign-options.js';
import { resolveCampaignOptions } from '../leader/campaign-options.js';
import { declareLeaderOnly, LeaderService } from '../leader/leader.service.js';
import { InvalidArgumentError } from '../lock.errors.js';
import { validateKey } from '../options/call-options.js';
import type { Skip } from '../telemetry/telemetry.js';
import { classNameOf, type GuardDecorator, type GuardTicket, guardMethod } from './guarded-method.js';

/** A `@LeaderOnly` campaign's settings: those of `LeaderService.campaign` without its callbacks. */
export type LeaderOnlyOptions = Pick<CampaignOptions, 'ttl' | 'timeout' | 'retryDelay'>;

/** Why a `@LeaderOnly` call did not run: turned into a skip by the guard, never seen by a caller. */
class NotLeading extends Error {
  constructor(readonly leadershipName: string) {
    super(`this process does not lead "${leadershipName}"`);
  }
}

/**
 * Runs the method only in the process that leads `name` (`LeaderService`); elsewhere the call returns
 * `undefined` without running (a declared Observable completes empty), logged at verbose level and
 * counted (`nest_lock.skipped`, reason `not-leader`). The application campaigns for `name` from its
 * bootstrap on and resigns on shutdown, so a rolling deploy hands the leadership over at once. For
 * `@Cron` / `@Interval` handlers that must run on one pod, and any provider method.
 *
 * @example
 * ＠Cron('* * * * * *')
 * ＠LeaderOnly('billing')
 * async charge() { … }
 */
export function LeaderOnly(name: string, options: LeaderOnlyOptions = {}): GuardDecorator {
  validateKey('name', name);
  const { onElected, onRevoked } = options as CampaignOptions;
  if (onElected !== undefined || onRevoked !== undefined) {
    throw new InvalidArgumentError('options', '@LeaderOnly takes no callbacks: use LeaderService.campaign() for them');
  }
  resolveCampaignOptions(options);
  return (target, propertyKey, descriptor) => {
    const type = typeof target === 'function' ? target : target.constructor;
    declareLeaderOnly(type, name, options);
    const where = `${classNameOf(target)}.${String(propertyKey)}`;
    guardMethod(
      {
        decorator: '@LeaderOnly',
        service: LeaderService,
        guardFor: (leaders) => async () => {
          // Nothing to give back (the leadership outlives the call): counted while it runs.
          if (leaders.leads(name, options, where)) return leaders.leaderOnlyCall() satisfies GuardTicket;
          throw new NotLeading(name);
        },
        skipWhenBusy: notLeading,
      },
      target,
      propertyKey,
      descriptor,
    );
  };
}

function notLeading(error: unknown): Skip | undefined {
  if (!(error instanceof NotLeading)) return undefined;
  return { reason: 'not-leader', detail: error.message };
}
