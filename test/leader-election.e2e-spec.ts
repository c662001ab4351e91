import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import type { ChildProcess } from 'node:child_process';
import { Injectable, type LoggerService } from '@nestjs/common';
import { Interval, ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { Redis } from 'ioredis';
import {
  InvalidArgumentError,
  LeaderOnly,
  LockBackendError,
  LeaderService,
  type Leadership,
  LockLostError,
  LockModule,
  type LockModuleOptions,
} from 'nest-lock';
import { setTimeout as delay } from 'node:timers/promises';
import { bootLockModule, closeLockApp, createLockApp, type LockApp, STORE_KINDS } from './support/lock-app.js';
import { DelayProxy } from './support/delay-proxy.js';
import { RedisServer, useRedisServer } from './support/redis-server.js';
import { until } from './support/timing.js';
import { killWorker, onWorkerReports, spawnWorker, workerExited } from './support/workers.js';

/** Every application a test boots, closed after it. */
const apps: LockApp[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => closeLockApp(app)));
});

async function appOn(options: LockModuleOptions): Promise<{ app: LockApp; leaders: LeaderService }> {
  const app = await bootLockModule({ logger: false, ...options });
  apps.push(app);
  return { app, leaders: app.module.get(LeaderService) };
}

/** The one leader among `leaderships`, once exactly one leads (within `ms`). */
async function soleLeader(leaderships: Leadership[], ms = 5_000): Promise<Leadership> {
  await until('exactly one leader', () => leaderships.filter((leadership) => leadership.isLeader).length === 1, ms);
  return leaderships.find((leadership) => leadership.isLeader)!;
}

describe('LeaderService: arguments', () => {
  it.each([
    ['an empty name', () => [''] as const, 'name'],
    ['an unknown option', () => ['jobs', { tll: 1_000 }] as const, 'tll'],
    ['a ttl under 100 ms', () => ['jobs', { ttl: 50 }] as const, 'ttl'],
    ['a negative timeout', () => ['jobs', { timeout: -1 }] as const, 'timeout'],
    ['a retryDelay of 0', () => ['jobs', { retryDelay: 0 }] as const, 'retryDelay'],
    // Shorter, a follower would start its attempts again in a busy loop (14,000 commands/s at 1 ms).
    ['a timeout under 100 ms', () => ['jobs', { timeout: 1 }] as const, 'timeout'],
    ['a retryDelay under 100 ms', () => ['jobs', { retryDelay: 1 }] as const, 'retryDelay'],
    ['an onElected that is no function', () => ['jobs', { onElected: 'yes' }] as const, 'onElected'],
  ])('refuses %s with InvalidArgumentError, before any command', async (_what, args, argument) => {
    const { leaders } = await appOn({ redis: 'redis://127.0.0.1:1' });
    const call = (): Leadership => (leaders.campaign as (...a: unknown[]) => Leadership)(...args());
    let thrown: unknown;
    try {
      call();
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InvalidArgumentError);
    expect(thrown).toMatchObject({ argument });
  });

  it('refuses a second campaign for a name in one process, and starts one again after resign', async () => {
    const { leaders } = await appOn({ store: 'memory' });
    const first = leaders.campaign('jobs');
    expect(() => leaders.campaign('jobs')).toThrow(InvalidArgumentError);
    expect(leaders.leadership('jobs')).toBe(first);
    await leaders.resign('jobs');
    expect(leaders.leadership('jobs')).toBeUndefined();
    const again = leaders.campaign('jobs');
    await again.whenLeader();
    expect(again.isLeader).toBe(true);
  });

  it('a campaign resigned through its own Leadership is forgotten: leadership(name) is undefined, campaign(name) starts anew', async () => {
    const { leaders } = await appOn({ store: 'memory' });
    const first = leaders.campaign('freed');
    await first.whenLeader();
    await first.resign();
    expect(leaders.leadership('freed')).toBeUndefined();
    const again = leaders.campaign('freed');
    await again.whenLeader();
    expect(again.term).toBeGreaterThan(0);
  });

  it('whenLeader(signal) gives up when its signal aborts, with its reason', async () => {
    const server = await RedisServer.start();
    try {
      const [a, b] = await Promise.all(
        [1, 2].map(async () => (await appOn({ redis: server.url })).leaders.campaign('patient')),
      );
      const leader = await soleLeader([a, b]);
      const follower = leader === a ? b : a;
      await expect(follower.whenLeader(AbortSignal.timeout(50))).rejects.toMatchObject({ name: 'TimeoutError' });
      const gaveUp = new AbortController();
      gaveUp.abort(new Error('no longer needed'));
      await expect(follower.whenLeader(gaveUp.signal)).rejects.toThrow('no longer needed');
      // A wait that is not given up still resolves at the next election.
      const waiting = follower.whenLeader();
      await leader.resign();
      await waiting;
      expect(follower.isLeader).toBe(true);
    } finally {
      await Promise.all(apps.splice(0).map((app) => closeLockApp(app)));
      await server.stop();
    }
  });

  it('refuses callbacks and bad settings on @LeaderOnly when the class is defined', () => {
    expect(() => LeaderOnly('')).toThrow(InvalidArgumentError);
    expect(() => LeaderOnly('jobs', { ttl: 10 })).toThrow(InvalidArgumentError);
    expect(() => LeaderOnly('jobs', { onElected: () => undefined } as never)).toThrow(InvalidArgumentError);
  });
});

