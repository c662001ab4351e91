import {
  BadRequestException,
  type CallHandler,
  ConflictException,
  type ExecutionContext,
  type HttpException,
  HttpStatus,
  Inject,
  Injectable,
  type NestInterceptor,
  Optional,
  ServiceUnavailableException,
} from '@nestjs/common';
import { catchError, type Observable, throwError } from 'rxjs';
import { decoratorSettingsOf } from './decorator-errors.js';
import { LOCK_OPTIONS } from '../lock.constants.js';
import {
  InvalidArgumentError,
  LockBackendError,
  type LockError,
  LockTimeoutError,
  SemaphoreTimeoutError,
} from '../lock.errors.js';
import type { ResolvedModuleOptions } from '../lock-module.options.js';
import { DEFAULT_RETRY_AFTER_SECONDS, type LockErrorBody } from './http-options.js';

/**
 * Seconds a client is asked to wait before it tries a full semaphore again, by default.
 * @deprecated The default of every 503 is `DEFAULT_RETRY_AFTER_SECONDS`; set `retryAfter` on the
 * module or the decorator to change it.
 */
export const SEMAPHORE_RETRY_AFTER_SECONDS = DEFAULT_RETRY_AFTER_SECONDS;

/** The module options the interceptor reads. */
export type LockHttpOptions = Partial<Pick<ResolvedModuleOptions, 'retryAfter' | 'errorBody'>>;

/**
 * The HTTP side of `@WithLock` and `@Semaphore`: a lock held by someone else is 409 Conflict; no
 * permit, or a store that failed (Redis unreachable, `LockBackendError`), is 503 Service
 * Unavailable with `Retry-After`; a key template that resolved to nothing is 400 Bad Request; each
 * with a JSON body naming the error's `code` and the key or semaphore (shaped by the module's
 * `errorBody`, if set). The decorators apply it to the methods they wrap (the locking itself
 * happens in the method, so that it also works for provider methods and holds the lease for the
 * life of an Observable result). Only errors the decorators raised are mapped; the method's own
 * errors pass through as they are. Express and Fastify alike.
 *
 * Register it globally to map the decorators' errors from the services a handler calls, too:
 * as `APP_INTERCEPTOR`, or `app.useGlobalInterceptors(new LockInterceptor(app.get(LOCK_OPTIONS)))`.
 */
@Injectable()
export class LockInterceptor implements NestInterceptor {
  constructor(@Optional() @Inject(LOCK_OPTIONS) private readonly options: LockHttpOptions = {}) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http') return next.handle();
    return next.handle().pipe(catchError((error: unknown) => throwError(() => this.toHttp(error, context))));
  }

  protected toHttp(error: unknown, context: ExecutionContext): unknown {
    const settings = decoratorSettingsOf(error);
    if (settings === undefined) return error;
    const retryAfter = settings.retryAfter ?? this.options.retryAfter ?? DEFAULT_RETRY_AFTER_SECONDS;
    if (error instanceof LockTimeoutError) {
      const body = { ...defaultBody(HttpStatus.CONFLICT, 'Conflict', error), key: error.key };
      return new ConflictException(this.shape(body, error, context), { cause: error });
    }
    if (error instanceof SemaphoreTimeoutError) {
      setHeader(context.switchToHttp().getResponse(), 'Retry-After', String(retryAfter));
      const body = {
        ...defaultBody(HttpStatus.SERVICE_UNAVAILABLE, 'Service Unavailable', error),
        semaphore: error.semaphore,
        limit: error.limit,
      };
      return new ServiceUnavailableException(this.shape(body, error, context), { cause: error });
    }
    if (error instanceof LockBackendError) {
      setHeader(context.switchToHttp().getResponse(), 'Retry-After', String(retryAfter));
      const body = {
        ...defaultBody(HttpStatus.SERVICE_UNAVAILABLE, 'Service Unavailable', error),
        ...(error.key === undefined ? {} : { key: error.key }),
      };
      return new ServiceUnavailableException(this.shape(body, error, context), { cause: error });
    }
    if (error instanceof InvalidArgumentError) {
      const body = { ...defaultBody(HttpStatus.BAD_REQUEST, 'Bad Request', error), argument: error.argument };
      return new BadRequestException(this.shape(body, error, context), { cause: error });
    }
    return error;
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
        if (typeof (shaped as { then?: unknown }).then !== 'function') return shaped;
        // An async hook: its body comes too late, and its failure must not go unhandled.
        (shaped as Promise<unknown>).then(undefined, () => undefined);
      }
    } catch {
      // A hook that throws must not turn the answer into a 500.
    }
    // Anything but a JSON object leaves the default body.
    return body;
  }
}

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
