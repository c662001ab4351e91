import { Redis } from 'ioredis';
import { MemoryStore, RedisStore } from './support/kinds.js';
import { RedisServer } from './support/redis-server.js';
import { describeStoreContract } from './support/store-contract.js';

// The store contract on the two stores of one machine; a Redis Cluster and Redlock run it in
// test/topologies/store-contract.topology-spec.ts.

describeStoreContract('the memory store', async () => {
  const store = new MemoryStore();
  return { stores: async (count) => Array.from({ length: count }, () => store), close: async () => undefined };
});

describeStoreContract('one Redis', async () => {
  const server = await RedisServer.start();
  const clients: Redis[] = [];
  return {
    stores: async (count) =>
      Array.from({ length: count }, () => {
        const client = new Redis(server.url);
        clients.push(client);
        return new RedisStore(client, {
          keyPrefix: 'lock:',
          commandTimeout: 1_000,
          ownsClient: true,
          fenceCounterTtl: 3_600_000,
        });
      }),
    close: () => server.stop(),
  };
});
