import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The environment variable that names this jest run's build directory (test/support/built.ts). */
export const BUILD_DIR_VARIABLE = 'NEST_LOCK_TEST_BUILDS';

/**
 * Jest global setup: builds nothing. It makes an empty directory for this run, where the specs that
 * start child processes on built code agree on who builds it (test/support/built.ts), and names it in
 * the environment, which the jest workers, started after it, inherit. Removed by global-teardown.ts.
 */
export default function globalSetup(): void {
  process.env[BUILD_DIR_VARIABLE] = mkdtempSync(join(tmpdir(), 'nest-lock-builds-'));
}
