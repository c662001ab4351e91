import { describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { useBuilt } from './support/built.js';
import { useRedisServer } from './support/redis-server.js';

const run = promisify(execFile);
const example = fileURLToPath(new URL('../examples/fenced-writes.mjs', import.meta.url));

/** The fencing guide's example, run as a user runs it (`npm run example:fencing`), on both stores. */
describe('examples/fenced-writes.mjs', () => {
  // The example imports the built library (libs/lock/dist), as `npm run example:fencing` builds it first.
  useBuilt('library');
  const server = useRedisServer();

  it.each([
    ['the memory store', {}],
    ['Redis', { REDIS_URL: 'set in the test' }],
  ])('refuses the late write of a holder that stalled past its lease, on %s', async (_store, env) => {
    const redisEnv = 'REDIS_URL' in env ? { REDIS_URL: server().url } : {};
    const { stdout } = await run(process.execPath, [example], {
      env: { ...process.env, REDIS_URL: '', ...redisEnv },
      timeout: 30_000,
    });
    const [a, b, wake, ledger] = stdout.trim().split('\n');
    const fenceOf = (line: string) => Number(/fence (\d+)/.exec(line)?.[1]);

    expect(fenceOf(b)).toBeGreaterThan(fenceOf(a));
    expect(b).toMatch(/writes: accepted$/);
    expect(wake).toMatch(/signal aborted \(LOCK_LOST, expired\); its write with fence \d+: rejected$/);
    expect(ledger).toBe('ledger entries: ["B"]');
  });
});

/** The leader-election guide's example (`npm run example:leader`): a frozen leader's late write refused by its term. */
describe('examples/leader-fenced-writes.mjs', () => {
  useBuilt('library');
  const server = useRedisServer();
  const leaderExample = fileURLToPath(new URL('../examples/leader-fenced-writes.mjs', import.meta.url));

  it("refuses the write a leader had decided on before it was frozen past its lease, by the successor's higher term", async () => {
    const { stdout } = await run(process.execPath, [leaderExample], {
      env: { ...process.env, REDIS_URL: server().url },
      timeout: 30_000,
    });
    const [a, b, wake, ledger] = stdout.trim().split('\n');
    const termOf = (line: string) => Number(/term (\d+)/.exec(line)?.[1]);

    expect(termOf(b)).toBeGreaterThan(termOf(a));
    expect(b).toMatch(/and writes: accepted$/);
    expect(wake).toMatch(
      /^A runs again \(still leading under term \d+: false, signal aborted true\); its write with term \d+: refused$/,
    );
    expect(ledger).toBe('ledger entries: ["B"]');
  });
});

/** The testing guide's example is the test file test/testing-example.e2e-spec.ts, word for word. */
describe("the testing guide's example", () => {
  it('is test/testing-example.e2e-spec.ts verbatim', () => {
    const guide = readFileSync(new URL('../docs/guides/testing.md', import.meta.url), 'utf8');
    const testFile = readFileSync(new URL('./testing-example.e2e-spec.ts', import.meta.url), 'utf8');
    const block = /<!-- testing-example:[^>]*-->\s*```ts\n([\s\S]*?)```/.exec(guide)?.[1];

    expect(block).toBe(testFile);
  });
});
