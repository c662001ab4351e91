import { errorMessage, InvalidArgumentError, LoaderError } from '../lock.errors.js';
import type { ResolvedSingleFlightOptions } from './single-flight-options.js';

/*
 * What a load leaves for the processes that waited for it: one text, its first character saying what
 * follows — `v` a serialized value, `u` undefined (a loader that returned nothing), `e` the loader's
 * error (JSON: name, message, code, status), `x` why the value could not travel (JSON: message).
 */

/** The record of a value the loader returned. */
export function valueRecord<T>(key: string, value: T, settings: ResolvedSingleFlightOptions<T>): string {
  if (value === undefined) return 'u';
  let text: unknown;
  try {
    text = settings.serialize(value);
  } catch (error) {
    return refusal(`the value of "${key}" cannot be serialized: ${errorMessage(error)}`);
  }
  if (typeof text !== 'string') return refusal(`serialize must return a string for "${key}", got ${typeof text}`);
  const bytes = Buffer.byteLength(text);
  if (bytes > settings.maxValueBytes) {
    return refusal(
      `the value of "${key}" is ${bytes} bytes serialized, above maxValueBytes (${settings.maxValueBytes}): only the loader's process got it`,
    );
  }
  return `v${text}`;
}

/** The record of the error the loader threw: what a caller in another process needs to tell it. */
export function errorRecord(error: unknown): string {
  const message = errorMessage(error);
  try {
    const { name, code, status } = (typeof error === 'object' && error !== null ? error : {}) as {
      name?: unknown;
      code?: unknown;
      status?: unknown;
    };
    const httpStatus =
      typeof status === 'number' ? status : httpStatusOf(error as { getStatus?: () => unknown } | undefined);
    return `e${JSON.stringify({
      name: typeof name === 'string' ? name : 'Error',
      message,
      ...(typeof code === 'string' || typeof code === 'number' ? { code } : {}),
      ...(httpStatus !== undefined ? { status: httpStatus } : {}),
    })}`;
  } catch {
    // A thrown object whose properties throw when read (a revoked Proxy): its message is all it tells.
    return `e${JSON.stringify({ name: 'Error', message })}`;
  }
}

/** The value a record holds, or the error it says to throw. */
export function readRecord<T>(key: string, record: string, settings: ResolvedSingleFlightOptions<T>): T {
  const body = record.slice(1);
  switch (record[0]) {
    case 'v':
      try {
        return settings.deserialize(body);
      } catch (error) {
        throw new InvalidArgumentError('deserialize', `could not read the value of "${key}": ${errorMessage(error)}`);
      }
    case 'u':
      return undefined as T;
    case 'e': {
      const { name, message, code, status } = JSON.parse(body) as {
        name: string;
        message: string;
        code?: string | number;
        status?: number;
      };
      throw new LoaderError(name, message, code, status);
    }
    default:
      throw new InvalidArgumentError('value', (JSON.parse(body) as { message: string }).message);
  }
}

function refusal(message: string): string {
  return `x${JSON.stringify({ message })}`;
}

/** An `HttpException`'s status (`getStatus()`), read without trusting the object. */
function httpStatusOf(error: { getStatus?: () => unknown } | undefined): number | undefined {
  try {
    const status = typeof error?.getStatus === 'function' ? error.getStatus() : undefined;
    return typeof status === 'number' ? status : undefined;
  } catch {
    return undefined;
  }
}
