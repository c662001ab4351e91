import {
  BadRequestException,
  type CallHandler,
  ConflictException,
  type ExecutionContext,
  HttpStatus,
  Injectable,
  type NestInterceptor,
  ServiceUnavailableException,
} from '@nestjs/common';
import { catchError, type Observable, throwError } from 'rxjs';
import { isRaisedByDecorator } from './decorator-errors.js';
import { InvalidArgumentError, LockTimeoutError, SemaphoreTimeoutError } from './lock.errors.js';

/** Seconds a client is asked to wait before it tries a full semaphore again. */
export const SEMAPHORE_RETRY_AFTER_SECONDS = 1;

/**
 * The HTTP side of `@WithLock` and `@Semaphore`: a lock held by someone else is 409 Conflict,
 * no permit is 503 Service Unavailable with `Retry-After`, a key template that resolved to
 * nothing is 400 Bad Request, each with a JSON body naming the key or semaphore. The decorators
 * apply it to the methods they wrap (the locking itself happens in the method, so that it also
 * works for provider methods and holds the lease for the life of an Observable result). Only
 * errors the decorators raised are mapped; the method's own errors pass through as they are.
 *
 * Register it globally to map the decorators' errors from the services a handler calls, too.
 */
@Injectable()
export class LockInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http') return next.handle();
    return next.handle().pipe(catchError((error: unknown) => throwError(() => this.toHttp(error, context))));
  }

  protected toHttp(error: unknown, context: ExecutionContext): unknown {
    if (!isRaisedByDecorator(error)) return error;
    if (error instanceof LockTimeoutError) {
      const body = { statusCode: HttpStatus.CONFLICT, error: 'Conflict', code: error.code, message: error.message };
      return new ConflictException({ ...body, key: error.key }, { cause: error });
    }
    if (error instanceof SemaphoreTimeoutError) {
      setHeader(context.switchToHttp().getResponse(), 'Retry-After', String(SEMAPHORE_RETRY_AFTER_SECONDS));
      const body = { statusCode: HttpStatus.SERVICE_UNAVAILABLE, error: 'Service Unavailable', code: error.code };
      return new ServiceUnavailableException(
        { ...body, message: error.message, semaphore: error.semaphore, limit: error.limit },
        { cause: error },
      );
    }
    if (error instanceof InvalidArgumentError) {
      const body = {
        statusCode: HttpStatus.BAD_REQUEST,
        error: 'Bad Request',
        code: error.code,
        message: error.message,
      };
      return new BadRequestException({ ...body, argument: error.argument }, { cause: error });
    }
    return error;
  }
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
