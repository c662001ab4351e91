import {
  type CallHandler,
  type ExecutionContext,
  HttpException,
  Inject,
  Injectable,
  type NestInterceptor,
  Optional,
} from '@nestjs/common';
import { catchError, type Observable, throwError } from 'rxjs';
import { isKeyTemplateFault } from '../decorators/key-template.js';
import { createLockLogger, type LockLogger } from '../lock-logger.js';
import { LOCK_OPTIONS } from '../lock.constants.js';
import { type HttpAnswer, InvalidArgumentError, LockError } from '../lock.errors.js';
import type { ResolvedModuleOptions } from '../lock-module.options.js';
import { type DecoratorHttpSettings, decoratorSettingsOf } from './decorator-errors.js';
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
 * The answer is the error's own (`LockError.httpAnswer`: a held lock 409; no permit, the store away or
 * a lease lost 503 with `Retry-After`; anything else 500, logged in one line), but for a key a decorator
 * made of the request's input, which is the client's fault: 400.
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
    const answer = fromRequest(error, settings) ? clientFault(error) : error.httpAnswer;
    if (answer.retryLater) {
      const retryAfter = settings?.retryAfter ?? this.options.retryAfter ?? DEFAULT_RETRY_AFTER_SECONDS;
      setHeader(context.switchToHttp().getResponse(), 'Retry-After', String(retryAfter));
    }
    const body: LockErrorBody = {
      statusCode: answer.status,
      error: REASONS[answer.status],
      code: error.code,
      message: answer.message ?? error.message,
      ...answer.fields,
    };
    if (answer.status === 500) {
      // The code's or the deployment's fault: the client learns no more than from any 500, the log says what.
      const { method, url } = context.switchToHttp().getRequest<{ method?: string; url?: string }>() ?? {};
      this.logger.error(`${method ?? ''} ${url ?? ''}: ${String(error)}`.trim());
      body.message = 'Internal server error';
    }
    return new HttpException(this.shape(body, error, context), answer.status, { cause: error });
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

/** The status line's reason of each answer. */
const REASONS: Record<HttpAnswer['status'], string> = {
  400: 'Bad Request',
  409: 'Conflict',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** A key a decorator made of the method's arguments, which came from the request: the client's input. */
function fromRequest(error: LockError, settings: DecoratorHttpSettings | undefined): error is InvalidArgumentError {
  return error instanceof InvalidArgumentError && settings !== undefined && !isKeyTemplateFault(error);
}

function clientFault(error: InvalidArgumentError): HttpAnswer {
  return { status: 400, retryLater: false, fields: { argument: error.argument } };
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
