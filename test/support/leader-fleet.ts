import type { ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { until } from './timing.js';
import { killWorker, onWorkerReports, spawnWorker, workerExited } from './workers.js';

// The processes of the leader-election chaos specs (test/topologies/leader-*.topology-spec.ts), each
// a test/support/workers/leader-chaos.mjs campaigning for one name and writing its term to a fenced
// counter while it leads.

/** A change of leadership one worker printed (test/support/workers/leader-chaos.mjs). */
export interface Change {
  event: 'ready' | 'elected' | 'revoked' | 'closed';
  term?: number;
  reason?: string;
  pid: number;
  at: number;
}

export type Election = 'nest-lock' | 'naive';

/**
 * Processes campaigning for one name on `lock`, each writing its term to a fenced counter on
 * `resource` while it leads; settings mixed as in a rolling deploy (lease, fairness).
 */
export class Fleet {
  readonly changes: Change[] = [];
  private readonly alive = new Map<number, { child: ChildProcess; ttl: number; fair: string }>();

  /**
   * `lock`: a redis:// URL, `cluster:<host:port>,…` or `redlock:<url>,…` (see leader-chaos.mjs);
   * `retryDelay`: each campaign's wait after a store failure.
   */
  constructor(
    private readonly lock: string,
    private readonly resource: string,
    readonly name: string,
    private readonly election: Election,
    private readonly retryDelay = 100,
  ) {}

  spawn(ttl: number, fair: string): void {
    const args = [this.lock, this.resource, this.name, ttl, fair, this.election, this.retryDelay];
    const child = spawnWorker('leader-chaos', args, { stdout: 'pipe' });
    onWorkerReports<Change>(child, (change) => this.changes.push(change));
    this.alive.set(child.pid!, { child, ttl, fair });
  }

  elections(): Change[] {
    return this.changes.filter((change) => change.event === 'elected');
  }

  /** The latest election, once there is one with a term above `afterTerm` (within `ms`). */
  async nextLeader(afterTerm: number, ms: number): Promise<Change> {
    await until(`a leader with a term above ${afterTerm}`, () => this.elections().some((e) => e.term! > afterTerm), ms);
    return this.elections().find((e) => e.term! > afterTerm)!;
  }

  /** Whether every live process has begun its campaign (printed `ready`). */
  private allCampaigning(): boolean {
    const campaigning = new Set(this.changes.filter((change) => change.event === 'ready').map(({ pid }) => pid));
    return [...this.alive.keys()].every((pid) => campaigning.has(pid));
  }

  settingsOf(pid: number): { child: ChildProcess; ttl: number; fair: string } {
    return this.alive.get(pid)!;
  }

  /**
   * One chaos round: lets `leader` write a moment, then `fault` — its process killed (`sigkill`),
   * shut down (`sigterm`) or frozen (`sigstop`), or else `storeFault`, a fault of the store — and waits
   * for the next leader. A frozen leader runs again once its successor wrote: it must not act under
   * its old term. Returns the next leader and the failover time.
   *
   * A round begins once every process campaigns: a process that replaced an ended one and still starts
   * is no candidate yet, and rounds in quick succession would otherwise measure how long a process takes
   * to start (up to a second on a loaded machine) rather than the failover to a waiting campaign.
   */
  async round(
    leader: Change,
    fault: string,
    storeFault?: () => Promise<unknown>,
  ): Promise<{ next: Change; failover: number }> {
    await until('every process campaigning', () => this.allCampaigning(), 30_000);
    await delay(30);
    const faultAt = Date.now();
    if (fault === 'sigkill') await this.replace(leader.pid, 'SIGKILL');
    else if (fault === 'sigterm') void this.replace(leader.pid, 'SIGTERM');
    else if (fault === 'sigstop') this.settingsOf(leader.pid).child.kill('SIGSTOP');
    else await storeFault?.();
    const next = await this.nextLeader(leader.term!, 15_000);
    if (fault === 'sigstop') {
      await delay(60);
      this.settingsOf(leader.pid).child.kill('SIGCONT');
      await delay(60);
    }
    return { next, failover: next.at - faultAt };
  }

  /** Ends process `pid` by `signal`; another with its settings takes its place. */
  async replace(pid: number, signal: 'SIGKILL' | 'SIGTERM'): Promise<void> {
    const { child, ttl, fair } = this.alive.get(pid)!;
    this.alive.delete(pid);
    if (signal === 'SIGKILL') await killWorker(child);
    else {
      child.kill('SIGTERM');
      await workerExited(child);
    }
    this.spawn(ttl, fair);
  }

  async stop(): Promise<void> {
    await Promise.all([...this.alive.values()].map(({ child }) => killWorker(child)));
    this.alive.clear();
  }
}

/**
 * The fenced counter's state (test/support/workers/leader-chaos.mjs): writes accepted; late writes (an
 * older term, sent while its writer led, arrived after its successor's: refused by the fence); and
 * violations (an older term from a writer that found itself leading after the newer leader began).
 */
export async function counter(
  resource: Redis,
  name: string,
): Promise<{ writes: number; late: number; violations: number; first?: string }> {
  const [writes, late, violations] = await resource.hmget(`${name}:counter`, 'writes', 'late', 'violations');
  const first = await resource.lindex(`${name}:violations`, 0);
  const counts = { writes: Number(writes ?? 0), late: Number(late ?? 0), violations: Number(violations ?? 0) };
  return first ? { ...counts, first } : counts;
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)];
}
