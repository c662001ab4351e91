import {
  BadRequestException,
  type CallHandler,
  ConflictException,
  type ExecutionContext,
  HttpException,
  HttpStatus,
  Inject,
  Injectable,
  InternalServerErrorException,
  type NestInterceptor,
  Optional,
  ServiceUnavailableException,
} from '@nestjs/common';
import { catchError, type Observable, throwError } from 'rxjs';
import { isKeyTemplateFault } from '../decorators/key-template.js';
import { createLockLogger, type LockLogger } from '../lock-logger.js';
import { LOCK_OPTIONS } from '../lock.constants.js';
import {
  InvalidArgumentError,
  LockBackendError,
  LockError,
  LockLostError,
  LockTimeoutError,
  SemaphoreTimeoutError,
} from '../lock.errors.js';
import type { ResolvedModuleOptions } from '../lock-module.options.js';
import { decoratorSettingsOf } from './decorator-errors.js';
import { DEFAULT_RETRY_AFTER_SECONDS, type LockErrorBody } from './http-options.js';

/** The module options the interceptor reads. */
export type LockHttpOptions = Partial<
  Pick<ResolvedModuleOptions, 'httpErrors' | 'retryAfter' | 'errorBody' | 'logger'>
>;

/**
 * nest-lock's errors as HTTP answers, wherever they surface in a request: thrown by `@WithLock` /
 * `@Semaphore` on the route handler or on a provider method it calls, or by `LockService` /
 * `SemaphoreService` called by hand. `LockModule` registers it globally (`APP_INTERCEPTOR`) unless
 * its `httpErrors` option is `false`. Express and Fastify alike; other contexts (microservices,
 * websockets) and errors that are not nest-lock's pass through untouched.
 *
 * | error                                                              | answer                      |
 * | ------------------------------------------------------------------ | --------------------------- |
 * | `LockTimeoutError` (the lock is held)                              | 409 Conflict                |
 * | `SemaphoreTimeoutError`, `LockBackendError` `BACKEND_UNAVAILABLE`, `LockLostError` | 503 with `Retry-After` |
 * | `InvalidArgumentError` of a decorator's key, made of the request's input | 400 Bad Request       |
 * | any other (`BACKEND_MISCONFIGURED`, a template naming what its argument lacks, bad options) | 500, logged in one line |
 *
 * Each body is JSON naming the error's `code` (shaped by the module's `errorBody`, if set); the 503 of
 * an unreachable store and a 500 say no more than that (the store's address and the code's fault
 * are for the log).
 */
@Injectable()
export class LockInterceptor implements NestInterceptor {
  private readonly logger: LockLogger;

  constructor(@Optional() @Inject(LOCK_OPTIONS) private readonly options: LockHttpOptions = {}) {
    this.logger = createLockLogger(options.logger, 'LockInterceptor');
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http' || this.options.httpErrors === false) return next.handle();
    return next.handle().pipe(catchError((error: unknown) => throwError(() => this.toHttp(error, context))));
  }

  protected toHttp(error: unknown, context: ExecutionContext): unknown {
    if (!(error instanceof LockError)) return error;
    const settings = decoratorSettingsOf(error);
    const retryAfter = settings?.retryAfter ?? this.options.retryAfter ?? DEFAULT_RETRY_AFTER_SECONDS;
    const unavailable = (body: LockErrorBody) => {
      setHeader(context.switchToHttp().getResponse(), 'Retry-After', String(retryAfter));
      return new ServiceUnavailableException(this.shape(body, error, context), { cause: error });
    };
    if (error instanceof LockTimeoutError) {
      const body = { ...defaultBody(HttpStatus.CONFLICT, 'Conflict', error), key: error.key };
      return new ConflictException(this.shape(body, error, context), { cause: error });
    }
    if (error instanceof SemaphoreTimeoutError) {
      const body = defaultBody(HttpStatus.SERVICE_UNAVAILABLE, 'Service Unavailable', error);
      return unavailable({ ...body, semaphore: error.semaphore, limit: error.limit });
    }
    if (error instanceof LockBackendError && error.code === 'BACKEND_UNAVAILABLE') {
      // Its message names the server and why it is away: for the log (the module logs the outage), not
      // for clients.
      const body = defaultBody(HttpStatus.SERVICE_UNAVAILABLE, 'Service Unavailable', error);
      return unavailable({ ...body, message: STORE_AWAY, ...(error.key === undefined ? {} : { key: error.key }) });
    }
    if (error instanceof LockLostError) {
      return unavailable({
        ...defaultBody(HttpStatus.SERVICE_UNAVAILABLE, 'Service Unavailable', error),
        key: error.key,
      });
    }
    // A key a decorator made of the method's arguments, which came from the request: the client's input.
    if (error instanceof InvalidArgumentError && settings !== undefined && !isKeyTemplateFault(error)) {
      const body = { ...defaultBody(HttpStatus.BAD_REQUEST, 'Bad Request', error), argument: error.argument };
      return new BadRequestException(this.shape(body, error, context), { cause: error });
    }
    // The code's or the deployment's fault: the client learns no more than from any 500, the log says what.
    const { method, url } = context.switchToHttp().getRequest<{ method?: string; url?: string }>() ?? {};
    this.logger.error(`${method ?? ''} ${url ?? ''}: ${String(error)}`.trim());
    const body = defaultBody(HttpStatus.INTERNAL_SERVER_ERROR, 'Internal Server Error', error);
    return new InternalServerErrorException(this.shape({ ...body, message: 'Internal server error' }, error, context), {
      cause: error,
    });
  }

  private shape(
    body: LockErrorBody,
    error: LockError,
    context: ExecutionContext,
  ): ConstructorParameters<typeof HttpException>[0] {
    if (!this.options.errorBody) return body;
    try {
      const shaped: unknown = this.options.errorBody(body, error, context);
      if (typeof shaped === 'object' && shaped !== null) {
        if (typeof (shaped as { then?: unknown }).then !== 'function') return shaped as Record<string, unknown>;
        // An async hook: its body comes too late, and its failure must not go unhandled.
        (shaped as Promise<unknown>).then(undefined, () => undefined);
      }
    } catch {
      // A hook that throws must not turn the answer into another one.
    }
    // Anything but a JSON object leaves the default body.
    return body;
  }
}

/** What a client is told of a store that cannot be reached. */
const STORE_AWAY = 'The lock store is unavailable; try again later';

function defaultBody(statusCode: number, reason: string, error: LockError): LockErrorBody {
  return { statusCode, error: reason, code: error.code, message: error.message };
}

/** Express responses have `setHeader`, Fastify replies `header`. */
function setHeader(response: unknown, name: string, value: string): void {
  const target = response as {
    header?: (n: string, v: string) => unknown;
    setHeader?: (n: string, v: string) => unknown;
  };
  if (typeof target.header === 'function') target.header(name, value);
  else target.setHeader?.(name, value);
}
