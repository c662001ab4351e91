/** The message of anything thrown, for logs and wrapped errors; never throws itself (whatever was thrown). */
export function errorMessage(error: unknown): string {
  try {
    return error instanceof Error ? String(error.message) : String(error);
  } catch {
    // An object without a prototype, a revoked Proxy, a message getter or toString that throws.
    return 'an error that cannot be shown as text';
  }
}

/**
 * Every `code` a `LockError` carries: stable across versions, for `switch` and for clients of the
 * HTTP answers, where the body names it.
 */
export type LockErrorCode =
  | 'LOCK_TIMEOUT'
  | 'SEMAPHORE_TIMEOUT'
  | 'INVALID_ARGUMENT'
  | 'BACKEND_UNAVAILABLE'
  | 'BACKEND_MISCONFIGURED'
  | 'BACKEND_ERROR'
  | 'LOCK_UPGRADE'
  | 'LOCK_LOST'
  | 'LOAD_TIMEOUT'
  | 'NOT_CONFIGURED';

/**
 * How an error answers the HTTP request it surfaced in (`LockInterceptor`): the status, whether the
 * client is told to try again later (`Retry-After`), and the fields of the body besides `statusCode`,
 * `error`, `code` and `message`.
 */
export interface HttpAnswer {
  readonly status: 400 | 409 | 500 | 503;
  readonly retryLater: boolean;
  readonly fields: Readonly<Record<string, string | number>>;
  /** What the body says instead of the error's message: a store's address and state are for the log. */
  readonly message?: string;
}

/** The answer of an error that is the code's or the deployment's fault: a 500, logged. */
const SERVER_FAULT: HttpAnswer = { status: 500, retryLater: false, fields: {} };

/** Base class of every error nest-lock raises; `code` is stable, the message is for humans. */
export abstract class LockError extends Error {
  abstract readonly code: LockErrorCode;

  /** How it answers an HTTP request it surfaced in: a 500 unless the kind of error says otherwise. */
  get httpAnswer(): HttpAnswer {
    return SERVER_FAULT;
  }

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }

  /** `LockBackendError [BACKEND_UNAVAILABLE]: …`: a log line built from the error as text shows its code. */
  override toString(): string {
    return `${this.name} [${this.code}]: ${this.message}`;
  }
}

/** `at once` for a single attempt (`timeout: 0`), else `within <timeout> ms`. */
function withinTimeout(timeout: number): string {
  return timeout === 0 ? 'at once' : `within ${timeout} ms`;
}

/** No lock on `key` within `timeout`. */
export class LockTimeoutError extends LockError {
  readonly code = 'LOCK_TIMEOUT';
  /** Whole milliseconds spent waiting before giving up. */
  readonly waited: number;

  constructor(
    readonly key: string,
    waited: number,
    /** The timeout the caller waited with; `0`: a single attempt. */
    readonly timeout: number = Math.round(waited),
    /**
     * Why the store refused, when another owner was not the reason (Redlock's quarantine, unacknowledged
     * replicas); absent when another owner holds it.
     */
    readonly refusal?: string,
  ) {
    super(`Could not lock "${key}" ${withinTimeout(timeout)}: ${refusal ?? 'it is held by another owner'}`);
    this.waited = Math.round(waited);
  }

  /** 409 Conflict: the lock is held by another owner. */
  override get httpAnswer(): HttpAnswer {
    return { status: 409, retryLater: false, fields: { key: this.key } };
  }
}

/** No permit of semaphore `name` within `timeout`. */
export class SemaphoreTimeoutError extends LockError {
  readonly code = 'SEMAPHORE_TIMEOUT';
  /** Whole milliseconds spent waiting before giving up. */
  readonly waited: number;

