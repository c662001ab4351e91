import { describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { RedisServer } from './support/redis-server.js';
import { runWorkers } from './support/workers.js';

describe('test harness', () => {
  it('says how to install redis-server when it is missing', async () => {
    await expect(RedisServer.start({ binary: 'redis-server-not-installed' })).rejects.toThrow(
      /apt-get install -y redis-server/,
    );
  });

  it('freezes, resumes, kills and restarts a server on the same port', async () => {
    const server = await RedisServer.start();
    const client = new Redis(server.url, { commandTimeout: 200, maxRetriesPerRequest: 0 });
    try {
      expect(await client.ping()).toBe('PONG');
      server.pause();
      await expect(client.ping()).rejects.toThrow(/timed out/);
      server.resume();
      expect(await client.ping()).toBe('PONG');

      const pid = server.pid;
      await server.restart();
      expect(server.pid).not.toBe(pid);
      const fresh = new Redis(server.url);
      expect(await fresh.ping()).toBe('PONG');
      fresh.disconnect();
    } finally {
      client.disconnect();
      await server.stop();
    }
  });
});

describe('memory store', () => {
  it('keeps no timer that holds the process open: a process holding a lock still exits', async () => {
    const [report] = await runWorkers<{ token: string }>('idle-memory-lock', 1, []);

    expect(report.token).toEqual(expect.any(String));
  });
});
