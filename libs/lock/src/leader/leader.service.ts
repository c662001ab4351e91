import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import { registerLiveService, unregisterLiveService } from '../live-services.js';
import { InvalidArgumentError, LockBackendError } from '../lock.errors.js';
import { createLockLogger, type LockLogger } from '../lock-logger.js';
import { LOCK_OPTIONS, SHUTDOWN_GRACE_MS } from '../lock.constants.js';
import { LockService } from '../lock.service.js';
import { checkTtlOn, watchConnectionOf } from '../lease/store-capabilities.js';
import { LockStore } from '../store/store.js';
import { type ServiceOptions, validateKey } from '../options/call-options.js';
import type { Skip } from '../telemetry/telemetry.js';
import { LockTelemetry } from '../telemetry/telemetry.js';
import { sleep } from '../util/sleep.js';
import { Campaign, type Leadership } from './campaign.js';
import { type CampaignOptions, type ResolvedCampaignOptions, resolveCampaignOptions } from './campaign-options.js';

/** The campaigns `@LeaderOnly` methods of a class ask for: by name, with the decorator's options. */
const declaredCampaigns = new WeakMap<object, Map<string, CampaignOptions>>();

/** `@LeaderOnly(name, options)` on a method of `type`: its application campaigns for `name` from bootstrap on. @internal */
export function declareLeaderOnly(type: object, name: string, options: CampaignOptions): void {
  const campaigns = declaredCampaigns.get(type) ?? new Map<string, CampaignOptions>();
  declaredCampaigns.set(type, campaigns);
  campaigns.set(name, options);
}

/** The campaigns declared on `type` and on the classes it extends (an inherited `@LeaderOnly` method counts). */
function declaredIn(type: object): Map<string, CampaignOptions> {
  const declared = new Map<string, CampaignOptions>();
  let each: object | null = type;
  while (each !== null && each !== Function.prototype) {
    for (const [name, options] of declaredCampaigns.get(each) ?? []) {
      if (!declared.has(name)) declared.set(name, options);
    }
    each = Object.getPrototypeOf(each) as object | null;
  }
  return declared;
}

/** The lock a campaign for `name` waits for and its leader holds. */
export function leaderKeyOf(name: string): string {
  return `leader:${name}`;
}

/**
 * Leader election on the lock store: exactly one process of those campaigning for a name leads at a
 * time, under a term that fences a deposed leader's late writes. Built on `LockService` alone: a
 * campaign is a lock on `leader:<name>`, renewed while it leads, whose fence is the term.
 */
@Injectable()
export class LeaderService implements OnApplicationBootstrap, OnModuleDestroy, BeforeApplicationShutdown {
  private readonly campaigns = new Map<string, Campaign>();
  private readonly logger: LockLogger;
  /** Set once the application shuts down: no campaign starts after its campaigns resigned. */
  private shuttingDown = false;
  /** `@LeaderOnly` calls running now: a graceful shutdown lets them finish before it resigns. */
  private leaderOnlyCalls = 0;

  /** Built by `LockModule`. @internal */
  constructor(
    @Inject(LockService) private readonly locks: LockService,
    @Inject(LOCK_OPTIONS) options: ServiceOptions,
    @Inject(LockTelemetry) private readonly telemetry: LockTelemetry,
    @Inject(DiscoveryService) private readonly discovery: DiscoveryService,
    @Inject(LockStore) private readonly store: LockStore,
  ) {
    this.logger = createLockLogger(options.logger, 'LeaderService');
    registerLiveService(LeaderService, this);
  }

  /**
   * Starts campaigning for `name` in the background and returns at once. The process campaigns until
   * `resign()` (or the application's shutdown): while another leads it waits in the name's line, and
   * after losing the leadership, or while the store is away, it campaigns again by itself. One
   * campaign per name in a process: a second call for a name already campaigned for is refused.
   */
  campaign(name: string, options: CampaignOptions = {}): Leadership {
    validateKey('name', name);
    const resolved = resolveCampaignOptions(options);
    // A lease the store refuses (Redlock: longer than its quarantine) would fail every attempt.
    checkTtlOn(this.store, resolved.ttl);
    if (this.shuttingDown) {
      throw new LockBackendError(`The application is shutting down: no campaign for "${name}" starts`, name, {
        retryable: false,
      });
    }
    if (this.campaigns.has(name)) {
      throw new InvalidArgumentError(
        'name',
        `"${name}" is already campaigned for in this process: use its Leadership (leadership(name))`,
      );
    }
    const watchConnection = (onLost: () => void): (() => void) => watchConnectionOf(this.store, onLost);
    // Resigned through its own Leadership: this process campaigns for the name no more.
    const resigned = (): void => {
      if (this.campaigns.get(name) === campaign) this.campaigns.delete(name);
    };
    const campaign = new Campaign(name, leaderKeyOf(name), this.locks, resolved, this.logger, {
      watchConnection,
      resigned,
      leadershipBegan: () => this.telemetry.leadershipBegan(name),
      leadershipEnded: () => this.telemetry.leadershipEnded(name),
    });
    this.campaigns.set(name, campaign);
    return campaign;
  }