  constructor(
    /** The semaphore's name (`name` itself is the error class's, as on every Error). */
    readonly semaphore: string,
    readonly limit: number,
    waited: number,
    /** The timeout the caller waited with; `0`: a single attempt. */
    readonly timeout: number = Math.round(waited),
    /** Why the store refused, when held permits were not the reason (unacknowledged replicas); absent when all are held. */
    readonly refusal?: string,
  ) {
    super(
      `No permit of semaphore "${semaphore}" (limit ${limit}) ${withinTimeout(timeout)}: ${refusal ?? 'all are held'}`,
    );
    this.waited = Math.round(waited);
  }

  /** 503 with `Retry-After`: every permit is held, one may come free. */
  override get httpAnswer(): HttpAnswer {
    return { status: 503, retryLater: true, fields: { semaphore: this.semaphore, limit: this.limit } };
  }
}

/** A key, name or option that cannot be used; raised before the store is touched. */
export class InvalidArgumentError extends LockError {
  readonly code = 'INVALID_ARGUMENT';

  constructor(
    /** The argument or option at fault, e.g. `ttl` or `defaults.ratio`. */
    readonly argument: string,
    message: string,
    /** What went wrong while reading it: the error a key function or a getter threw. */
    options?: ErrorOptions,
  ) {
    super(`Invalid ${argument}: ${message}`, options);
  }

  /**
   * A 500 with its `argument`: bad options are the code's fault. (`LockInterceptor` answers 400 for a key
   * a decorator made of the request's input: the client's fault.)
   */
  override get httpAnswer(): HttpAnswer {
    return { status: 500, retryLater: false, fields: { argument: this.argument } };
  }
}

/**
 * The store failed. `BACKEND_UNAVAILABLE`: Redis could not be reached, did not answer in time, or
 * answered with an error that passes (a failover, a load); waits retry it until their deadline.
 * `BACKEND_MISCONFIGURED`: Redis refuses this client's configuration — a wrong password or user
 * (`WRONGPASS`, `NOAUTH`), a user without the rights (`NOPERM`), a database that does not exist —
 * raised at once, until the configuration is fixed. `BACKEND_ERROR`: Redis answered with another
 * error that retrying cannot fix (`WRONGTYPE`, a script error); raised at once.
 */
export class LockBackendError extends LockError {
  readonly code: 'BACKEND_UNAVAILABLE' | 'BACKEND_MISCONFIGURED' | 'BACKEND_ERROR';

  constructor(
    message: string,
    /** The lock key or semaphore name of the operation that failed. */
    readonly key?: string,
    options?: ErrorOptions & { code?: LockBackendError['code']; retryable?: boolean },
  ) {
    super(message, options);
    this.code = options?.code ?? 'BACKEND_UNAVAILABLE';
    this.retryable = options?.retryable ?? this.code === 'BACKEND_UNAVAILABLE';
  }

  /** Whether trying again later may succeed (not for a closed store, a misconfiguration, nor a `BACKEND_ERROR`). */
  private readonly retryable: boolean;

  get transient(): boolean {
    return this.retryable;
  }

  /**
   * 503 with `Retry-After` while the store is away (its address and state are for the log, not the
   * body); a store that refuses this client, or answers an error, is the deployment's fault: 500.
   */
  override get httpAnswer(): HttpAnswer {
    const fields: Record<string, string> = this.key === undefined ? {} : { key: this.key };
    if (this.code !== 'BACKEND_UNAVAILABLE') return { status: 500, retryLater: false, fields };
    return { status: 503, retryLater: true, fields, message: 'The lock store is unavailable; try again later' };
  }
}

/**
 * A write lock asked for inside a call chain that holds the same key to read (`withLock`,
 * `@WithLock`): an upgrade, refused at once. Waiting would deadlock — the write waits for the chain's
 * own read, which ends only after the write — and two chains upgrading together would each wait for
 * the other's read. Take the write lock first, or leave the read before.
 */
export class LockUpgradeError extends LockError {
  readonly code = 'LOCK_UPGRADE';

  constructor(readonly key: string) {
    super(
      `lock "${key}" was asked for to write inside a call chain that holds it to read: an upgrade would ` +
        'deadlock; take it to write from the start, or leave the read lock first',
    );
  }
}