describe.each(STORE_KINDS)('LeaderService on the %s store', (kind) => {
  it('leads alone under a term, tells onElected, and resigns: signal aborted, onRevoked told, whenLeader refused', async () => {
    const app = await createLockApp(kind, { logger: false });
    apps.push(app);
    const leaders = app.module.get(LeaderService);
    const elected: number[] = [];
    const revoked: LockLostError[] = [];
    const leadership = leaders.campaign('reports', {
      onElected: (term) => elected.push(term),
      onRevoked: (reason) => revoked.push(reason),
    });
    expect(leadership.name).toBe('reports');
    await leadership.whenLeader();
    expect(leadership.isLeader).toBe(true);
    expect(leadership.term).toEqual(expect.any(Number));
    expect(elected).toEqual([leadership.term]);
    const signal = leadership.signal!;
    expect(signal.aborted).toBe(false);
    // The name's lock is held, renewed, in the store.
    expect((await app.locks.inspect('leader:reports')).held).toBe(true);

    await leadership.resign();
    expect(leadership.isLeader).toBe(false);
    expect(leadership.term).toBeUndefined();
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(LockLostError);
    expect((signal.reason as LockLostError).reason).toBe('released');
    expect(revoked.map((reason) => reason.reason)).toEqual(['released']);
    expect((await app.locks.inspect('leader:reports')).held).toBe(false);
    await expect(leadership.whenLeader()).rejects.toBeInstanceOf(LockLostError);
  });
});

describe('LeaderService on Redis: handovers, losses and outages', () => {
  const server = useRedisServer();

  it('two applications: one leads; its resignation wakes the other, which leads at once under a higher term', async () => {
    const [a, b] = await Promise.all(
      [1, 2].map(async () => (await appOn({ redis: server().url })).leaders.campaign('nightly', { ttl: 2_000 })),
    );
    const leader = await soleLeader([a, b]);
    const follower = leader === a ? b : a;
    const term = leader.term!;
    await delay(200);
    expect(follower.isLeader).toBe(false);
    const resigned = performance.now();
    await leader.resign();
    await follower.whenLeader();
    // Woken by the release, not by its next attempt after waiting `timeout` (= ttl, 2 s).
    expect(performance.now() - resigned).toBeLessThan(1_000);
    expect(follower.term).toBeGreaterThan(term);
  });

  it('a leader whose lock is taken from it is revoked, and the campaign leads again under a higher term', async () => {
    const { app, leaders } = await appOn({ redis: server().url });
    const revoked: string[] = [];
    const leadership = leaders.campaign('taken', { ttl: 600, onRevoked: (reason) => revoked.push(reason.reason) });
    await leadership.whenLeader();
    const term = leadership.term!;
    const signal = leadership.signal!;
    await app.locks.forceUnlock('leader:taken');
    // Found out at the next renewal (every ttl / 3).
    await until('the leader to be revoked', () => signal.aborted, 2_000);
    expect((signal.reason as LockLostError).reason).toBe('taken');
    expect(revoked).toEqual(['taken']);
    await until('the campaign to lead again', () => leadership.isLeader, 3_000);
    expect(leadership.term).toBeGreaterThan(term);
  });

  it('Redis restarted empty: the leader stops the moment the connection closes, not at its next renewal', async () => {
    const restarted = await RedisServer.start();
    try {
      const { leaders } = await appOn({ redis: restarted.url });
      // A renewal every 2 s: a leader that waited for it would lead on for up to 2 s after the restart.
      const leadership = leaders.campaign('restart', { ttl: 6_000, retryDelay: 100 });
      await leadership.whenLeader();
      const term = leadership.term!;
      const signal = leadership.signal!;
      const restartedAt = performance.now();
      await restarted.restart();
      await until('the leader to stop', () => signal.aborted, 1_000);
      expect(performance.now() - restartedAt).toBeLessThan(1_000);
      expect((signal.reason as LockLostError).reason).toBe('taken');
      // The key went with the restart: the campaign leads again at once, under a higher term.
      await until('a leader again after the restart', () => leadership.isLeader, 5_000);
      expect(leadership.term).toBeGreaterThan(term);
      await leadership.resign();
    } finally {
      await restarted.stop();
    }
  });

  it('Redis frozen past the lease: the leader is revoked by its own clock, and leads again once Redis answers', async () => {
    const frozen = await RedisServer.start();
    try {
      const { leaders } = await appOn({ redis: frozen.url, commandTimeout: 300 });
      const leadership = leaders.campaign('outage', { ttl: 600, retryDelay: 200 });
      await leadership.whenLeader();
      const signal = leadership.signal!;
      frozen.pause();
      // Its renewals go unanswered: lost when its lease runs out by its own clock (600 ms), not later.
      await until('the frozen leader to be revoked', () => signal.aborted, 1_500);
      expect(leadership.isLeader).toBe(false);
      await delay(1_000);
      expect(leadership.isLeader).toBe(false);
      frozen.resume();
      // Back without a restart: leads again within the lease left on the server, a retry and an attempt.
      await until('a leader again after the outage', () => leadership.isLeader, 3_000);
      await leadership.resign();
    } finally {
      await frozen.stop();
    }
  });
});

