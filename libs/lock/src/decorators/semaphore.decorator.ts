import { InvalidArgumentError } from '../lock.errors.js';
import { DEFAULT_LEASE, resolveLease, type SemaphoreOptions, validateKey, validateLimit } from '../lock.options.js';
import { type HeldPermit, type LocalPermit, SemaphoreService } from '../semaphore.service.js';
import { type GuardDecorator, guardMethod, type MethodGuard } from './guarded-method.js';

export interface SemaphoreDecoratorOptions extends SemaphoreOptions {
  /** Semaphore name; default `ClassName.methodName`. */
  name?: string;
  /** `'distributed'` (default): across every process on the store; `'local'`: inside this process. */
  scope?: 'distributed' | 'local';
}

/**
 * At most `limit` calls of the method run at once — across every process (default) or inside
 * this one (`scope: 'local'`) — on controller route handlers and provider methods alike.
 * On HTTP routes, no permit within `timeout` answers 503 Service Unavailable with `Retry-After`.
 *
 * @example
 * ＠Semaphore(2, { timeout: 0 })
 * createReport() { … }
 */
export function Semaphore(limit: number, options: SemaphoreDecoratorOptions = {}): GuardDecorator {
  validateLimit(limit);
  const { name, scope = 'distributed', ...leaseOptions } = options;
  if (name !== undefined) validateKey('name', name);
  if (scope !== 'distributed' && scope !== 'local') {
    throw new InvalidArgumentError('scope', `must be 'distributed' or 'local', got ${String(scope)}`);
  }
  resolveLease(DEFAULT_LEASE, leaseOptions);

  return (target, propertyKey, descriptor) => {
    const semaphoreName = name ?? `${target.constructor.name}.${String(propertyKey)}`;
    guardMethod(
      {
        decorator: '@Semaphore',
        service: SemaphoreService,
        guardFor: (semaphores): MethodGuard<HeldPermit | LocalPermit> =>
          scope === 'local'
            ? {
                kind: 'local-semaphore',
                id: semaphoreName,
                acquire: () => semaphores.acquireLocal(semaphoreName, limit, leaseOptions),
                release: (permit) => permit.release(),
              }
            : {
                kind: 'semaphore',
                id: semaphoreName,
                // acquire() always resolves with a HeldPermit; the narrower type lets the chain see whether it is held.
                acquire: (signal) =>
                  semaphores.acquire(semaphoreName, limit, {
                    ...leaseOptions,
                    signal: signal ?? leaseOptions.signal,
                  }) as Promise<HeldPermit>,
                release: (permit) => permit.release(),
              },
      },
      target,
      propertyKey,
      descriptor,
    );
  };
}
