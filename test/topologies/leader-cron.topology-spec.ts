import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { RedisServer } from '../support/redis-server.js';
import { until } from '../support/timing.js';
import { killWorker, onWorkerReports, spawnWorker } from '../support/workers.js';

interface Started {
  event: 'ready' | 'elected';
  term?: number;
  pid: number;
  at: number;
}

describe('@LeaderOnly on a one-second @Cron, 3 instances for 30 s', () => {
  let lock: RedisServer;
  let resource: RedisServer;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    [lock, resource] = await Promise.all([RedisServer.start(), RedisServer.start()]);
  });
  afterAll(async () => {
    await Promise.all(children.map((child) => killWorker(child)));
    await Promise.all([lock?.stop(), resource?.stop()]);
  });

  it('every firing runs once, on the leader; the leader killed, the next firings run on the new leader', async () => {
    const ttl = 2_000;
    const events: Started[] = [];
    for (let i = 0; i < 3; i++) {
      const child = spawnWorker('leader-cron', [lock.url, resource.url, 'cron', ttl], { stdout: 'pipe' });
      children.push(child);
      onWorkerReports<Started>(child, (event) => events.push(event));
    }
    const elected = () => events.filter((event) => event.event === 'elected');
    await until(
      'three instances and a leader',
      () => events.filter((e) => e.event === 'ready').length === 3 && elected().length === 1,
      20_000,
    );
    const first = elected()[0];
    await delay(15_000);
    const killedAt = Date.now();
    await killWorker(children.find((child) => child.pid === first.pid)!);
    await until('a new leader', () => elected().length === 2, ttl * 3);
    const second = elected()[1];
    await delay(15_000);

    const redis = new Redis(resource.url);
    const firings = (await redis.lrange('cron:firings', 0, -1)).map((entry) => entry.split(':').map(Number));
    redis.disconnect();
    const bySecond = new Map<number, number[]>();
    for (const [second, pid] of firings) bySecond.set(second, [...(bySecond.get(second) ?? []), pid]);
    // Exactly once a second: never two instances, never twice.
    expect([...bySecond.values()].filter((pids) => pids.length > 1)).toEqual([]);
    // Before the kill, only the first leader; after the new leader's election, only it.
    const before = firings.filter(([s]) => s * 1000 < killedAt - 1000).map(([, pid]) => pid);
    const after = firings.filter(([s]) => s * 1000 >= second.at).map(([, pid]) => pid);
    expect(new Set(before)).toEqual(new Set([first.pid]));
    expect(new Set(after)).toEqual(new Set([second.pid]));
    expect(before.length).toBeGreaterThanOrEqual(12);
    expect(after.length).toBeGreaterThanOrEqual(12);
    // The next firing after the new leader's election runs on it.
    const nextSecond = Math.ceil(second.at / 1000);
    expect(bySecond.get(nextSecond) ?? bySecond.get(nextSecond + 1)).toEqual([second.pid]);
  });
});
