import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';
import importX from 'eslint-plugin-import-x';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/**
 * The library's layers, top to bottom (docs/ARCHITECTURE.md). A file may import its own layer and the
 * layers below it, never one above: Nest glue → services → the lease core → kinds → stores, with
 * telemetry beside the core and the leaf modules (options, errors, logger, tokens, util) under all.
 */
const src = 'libs/lock/src';
const layers = {
  entry: [`${src}/index.ts`, `${src}/terminus/**`],
  glue: [
    `${src}/lock.module.ts`,
    `${src}/lock.module-definition.ts`,
    `${src}/lock-module.options.ts`,
    `${src}/decorators/**`,
    `${src}/http/**`,
  ],
  // Every `*.service.ts` at the top: a new facade is in its layer without a word here.
  services: [
    `${src}/*.service.ts`,
    `${src}/held-*.ts`,
    `${src}/local-semaphore*.ts`,
    `${src}/live-services.ts`,
    // Leader election and single-flight loads: services built on LockService's public API.
    `${src}/leader/**`,
    `${src}/single-flight/**`,
  ],
  core: [`${src}/lease/**`],
  kinds: [`${src}/kinds/**`],
  stores: [`${src}/store/**`],
  telemetry: [`${src}/telemetry/**`],
  leaf: [
    `${src}/options/**`,
    `${src}/util/**`,
    `${src}/lock.errors.ts`,
    `${src}/lock-logger.ts`,
    `${src}/lock.constants.ts`,
  ],
};
/** Layers each layer must not import. */
const forbidden = {
  glue: ['entry'],
  services: ['entry', 'glue'],
  core: ['entry', 'glue', 'services'],
  kinds: ['entry', 'glue', 'services', 'core', 'telemetry'],
  stores: ['entry', 'glue', 'services', 'core', 'kinds', 'telemetry'],
  telemetry: ['entry', 'glue', 'services', 'core', 'kinds', 'stores'],
  leaf: ['entry', 'glue', 'services', 'core', 'kinds', 'stores', 'telemetry'],
};
// One zone per target and forbidden path: a zone's `from` may not mix files and globs.
const layerZones = Object.entries(forbidden).flatMap(([layer, above]) =>
  layers[layer].flatMap((target) =>
    above.flatMap((name) =>
      layers[name].map((from) => ({
        target,
        from,
        message: `the ${layer} layer must not import the ${name} layer (docs/ARCHITECTURE.md, "Layers")`,
      })),
    ),
  ),
);
// The core is written against the kind interface alone: a new kind of lease needs no edit to it.
layerZones.push({
  target: `${src}/lease/**`,
  from: [`${src}/kinds/*.kind.ts`, `${src}/kinds/*.scripts.ts`],
  message: 'the lease core knows kinds of lease by their interface (kinds/lease-kind.ts) only',
});
// …and stores by their contract: a new store needs no edit to it either.
layerZones.push({
  target: `${src}/lease/**`,
  from: [`${src}/store/memory/**`, `${src}/store/redis/**`, `${src}/store/redlock/**`],
  message: 'the lease core knows stores by their contract (store/store.ts) only',
});

export default tseslint.config(
  { ignores: ['**/dist/', 'node_modules/', 'coverage/'] },
  eslint.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: globals.node,
      parserOptions: {
        projectService: { allowDefaultProject: ['*.js', 'test/support/workers/*.mjs'] },
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      // `async` without `await` is how a method keeps its promise contract: a throw becomes a rejection.
      '@typescript-eslint/require-await': 'off',
      // An aborted wait rejects with `signal.reason`, whatever the caller made it.
      '@typescript-eslint/prefer-promise-reject-errors': 'off',
    },
  },
  {
    files: [`${src}/**/*.ts`],
    // The library's own code: its unit specs may use what they test from any layer.
    ignores: ['**/*.spec.ts'],
    plugins: { 'import-x': importX },
    settings: {
      ...importX.flatConfigs.typescript.settings,
      'import-x/resolver': undefined,
      'import-x/resolver-next': [createTypeScriptImportResolver({ project: 'tsconfig.json' })],
    },
    rules: {
      'import-x/no-cycle': 'error',
      'import-x/no-restricted-paths': ['error', { zones: layerZones }],
    },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    ...tseslint.configs.disableTypeChecked,
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  prettier,
);