describe('LeaderService across processes', () => {
  const server = useRedisServer();
  const children: ChildProcess[] = [];
  afterAll(async () => {
    await Promise.all(children.map((child) => killWorker(child)));
  });

  interface Change {
    event: 'ready' | 'elected' | 'revoked' | 'closed';
    term?: number;
    reason?: string;
    pid: number;
    at: number;
  }

  it('3 processes: one leads; SIGKILLed, another leads within ttl and a renewal; SIGTERM hands over within 1 s', async () => {
    const ttl = 1_500;
    const changes: Change[] = [];
    for (let i = 0; i < 3; i++) {
      const child = spawnWorker('campaign', [server().url, 'fleet', ttl], { stdout: 'pipe' });
      children.push(child);
      onWorkerReports<Change>(child, (change) => changes.push(change));
    }
    const elected = () => changes.filter((change) => change.event === 'elected');
    await until(
      'three campaigns and one leader',
      () => changes.filter((change) => change.event === 'ready').length === 3 && elected().length === 1,
      15_000,
    );
    await delay(300);
    expect(elected()).toHaveLength(1);

    const first = elected()[0];
    const killedAt = Date.now();
    await killWorker(children.find((child) => child.pid === first.pid)!);
    await until('a second leader', () => elected().length === 2, ttl * 3);
    const second = elected()[1];
    expect(second.pid).not.toBe(first.pid);
    expect(second.term).toBeGreaterThan(first.term!);
    // The lease left (at most ttl since its last renewal, ttl / 3 ago at most) and one wait step.
    expect(second.at - killedAt).toBeLessThan(ttl + ttl / 3 + 500);

    const leaderProcess = children.find((child) => child.pid === second.pid)!;
    const terminatedAt = Date.now();
    leaderProcess.kill('SIGTERM');
    await until('a third leader', () => elected().length === 3, 2_000);
    const third = elected()[2];
    expect(third.at - terminatedAt).toBeLessThan(1_000);
    expect(third.term).toBeGreaterThan(second.term!);
    await workerExited(leaderProcess);
    expect(changes.filter((change) => change.pid === second.pid).map((change) => change.event)).toEqual([
      'ready',
      'elected',
      'revoked',
      'closed',
    ]);
  });
});

