import base from './jest.config.js';

/**
 * The topology specs (`npm run test:topologies`, run in band): Redis Cluster, Sentinel and
 * independent masters started from the redis-server binary, see test/support/topologies.ts.
 * Same settings as jest.config.js, whose regex does not match `*.topology-spec.ts`.
 */
// Their worker processes run the built library, built on demand as in jest.config.js (test/support/built.ts).
const settings = {
  ...base,
  roots: ['<rootDir>/test'],
  testRegex: '\\.topology-spec\\.ts$',
  testTimeout: 120_000,
};

export default settings;