  /** This process's campaign for `name`, or `undefined` when it does not campaign for it (or resigned). */
  leadership(name: string): Leadership | undefined {
    validateKey('name', name);
    return this.campaigns.get(name);
  }

  /** Stops campaigning for `name` and gives its leadership up, if this process held it. */
  async resign(name: string): Promise<void> {
    validateKey('name', name);
    const campaign = this.campaigns.get(name);
    this.campaigns.delete(name);
    await campaign?.resign();
  }

  /**
   * Whether this process leads `name` now, for a `@LeaderOnly` call: the campaign is started (with
   * the decorator's options) when none runs yet — an instance Nest did not discover at bootstrap.
   * @internal
   */
  leads(name: string, options: CampaignOptions, where: string): boolean {
    // A call during or after shutdown (a scheduler firing late) starts nothing.
    if (this.shuttingDown) return false;
    return this.declaredCampaign(name, options, where).isLeader;
  }

  /**
   * A `@LeaderOnly` call that runs (this process leads): counted until it is done, so that a graceful
   * shutdown resigns only after it finished. @internal
   */
  leaderOnlyCall(): { run<T>(call: () => T): T; leave(): Promise<void> } {
    this.leaderOnlyCalls++;
    let left = false;
    return {
      run: (call) => call(),
      leave: async () => {
        if (left) return;
        left = true;
        this.leaderOnlyCalls--;
      },
    };
  }

  /** A `@LeaderOnly` call skipped: this process does not lead. @internal */
  skipped(where: string, skip: Skip): void {
    this.logger.verbose(`${where} skipped: ${skip.detail}`);
    this.telemetry.skipped('leader', skip.reason);
  }

  /** The campaigns of the `@LeaderOnly` methods of every provider and controller start now. */
  onApplicationBootstrap(): void {
    for (const wrapper of [...this.discovery.getProviders(), ...this.discovery.getControllers()]) {
      const type: unknown = wrapper.metatype;
      if (typeof type !== 'function') continue;
      for (const [name, options] of declaredIn(type)) this.declaredCampaign(name, options, type.name);
    }
  }

  /** The campaign for `name`, started with `options` if none runs; one started with other settings is refused. */
  private declaredCampaign(name: string, options: CampaignOptions, where: string): Campaign {
    const running = this.campaigns.get(name);
    if (running === undefined) return this.campaign(name, options) as Campaign;
    if (!sameSettings(running.settings, resolveCampaignOptions(options))) {
      throw new InvalidArgumentError(
        'options',
        `@LeaderOnly("${name}") on ${where} asks for other settings than the campaign for "${name}" already running`,
      );
    }
    return running;
  }

  onModuleDestroy(): void {
    unregisterLiveService(LeaderService, this);
  }

  /**
   * Every campaign resigns before the store closes (`LockModule` closes it on application shutdown),
   * once its `@LeaderOnly` calls in flight finished: a leader of a process shut down gracefully hands
   * over at once rather than after its lease.
   */
  async beforeApplicationShutdown(): Promise<void> {
    this.shuttingDown = true;
    // `@LeaderOnly` calls still running finish as leader (for at most the grace period): resigned
    // under them, the next leader's first run would overlap theirs.
    const deadline = performance.now() + SHUTDOWN_GRACE_MS;
    while (this.leaderOnlyCalls > 0 && performance.now() < deadline) await sleep(10);
    const campaigns = [...this.campaigns.values()];
    this.campaigns.clear();
    await Promise.all(campaigns.map((campaign) => campaign.resign()));
  }
}

function sameSettings(a: ResolvedCampaignOptions, b: ResolvedCampaignOptions): boolean {
  return a.ttl === b.ttl && a.timeout === b.timeout && a.retryDelay === b.retryDelay;
}
