/** Injection token of the validated module options, every default filled in (`ResolvedModuleOptions`). */
export const LOCK_OPTIONS = Symbol('LOCK_OPTIONS');

/** How long a shutdown waits for routines in flight (locked, or `@LeaderOnly`) to finish. */
export const SHUTDOWN_GRACE_MS = 5_000;
