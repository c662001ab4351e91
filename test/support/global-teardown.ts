import { rmSync } from 'node:fs';

/** Jest global teardown: removes the run's build directory (global-setup.ts); what was built stays. */
export default function globalTeardown(): void {
  const directory = process.env.NEST_LOCK_TEST_BUILDS;
  if (directory) rmSync(directory, { recursive: true, force: true });
}