describe('@LeaderOnly', () => {
  const server = useRedisServer();

  /** Every run of the job, by application. */
  const runs: string[] = [];

  @Injectable()
  class Billing {
    static instances = 0;
    readonly id = `app-${++Billing.instances}`;

    @Interval(50)
    @LeaderOnly('billing', { ttl: 1_000 })
    async charge(): Promise<string> {
      runs.push(this.id);
      return this.id;
    }
  }

  class Quiet implements LoggerService {
    log(): void {}
    error(): void {}
    warn(): void {}
  }

  async function billingApp(): Promise<{ close(): Promise<void>; billing: Billing; leaders: LeaderService }> {
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server().url, logger: false }), ScheduleModule.forRoot()],
      providers: [Billing],
    })
      .setLogger(new Quiet())
      .compile();
    await module.init();
    return { close: () => module.close(), billing: module.get(Billing), leaders: module.get(LeaderService) };
  }

  it('runs on the leader only, campaigning from bootstrap; the leader closed, the next firings run on the new leader', async () => {
    const apps3 = [await billingApp(), await billingApp(), await billingApp()];
    try {
      // Campaigns started at bootstrap: a leader before any firing asked for one.
      const leaderships = apps3.map(({ leaders }) => leaders.leadership('billing')!);
      expect(leaderships.every((leadership) => leadership !== undefined)).toBe(true);
      const leader = await soleLeader(leaderships);
      const leaderApp = apps3[leaderships.indexOf(leader)];
      runs.length = 0;
      await delay(600);
      expect(runs.length).toBeGreaterThan(3);
      expect(new Set(runs)).toEqual(new Set([leaderApp.billing.id]));
      // A direct call elsewhere is skipped too: undefined, not run.
      const follower = apps3.find((app) => app !== leaderApp)!;
      const before = runs.length;
      await expect(follower.billing.charge()).resolves.toBeUndefined();
      expect(runs.length - before).toBeLessThanOrEqual(1); // at most one firing of the leader meanwhile

      await leaderApp.close();
      const rest = apps3.filter((app) => app !== leaderApp);
      const next = await soleLeader(
        rest.map(({ leaders }) => leaders.leadership('billing')!),
        1_000,
      );
      const nextApp = rest.find(({ leaders }) => leaders.leadership('billing') === next)!;
      runs.length = 0;
      await delay(400);
      expect(new Set(runs)).toEqual(new Set([nextApp.billing.id]));
    } finally {
      await Promise.all(apps3.map((app) => app.close().catch(() => undefined)));
    }
  });

  it('a call during or after shutdown starts no campaign and holds nothing: the process can exit', async () => {
    @Injectable()
    class Late {
      @LeaderOnly('late', { ttl: 10_000 })
      async run(): Promise<string> {
        return 'ran';
      }
    }
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server().url, logger: false })],
      providers: [Late],
    }).compile();
    await module.init();
    const late = module.get(Late);
    const leaders = module.get(LeaderService);
    await leaders.leadership('late')!.whenLeader();
    // A scheduler firing while the application closes, and once more after.
    const firing = (async () => {
      const results: unknown[] = [];
      for (let i = 0; i < 20; i++) {
        results.push(await late.run());
        await delay(1);
      }
      return results;
    })();
    await module.close();
    await firing;
    await expect(late.run()).resolves.toBeUndefined();
    expect(leaders.leadership('late')).toBeUndefined();
    expect(() => leaders.campaign('late')).toThrow(LockBackendError);
    const redis = new Redis(server().url);
    try {
      const held = (await redis.keys('*leader:late*')).filter((key) => !key.endsWith(':fence'));
      expect(held).toEqual([]);
    } finally {
      redis.disconnect();
    }
  });

  it('campaigns from bootstrap for an inherited @LeaderOnly method too', async () => {
    class Base {
      @LeaderOnly('inherited')
      async job(): Promise<string> {
        return 'ran';
      }
    }
    @Injectable()
    class Sub extends Base {}
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server().url, logger: false })],
      providers: [Sub],
    }).compile();
    await module.init();
    try {
      const leadership = module.get(LeaderService).leadership('inherited');
      expect(leadership).toBeDefined();
      await leadership!.whenLeader();
      await expect(module.get(Sub).job()).resolves.toBe('ran');
    } finally {
      await module.close();
    }
  });

  it('is refused at bootstrap when another @LeaderOnly asks the same name with other settings', async () => {
    @Injectable()
    class Other {
      @LeaderOnly('billing', { ttl: 3_000 })
      async run(): Promise<void> {}
    }
    const module = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redis: server().url, logger: false })],
      providers: [Billing, Other],
    }).compile();
    await expect(module.init()).rejects.toBeInstanceOf(InvalidArgumentError);
    await module.close().catch(() => undefined);
  });
});

