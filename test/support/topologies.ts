/**
 * Real Redis topologies from the redis-server binary, for the topology specs
 * (`npm run test:topologies`): every process on a free port, stopped by PID, SIGKILLed when the
 * test process exits.
 */
export { RedisClusterTopology, type ClusterNode } from './cluster-topology.js';
export { IndependentMasters } from './independent-masters.js';
export { SentinelTopology } from './sentinel-topology.js';
export { type Address } from './topology-tools.js';
