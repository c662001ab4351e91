import { Cluster, Redis } from 'ioredis';
import { RedisStore, RedlockStore } from '../support/kinds.js';
import { describeStoreContract } from '../support/store-contract.js';
import { IndependentMasters, RedisClusterTopology } from '../support/topologies.js';

// The store contract (test/support/store-contract.ts) on a Redis Cluster and on Redlock; the memory store
// and one Redis run it in test/store-contract.e2e-spec.ts.

describeStoreContract('a Redis Cluster of 3 primaries', async () => {
  const topology = await RedisClusterTopology.start({ primaries: 3, replicasPerPrimary: 0 });
  const nodes = topology.nodes.map(({ host, port }) => ({ host, port }));
  return {
    stores: async (count) =>
      Promise.all(
        Array.from({ length: count }, async () => {
          const cluster = new Cluster(nodes, { enableOfflineQueue: true });
          await new Promise((resolve) => cluster.once('ready', resolve));
          return new RedisStore(cluster, {
            keyPrefix: 'lock:',
            commandTimeout: 1_000,
            ownsClient: true,
            fenceCounterTtl: 3_600_000,
          });
        }),
      ),
    close: () => topology.stop(),
  };
});

describeStoreContract('Redlock over 3 independent masters', async () => {
  const masters = await IndependentMasters.start(3);
  return {
    stores: async (count) =>
      Array.from({ length: count }, () => {
        const clients = masters.urls.map((url) => new Redis(url));
        return new RedlockStore(clients, {
          keyPrefix: 'lock:',
          commandTimeout: 200,
          quorum: 2,
          driftFactor: 0.01,
          quarantine: 0,
          ownsClients: clients.map(() => true),
          fenceCounterTtl: 3_600_000,
        });
      }),
    close: () => masters.stop(),
    refuses: { readLocks: true, semaphores: true },
  };
});
