import { Logger, type LoggerService } from '@nestjs/common';

/** What nest-lock writes to its log: details, notices and warnings, each under the context it was created with. */
export interface LockLogger {
  verbose(message: string): void;
  debug(message: string): void;
  log(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

const SILENT: LockLogger = {
  verbose: () => undefined,
  debug: () => undefined,
  log: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/**
 * The module's `logger` option as nest-lock uses it: Nest's own `Logger` when none was given (so
 * the application's logger settings apply), the user's `LoggerService` with `context` passed as
 * Nest passes it (last argument), or nothing at all with `false`. A logger that throws (a closed
 * stream, a failing transport), or whose promise rejects, loses that line: logging never changes what
 * the call that logs does.
 */
export function createLockLogger(option: LoggerService | false | undefined, context: string): LockLogger {
  if (option === false) return SILENT;
  const logger: { [Level in keyof LockLogger]: (message: string) => unknown } =
    option === undefined
      ? new Logger(context)
      : {
          verbose: (message): unknown => option.verbose?.(message, context),
          debug: (message): unknown => option.debug?.(message, context),
          log: (message): unknown => option.log(message, context),
          warn: (message): unknown => option.warn(message, context),
          error: (message): unknown => option.error(message, context),
        };
  return {
    verbose: (message) => tolerate(() => logger.verbose(message)),
    debug: (message) => tolerate(() => logger.debug(message)),
    log: (message) => tolerate(() => logger.log(message)),
    warn: (message) => tolerate(() => logger.warn(message)),
    error: (message) => tolerate(() => logger.error(message)),
  };
}

/** Writes a line; a logger that throws, or returns a promise that rejects (an async transport), loses it. */
function tolerate(write: () => unknown): void {
  try {
    const written = write();
    if (isThenable(written)) written.then(undefined, ignore);
  } catch {
    // The line is lost; the lease, the release or the timer that logged it goes on.
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

function ignore(): void {
  // A line an async logger could not write is lost, as a thrown one is.
}
