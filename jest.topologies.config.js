import base from './jest.config.js';

/**
 * The topology specs (`npm run test:topologies`, run in band): Redis Cluster, Sentinel and
 * independent masters started from the redis-server binary, see test/support/topologies.ts.
 * Same settings as jest.config.js, whose regex does not match `*.topology-spec.ts`.
 */
const settings = { ...base, roots: ['<rootDir>/test'], testRegex: '\\.topology-spec\\.ts$', testTimeout: 120_000 };
// These specs run no child process on the built library: no build step (jest.config.js's
// globalSetup) until one does.
delete settings.globalSetup;

export default settings;
