/**
 * Jest in ESM mode (NestJS 12 is ESM-only): run through `node --experimental-vm-modules`.
 * Jest 30 fails the test during which a promise rejection goes unhandled, so none slips by;
 * there is no `--forceExit`: a connection or timer left open keeps the run from ending.
 */
export default {
  testEnvironment: 'node',
  rootDir: '.',
  roots: ['<rootDir>/libs', '<rootDir>/apps', '<rootDir>/test'],
  testRegex: '\\.(spec|e2e-spec)\\.ts$',
  moduleFileExtensions: ['ts', 'js', 'json'],
  extensionsToTreatAsEsm: ['.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: '<rootDir>/tsconfig.json' }],
  },
  modulePathIgnorePatterns: ['<rootDir>/dist/', '<rootDir>/libs/lock/dist/'],
  moduleNameMapper: {
    '^nest-lock$': '<rootDir>/libs/lock/src/index.ts',
    '^nest-lock/terminus$': '<rootDir>/libs/lock/src/terminus/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  // Child processes (workers, demo instances) run the built code, as a user's app would: built on demand,
  // once per run, by the first spec that needs it (test/support/built.ts); the setup builds nothing.
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 30_000,
};
