import { errorMessage, InvalidArgumentError, LoaderError, LockError } from '../lock.errors.js';
import type { ResolvedSingleFlightOptions } from './single-flight-options.js';

/*
 * What a load leaves for the processes that waited for it: one text, its first character saying what
 * follows — `v` a serialized value, `u` undefined (a loader that returned nothing), `e` the loader's
 * error (JSON: name, message, code, status), `x` why the value could not travel (JSON: message).
 */

/** Thrown by a `serialize` that refuses a value with a message of its own (the value, wrapped). */
export class ValueRefused extends Error {}

/** The record of a value the loader returned. */
export function valueRecord<T>(key: string, value: T, settings: ResolvedSingleFlightOptions<T>): string {
  if (value === undefined) return 'u';
  let text: unknown;
  try {
    text = settings.serialize(value);
  } catch (error) {
    if (error instanceof ValueRefused) return refusal(error.message);
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

/**
 * The record of the error the loader threw: what a caller in another process needs to tell it — its
 * name, message, code, HTTP status and, for an `HttpException`, its response body — within `maxBytes`
 * (a longer message is cut, a larger body left out). The status is the one the loader's own process
 * answers with: an `HttpException`'s, or a nest-lock error's (`LockError.httpAnswer`); any other error
 * answers 500 there, whatever `status` property it has, and so it does everywhere.
 */
export function errorRecord(error: unknown, maxBytes: number): string {
  const message = messageOf(error);
  let fields: Record<string, unknown> = { name: 'Error', message };
  try {
    const { name, code } = (typeof error === 'object' && error !== null ? error : {}) as {
      name?: unknown;
      code?: unknown;
    };
    const httpStatus = error instanceof LockError ? statusOfLockError(error) : httpStatusOf(error);
    const response = httpStatus === undefined ? undefined : httpResponseOf(error);
    fields = {
      name: typeof name === 'string' ? name : 'Error',
      message,
      ...(typeof code === 'string' || (typeof code === 'number' && Number.isFinite(code)) ? { code } : {}),
      ...(httpStatus !== undefined ? { status: httpStatus } : {}),
      ...(response !== undefined ? { response } : {}),
    };
  } catch {
    // A thrown object whose properties throw when read (a revoked Proxy): its message is all it tells.
  }
  let text = JSON.stringify(fields);
  if (Buffer.byteLength(text) > maxBytes) {
    const small: Record<string, unknown> = {
      ...fields,
      message: message.slice(0, Math.max(0, Math.floor(maxBytes / 4) - 200)),
    };
    delete small.response;
    text = JSON.stringify(small);
  }
  return `e${text}`;
}

/** The value a record holds, or the error it says to throw. */
export function readRecord<T>(key: string, record: string, settings: ResolvedSingleFlightOptions<T>): T {
  const body = record.slice(1);
  switch (record[0]) {
    case 'v':
      try {
        return settings.deserialize(body);
      } catch (error) {
        // Already saying what it could not read (a value inside a cache entry).
        if (error instanceof InvalidArgumentError) throw error;
        throw new InvalidArgumentError('deserialize', `could not read the value of "${key}": ${errorMessage(error)}`);
      }
    case 'u':
      return undefined as T;
    case 'e': {
      const { name, message, code, status, response } = JSON.parse(body) as {
        name: string;
        message: string;
        code?: string | number;
        status?: number;
        response?: unknown;
      };
      throw new LoaderError(name, message, code, status, response);
    }
    default:
      throw new InvalidArgumentError('value', (JSON.parse(body) as { message: string }).message);
  }
}

/** Why a value's record says it cannot travel; `undefined` for a record of a value or an error. */
export function refusalOf(record: string): string | undefined {
  return record[0] === 'x' ? (JSON.parse(record.slice(1)) as { message: string }).message : undefined;
}

function refusal(message: string): string {
  return `x${JSON.stringify({ message })}`;
}

/** A nest-lock error's answer (409, 503), but none for a 500: an error of any other kind answers that. */
function statusOfLockError(error: LockError): number | undefined {
  const { status } = error.httpAnswer;
  return status === 500 ? undefined : status;
}

/** An HTTP status: a whole number from 100 to 599. */
function isStatus(status: unknown): status is number {
  return typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 599;
}

/** An `HttpException`'s status (`getStatus()`), read without trusting the object. */
function httpStatusOf(error: unknown): number | undefined {
  try {
    const { getStatus } = error as { getStatus?: unknown };
    const status: unknown = typeof getStatus === 'function' ? getStatus.call(error) : undefined;
    return isStatus(status) ? status : undefined;
  } catch {
    return undefined;
  }
}

/** An `HttpException`'s response body (`getResponse()`), when it is one that travels as JSON. */
function httpResponseOf(error: unknown): unknown {
  try {
    const { getResponse } = error as { getResponse?: unknown };
    const response: unknown = typeof getResponse === 'function' ? getResponse.call(error) : undefined;
    return response === undefined ? undefined : (JSON.parse(JSON.stringify(response)) as unknown);
  } catch {
    return undefined;
  }
}

/** The message of what was thrown: an object's own `message` too (a thrown plain object). */
function messageOf(error: unknown): string {
  if (!(error instanceof Error) && typeof error === 'object' && error !== null) {
    try {
      const { message } = error as { message?: unknown };
      if (typeof message === 'string') return message;
    } catch {
      // Its message getter throws: what errorMessage can tell.
    }
  }
  return errorMessage(error);
}
