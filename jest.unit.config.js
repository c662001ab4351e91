import { availableParallelism } from 'node:os';
import base from './jest.config.js';

/**
 * The unit specs (`npm run test:unit`): `libs/lock/src/**\/*.spec.ts`, beside the code they test. They
 * start no Redis and no child process, so there is no global setup and nothing is built: a clean clone
 * runs them right after `npm ci`, in a few seconds. The transform and module mapping of jest.config.js.
 */
// eslint-disable-next-line @typescript-eslint/no-unused-vars
const { globalSetup, globalTeardown, ...shared } = base;

export default {
  ...shared,
  roots: ['<rootDir>/libs/lock/src'],
  testRegex: '\\.spec\\.ts$',
  // Their time is mostly timers (leases, renewals): two workers even on two cores (jest's default is one).
  maxWorkers: Math.max(2, availableParallelism() - 1),
};
