import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Test } from '@nestjs/testing';
import { Cluster, Redis } from 'ioredis';
import { InvalidArgumentError, LockModule, type LockModuleOptions } from 'nest-lock';
import { bootstrapError } from './support/lock-app.js';
import { RedisServer } from './support/redis-server.js';

/**
 * `LockModule.forRoot({ redlock })`'s options are refused at bootstrap with `InvalidArgumentError`,
 * before any connection is opened: the server below never sees a client of the module.
 */
describe('redlock options', () => {
  let servers: RedisServer[];
  let admins: Redis[];
  let server: RedisServer;

  beforeAll(async () => {
    servers = await Promise.all([RedisServer.start(), RedisServer.start(), RedisServer.start()]);
    [server] = servers;
    admins = servers.map((each) => new Redis(each.url));
  });
  afterAll(async () => {
    admins.forEach((admin) => admin.disconnect());
    await Promise.all(servers.map((each) => each.stop()));
  });

  /** Clients connected to the three servers (the admins included). */
  async function connectedClients(): Promise<number> {
    const infos = await Promise.all(admins.map((admin) => admin.info('clients')));
    return infos.reduce((sum, info) => sum + Number(/connected_clients:(\d+)/.exec(info)![1]), 0);
  }

  const three = () => servers.map((each) => each.url);

  const refused: [string, () => LockModuleOptions, string, RegExp][] = [
    [
      'redis and redlock together',
      () => ({ redis: 'redis://127.0.0.1:1', redlock: { nodes: three() } }),
      'redlock',
      /redis option/,
    ],
    [
      "store 'memory' with redlock",
      () => ({ store: 'memory', redlock: { nodes: three() } }),
      'store',
      /redlock option/,
    ],
    ['redlock not an object', () => ({ redlock: 'redis://x' as never }), 'redlock', /must be an object/],
    ['no nodes', () => ({ redlock: { nodes: [] } }), 'redlock.nodes', /non-empty array/],
    [
      'nodes not an array',
      () => ({ redlock: { nodes: 'redis://127.0.0.1:1' as never } }),
      'redlock.nodes',
      /non-empty array/,
    ],
    [
      'a node that is no URL',
      () => ({ redlock: { nodes: ['http://x', ...three()] } }),
      'redlock.nodes[0]',
      /redis:\/\//,
    ],
    [
      'a node of the wrong type',
      () => ({ redlock: { nodes: [42 as never] } }),
      'redlock.nodes[0]',
      /URL, ioredis options/,
    ],
    [
      'a node listed twice',
      () => ({ redlock: { nodes: [server.url, server.url, servers[1].url] } }),
      'redlock.nodes[1]',
      /listed twice/,
    ],
    [
      'one server under two loopback names',
      () => ({ redlock: { nodes: [servers[1].url, `redis://localhost:${server.port}`, server.url] } }),
      'redlock.nodes[2]',
      /redlock.nodes\[1\] \(localhost:\d+\) again/,
    ],
    [
      'one server in two databases',
      () => ({ redlock: { nodes: [server.url, `${server.url}/1`, servers[1].url] } }),
      'redlock.nodes[1]',
      /server of redlock.nodes\[0\]/,
    ],
    [
      'one server as a URL and as options',
      () => ({ redlock: { nodes: [`${server.url}/`, servers[1].url, { port: server.port }] } }),
      'redlock.nodes[2]',
      /server of redlock.nodes\[0\]/,
    ],
    [
      'one server as options and as a client',
      () => ({
        redlock: {
          nodes: [
            { host: 'LOCALHOST', port: server.port, db: 2 },
            new Redis({ port: server.port, lazyConnect: true }),
            servers[1].url,
          ],
        },
      }),
      'redlock.nodes[1]',
      /server of redlock.nodes\[0\]/,
    ],
    [
      'one server under other loopback addresses',
      () => ({
        redlock: {
          nodes: [
            server.url,
            `redis://127.1:${servers[1].port}`,
            { host: '::ffff:127.0.0.1', port: server.port },
            `redis://[::ffff:127.0.0.1]:${servers[1].port}`,
          ],
        },
      }),
      'redlock.nodes[2]',
      /server of redlock.nodes\[0\]/,
    ],
    [
      'the IPv6 loopback written out beside localhost',
      () => ({ redlock: { nodes: [{ host: '0:0:0:0:0:0:0:1', port: 7000 }, 'redis://localhost:7000', server.url] } }),
      'redlock.nodes[1]',
      /localhost:7000/,
    ],
    [
      'the default port twice',
      () => ({ redlock: { nodes: ['redis://127.0.0.1', { host: '127.0.0.1', port: 6379 }, server.url] } }),
      'redlock.nodes[1]',
      /localhost:6379/,
    ],
    [
      'a quorum of half',
      () => ({ redlock: { nodes: [...three(), 'redis://127.0.0.1:1'], quorum: 2 } }),
      'redlock.quorum',
      /> 2/,
    ],
    ['a quorum above N', () => ({ redlock: { nodes: three(), quorum: 4 } }), 'redlock.quorum', /≤ 3/],
    ['a fractional quorum', () => ({ redlock: { nodes: three(), quorum: 2.5 } }), 'redlock.quorum', /whole number/],
    [
      'a negative driftFactor',
      () => ({ redlock: { nodes: three(), driftFactor: -0.1 } }),
      'redlock.driftFactor',
      /≥ 0/,
    ],
    ['a driftFactor of 1', () => ({ redlock: { nodes: three(), driftFactor: 1 } }), 'redlock.driftFactor', /< 1/],
    [
      'a quarantine shorter than defaults.ttl',
      () => ({ redlock: { nodes: three(), quarantine: 1_000 }, defaults: { ttl: 5_000 } }),
      'redlock.quarantine',
      /≥ defaults.ttl \(5000 ms\)/,
    ],
    [
      "a defaults.ttl within driftFactor's margin",
      () => ({ redlock: { nodes: three(), driftFactor: 0.99 }, defaults: { ttl: 100 } }),
      'defaults.ttl',
      /clock-drift margin \(101 ms\)/,
    ],
    ['a negative quarantine', () => ({ redlock: { nodes: three(), quarantine: -1 } }), 'redlock.quarantine', /≥ 0/],
    [
      'an unknown redlock option',
      () => ({ redlock: { nodes: three(), retries: 3 } as never }),
      'redlock.retries',
      /unknown/,
    ],
  ];

  it.each(refused)('refuses %s with InvalidArgumentError, before connecting', async (_, options, argument, message) => {
    const before = await connectedClients();
    const error = await bootstrapError(options());
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe(argument);
    expect((error as Error).message).toMatch(message);
    expect(await connectedClients()).toBe(before);
  });

  it('refuses a bad quorum given through forRootAsync as well, and never connects the clients passed in', async () => {
    const client = new Redis(server.url, { lazyConnect: true });
    const error = await bootstrapError(
      LockModule.forRootAsync({ useFactory: () => ({ redlock: { nodes: [client, servers[1].url], quorum: 1 } }) }),
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('redlock.quorum');
    expect(client.status).toBe('wait');
    client.disconnect();
  });

  it('takes nodes behind Sentinel: which server they are, only the sentinels know (the quorum counts run_ids)', async () => {
    const behindSentinels = ['orders-a', 'orders-b', 'orders-c'].map(
      (name) => new Redis({ sentinels: [{ host: '127.0.0.1', port: 1 }], name, lazyConnect: true }),
    );
    try {
      const error = await bootstrapError({ redlock: { nodes: behindSentinels, quarantine: 0 }, logger: false });
      expect(error).toBeUndefined();
    } finally {
      behindSentinels.forEach((client) => client.disconnect());
    }
  });

  it('refuses a cluster client as a node', async () => {
    const cluster = new Cluster([{ host: '127.0.0.1', port: server.port }], { lazyConnect: true });
    const error = await bootstrapError({ redlock: { nodes: [cluster as never] } });
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toMatch(/not a cluster/);
    expect(cluster.status).toBe('wait');
    cluster.disconnect();
  });

  it('refuses the cluster option as a node', async () => {
    const node = { cluster: { nodes: [`redis://127.0.0.1:${server.port}`] } };
    const error = await bootstrapError({ redlock: { nodes: [node as never] } });
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ argument: 'redlock.nodes[0]', message: expect.stringMatching(/not a cluster/) });
  });

  it('boots with one node (quorum 1), three URLs or clients, and closes only the clients it made', async () => {
    const single = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redlock: { nodes: [server.url], quarantine: 0 }, logger: false })],
    }).compile();
    await single.close();

    const client = new Redis(`${servers[2].url}/3`);
    // Connected before the module starts: a client still connecting when the module closes is not 'ready' yet.
    expect(await client.ping()).toBe('PONG');
    const module = await Test.createTestingModule({
      imports: [
        LockModule.forRoot({
          redlock: { nodes: [server.url, `${servers[1].url}/1`, client], quorum: 3, driftFactor: 0, quarantine: 0 },
          logger: false,
        }),
      ],
    }).compile();
    await module.init();
    await module.close();
    expect(client.status).toBe('ready');
    expect(await client.ping()).toBe('PONG');
    client.disconnect();
  });
});
