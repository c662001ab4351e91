/** The message of anything thrown, for logs and wrapped errors. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Base class of every error nest-lock raises; `code` is stable, the message is for humans. */
export abstract class LockError extends Error {
  abstract readonly code: string;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** No lock on `key` within `timeout`. */
export class LockTimeoutError extends LockError {
  readonly code = 'LOCK_TIMEOUT';

  constructor(
    readonly key: string,
    /** Milliseconds spent waiting before giving up. */
    readonly waited: number,
  ) {
    super(`Could not lock "${key}" within ${Math.round(waited)} ms: it is held by another owner`);
  }
}

/** No permit of semaphore `name` within `timeout`. */
export class SemaphoreTimeoutError extends LockError {
  readonly code = 'SEMAPHORE_TIMEOUT';

  constructor(
    /** The semaphore's name (`name` itself is the error class's, as on every Error). */
    readonly semaphore: string,
    readonly limit: number,
    /** Milliseconds spent waiting before giving up. */
    readonly waited: number,
  ) {
    super(`No permit of semaphore "${semaphore}" (limit ${limit}) within ${Math.round(waited)} ms`);
  }
}

/** A key, name or option that cannot be used; raised before the store is touched. */
export class InvalidArgumentError extends LockError {
  readonly code = 'INVALID_ARGUMENT';

  constructor(
    /** The argument or option at fault, e.g. `ttl` or `defaults.ratio`. */
    readonly argument: string,
    message: string,
  ) {
    super(`Invalid ${argument}: ${message}`);
  }
}

/** The store (Redis) could not be reached or did not answer in time. */
export class LockBackendError extends LockError {
  readonly code = 'BACKEND_UNAVAILABLE';

  constructor(
    message: string,
    /** The lock key or semaphore name of the operation that failed. */
    readonly key?: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}
