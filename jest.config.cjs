/**
 * NestJS 12 ships ES modules only, so jest runs in its native ESM mode
 * (`--experimental-vm-modules`, set by `npm test`) and ts-jest emits ESM.
 * @type {import('jest').Config}
 */
module.exports = {
  testEnvironment: 'node',
  rootDir: '.',
  moduleFileExtensions: ['ts', 'js', 'json'],
  extensionsToTreatAsEsm: ['.ts'],
  testRegex: '(lib|test|sample-app)/.*\\.(spec|e2e-spec)\\.ts$',
  // Sources import './x.js' as Node's ESM resolution wants; jest resolves the .ts file.
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  // Types are checked once by `tsc` in `npm test`; jest only transpiles.
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json', useESM: true }],
  },
  globalSetup: '<rootDir>/test/support/global-setup.mjs',
  globalTeardown: '<rootDir>/test/support/global-teardown.mjs',
  testTimeout: 60000,
  // A worker is started afresh, between test files, once it holds more than this: in ESM mode
  // each file's modules stay in the worker's heap, and the long suites (two workers, some 250
  // files that each start Nest apps) reached 4 GB a worker and ran three times slower, their
  // timing cases failing for it.
  workerIdleMemoryLimit: '1500MB',
};
