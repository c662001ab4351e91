/*
 * What a call came to, as a value a test can compare: its error, its error code, or what defining a class
 * threw. Each catches, so that a test states every outcome in one `expect`.
 */

/** What a call rejected with, or `'resolved'` (a lease it returned is given back). */
export async function errorOf(call: Promise<unknown>): Promise<unknown> {
  try {
    const value = await call;
    const lease = value as { unlock?: () => Promise<unknown>; release?: () => Promise<unknown> } | null;
    await (lease?.unlock ?? lease?.release)?.call(lease);
    return 'resolved';
  } catch (error) {
    return error;
  }
}

/** What a call came to: `'granted'` when it resolved, else the `code` of its error (e.g. `INVALID_ARGUMENT`). */
export async function outcomeOf(call: Promise<unknown>): Promise<string> {
  return call.then(
    () => 'granted',
    (error: unknown) => (error as { code?: string }).code ?? String(error),
  );
}

/** What `run` threw (defining a decorated class, say), or `undefined` when it returned. */
export function thrownBy(run: () => unknown): unknown {
  try {
    run();
    return undefined;
  } catch (error) {
    return error;
  }
}