/**
 * A held lease was lost: its renewal (or the draw of its fence) found it gone or taken by another
 * owner (`taken`), or its deadline passed before it could be renewed (`expired`). The lease's
 * `signal` aborts with it. `fence()` on a lease its holder released rejects with it too (`released`).
 */
export class LockLostError extends LockError {
  readonly code = 'LOCK_LOST';

  constructor(
    /** The kind of lease: `lock`, `semaphore`. */
    readonly kind: string,
    /** The lock key or semaphore name. */
    readonly key: string,
    readonly token: string,
    readonly reason: 'taken' | 'expired' | 'released',
    /** The lease as the message's subject: `The lock "k"`, `A permit of semaphore "s"`. */
    subject = `The ${kind} "${key}"`,
    /** The lease's fence, when one was drawn. */
    readonly fence?: number,
  ) {
    super(
      `${subject} ${reason === 'released' ? 'is not held' : 'was lost'}${fence ? ` (fence ${fence})` : ''}: ${WHY[reason]}`,
    );
  }

  /** 503 with `Retry-After`: the exclusive section could not be kept; trying again later may succeed. */
  override get httpAnswer(): HttpAnswer {
    return { status: 503, retryLater: true, fields: { key: this.key } };
  }
}

const WHY: Record<LockLostError['reason'], string> = {
  taken: 'it was found gone or held by another owner',
  expired: 'its lease ran out before it could be renewed',
  released: 'its holder released it',
};

/**
 * No value for a single-flight `key` within the caller's `timeout`: the load, by this process or
 * another, goes on for the callers still waiting.
 */
export class LoadTimeoutError extends LockError {
  readonly code = 'LOAD_TIMEOUT';
  /** Whole milliseconds spent waiting before giving up. */
  readonly waited: number;

  constructor(
    readonly key: string,
    waited: number,
    readonly timeout: number,
  ) {
    super(`No value for "${key}" ${withinTimeout(timeout)}: its load has not finished`);
    this.waited = Math.round(waited);
  }

  /** 503 with `Retry-After`: the value is on its way; trying again later may find it. */
  override get httpAnswer(): HttpAnswer {
    return { status: 503, retryLater: true, fields: { key: this.key } };
  }
}

/**
 * The error a single-flight loader threw in another process, as the callers that waited for it
 * there receive it: its `name`, `message`, `code` and HTTP `status` (an `HttpException`'s), kept
 * across processes, and an `HttpException`'s response body; not one of nest-lock's own errors (the
 * loader's code raised it).
 */
export class LoaderError extends Error {
  constructor(
    /** The loader's error's name (`NotFoundException`, `TypeError`, …). */
    name: string,
    message: string,
    /** Its `code`, when it had one (a string or a number). */
    readonly code?: string | number,
    /** The HTTP status its own process answered with: an `HttpException`'s, or a nest-lock error's 409 / 503. */
    readonly status?: number,
    /** An `HttpException`'s response body (`getResponse()`), as JSON carried it. */
    readonly response?: unknown,
  ) {
    super(message);
    this.name = name;
  }
}

/**
 * nest-lock is not set up where it is used: a class with `@WithLock` / `@Semaphore` that Nest did not
 * create, in a process where no `LockModule` runs (or several do, and the class cannot tell which).
 */
export class LockNotConfiguredError extends LockError {
  readonly code = 'NOT_CONFIGURED';
}

/** Every error nest-lock raises, as a union: narrowed by its `code` (`isLockError`). */
export type AnyLockError =
  | LockTimeoutError
  | SemaphoreTimeoutError
  | InvalidArgumentError
  | LockBackendError
  | LockUpgradeError
  | LockLostError
  | LoadTimeoutError
  | LockNotConfiguredError;

/**
 * Whether `error` is one of nest-lock's, as the union of them: then `error.code === 'LOCK_TIMEOUT'`
 * tells TypeScript it is a `LockTimeoutError` (with its `key`), and a `switch` over the code is checked.
 */
export function isLockError(error: unknown): error is AnyLockError {
  return error instanceof LockError;
}