/** What a second outside review broke, each fixed with this test first. */
describe('LeaderService: found by a second outside review', () => {
  const server = useRedisServer();

  it('whenLeader() given something that is no AbortSignal is refused, and the campaign goes on: it leads, and its resign hands over at once', async () => {
    const { leaders: first } = await appOn({ redis: server().url });
    const { leaders: second } = await appOn({ redis: server().url });
    const leadership = first.campaign('misused', { ttl: 10_000 });
    // Options by mistake instead of a signal: before, its waiter stayed and the next election threw,
    // ending the campaign with its lock held and renewed for ever.
    await expect(leadership.whenLeader({ signal: undefined } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await leadership.whenLeader();
    expect(leadership.isLeader).toBe(true);
    const other = second.campaign('misused', { ttl: 10_000 });
    await leadership.resign();
    await other.whenLeader(AbortSignal.timeout(2_000));
    expect(other.term).toBeGreaterThan(0);
  });

  it('a campaign with a lease the store refuses (Redlock: above its quarantine) is refused at once, not retried for ever as an outage', async () => {
    const masters = await Promise.all([1, 2, 3].map(() => RedisServer.start()));
    try {
      const { leaders } = await appOn({
        redlock: { nodes: masters.map((master) => master.url), quarantine: 3_000 },
        defaults: { ttl: 3_000 },
      });
      expect(() => leaders.campaign('report')).toThrow(InvalidArgumentError);
      expect(() => leaders.campaign('report', { ttl: 5_000 })).toThrow(/quarantine/);
      const allowed = leaders.campaign('report', { ttl: 3_000 });
      await allowed.whenLeader(AbortSignal.timeout(5_000));
    } finally {
      await Promise.all(apps.splice(0).map((app) => closeLockApp(app)));
      await Promise.all(masters.map((master) => master.stop()));
    }
  });

  it('a graceful shutdown lets a @LeaderOnly call in flight finish before it resigns: the next leader never runs beside it', async () => {
    const events: string[] = [];
    @Injectable()
    class Report {
      static instances = 0;
      readonly id = `app-${++Report.instances}`;

      @LeaderOnly('drained', { ttl: 10_000 })
      async build(): Promise<void> {
        events.push(`${this.id} started`);
        await delay(600);
        events.push(`${this.id} finished`);
      }
    }
    const boot = async () => {
      const module = await Test.createTestingModule({
        imports: [LockModule.forRoot({ redis: server().url, logger: false })],
        providers: [Report],
      }).compile();
      await module.init();
      return module;
    };
    const first = await boot();
    await first.get(LeaderService).leadership('drained')!.whenLeader();
    const second = await boot();
    const running = first.get(Report).build();
    await delay(50);
    const closed = first.close();
    const successor = second.get(LeaderService).leadership('drained')!;
    await successor.whenLeader(AbortSignal.timeout(5_000));
    events.push('successor leads');
    await Promise.all([running, closed]);
    await second.close();
    // Before, the first resigned at once: its successor led while its run still went on.
    expect(events).toEqual(['app-1 started', 'app-1 finished', 'successor leads']);
  });

  it('on a slow reply path, a leadership whose lease ran out by its own clock ends for good: isLeader never turns true again under the same term', async () => {
    const proxy = await DelayProxy.start(server().port);
    try {
      const { leaders } = await appOn({ redis: proxy.url, commandTimeout: 1_000 });
      const leadership = leaders.campaign('slow', { ttl: 300, retryDelay: 100 });
      await leadership.whenLeader(AbortSignal.timeout(5_000));
      const term = leadership.term!;
      const signal = leadership.signal!;
      // Renewals (every 100 ms) answered 230 ms late: the lease runs out here before each answer comes.
      await proxy.setReplyDelay(230);
      const seen: boolean[] = [];
      const watchUntil = performance.now() + 1_500;
      while (performance.now() < watchUntil) {
        if (leadership.term === undefined || leadership.term === term) seen.push(leadership.isLeader);
        await delay(5);
      }
      // Before: isLeader went false → true within the term over and over, its signal never aborted.
      const firstFalse = seen.indexOf(false);
      expect(firstFalse).toBeGreaterThanOrEqual(0);
      expect(seen.slice(firstFalse).filter((leading) => leading).length).toBe(0);
      expect(signal.aborted).toBe(true);
      expect((signal.reason as LockLostError).reason).toBe('expired');
    } finally {
      await Promise.all(apps.splice(0).map((app) => closeLockApp(app)));
      await proxy.stop();
    }
  });
});
