import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Test } from '@nestjs/testing';
import { Cluster, Redis } from 'ioredis';
import { InvalidArgumentError, LockModule, type LockModuleOptions } from 'nest-lock';
import { RedisServer } from './support/redis-server.js';

/** What bootstrapping a module failed with; a module that boots is closed again. */
async function bootstrapError(imported: ReturnType<typeof LockModule.forRoot>): Promise<unknown> {
  try {
    const module = await Test.createTestingModule({ imports: [imported] }).compile();
    await module.close();
    return undefined;
  } catch (error) {
    return error;
  }
}

/**
 * `LockModule.forRoot({ redlock })`'s options are refused at bootstrap with `InvalidArgumentError`,
 * before any connection is opened: the server below never sees a client of the module.
 */
describe('redlock options', () => {
  let server: RedisServer;
  let admin: Redis;

  beforeAll(async () => {
    server = await RedisServer.start();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    admin.disconnect();
    await server.stop();
  });

  async function connectedClients(): Promise<number> {
    const info = await admin.info('clients');
    return Number(/connected_clients:(\d+)/.exec(info)![1]);
  }

  const three = () => [server.url, `${server.url}/1`, `${server.url}/2`];

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
      () => ({ redlock: { nodes: [server.url, server.url, `${server.url}/1`] } }),
      'redlock.nodes[1]',
      /twice/,
    ],
    [
      'a quorum of half',
      () => ({ redlock: { nodes: [...three(), `${server.url}/3`], quorum: 2 } }),
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
    const error = await bootstrapError(LockModule.forRoot(options()));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe(argument);
    expect((error as Error).message).toMatch(message);
    expect(await connectedClients()).toBe(before);
  });

  it('refuses a bad quorum given through forRootAsync as well, and never connects the clients passed in', async () => {
    const client = new Redis(server.url, { lazyConnect: true });
    const error = await bootstrapError(
      LockModule.forRootAsync({ useFactory: () => ({ redlock: { nodes: [client, server.url], quorum: 1 } }) }),
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('redlock.quorum');
    expect(client.status).toBe('wait');
    client.disconnect();
  });

  it('refuses a cluster client as a node', async () => {
    const cluster = new Cluster([{ host: '127.0.0.1', port: server.port }], { lazyConnect: true });
    const error = await bootstrapError(LockModule.forRoot({ redlock: { nodes: [cluster as never] } }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toMatch(/not a cluster/);
    expect(cluster.status).toBe('wait');
    cluster.disconnect();
  });

  it('refuses the cluster option as a node', async () => {
    const node = { cluster: { nodes: [`redis://127.0.0.1:${server.port}`] } };
    const error = await bootstrapError(LockModule.forRoot({ redlock: { nodes: [node as never] } }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ argument: 'redlock.nodes[0]', message: expect.stringMatching(/not a cluster/) });
  });

  it('boots with one node (quorum 1), three URLs or clients, and closes only the clients it made', async () => {
    const single = await Test.createTestingModule({
      imports: [LockModule.forRoot({ redlock: { nodes: [server.url], quarantine: 0 }, logger: false })],
    }).compile();
    await single.close();

    const client = new Redis(`${server.url}/3`);
    const module = await Test.createTestingModule({
      imports: [
        LockModule.forRoot({
          redlock: { nodes: [server.url, `${server.url}/1`, client], quorum: 3, driftFactor: 0, quarantine: 0 },
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
