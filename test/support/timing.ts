import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';

/** Reads until `done` holds or `withinMs` passed; the last value read. */
export async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, withinMs: number): Promise<T> {
  const deadline = performance.now() + withinMs;
  for (;;) {
    const value = await read();
    if (done(value) || performance.now() >= deadline) return value;
    await delay(25);
  }
}

/**
 * Resolves as soon as `check` holds (polled every 5 ms): a wait for the event the test means, not for a
 * time that usually suffices. Rejects, naming `what` it waited for, when it does not hold within
 * `withinMs` — a bound for a test that would otherwise hang, not part of what the test checks.
 */
export async function until(what: string, check: () => boolean | Promise<boolean>, withinMs = 5_000): Promise<void> {
  const deadline = performance.now() + withinMs;
  while (!(await check())) {
    if (performance.now() >= deadline) throw new Error(`waited ${withinMs} ms for ${what}`);
    await delay(5);
  }
}

/** `promise`'s value, or `fallback` once `ms` passed first; no timer is left behind. */
export async function within<T, F>(promise: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<F>((resolve) => (timer = setTimeout(() => resolve(fallback), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves with the reason `signal` aborts with, or `undefined` if it does not within `ms`. */
export async function abortReasonWithin(signal: AbortSignal, ms: number): Promise<unknown> {
  if (signal.aborted) return signal.reason;
  const aborted = once(signal, 'abort').then(() => signal.reason as unknown);
  return Promise.race([aborted, delay(ms).then(() => undefined)]);
}

/**
 * Blocks the event loop for `ms`, as CPU work elsewhere in the application would (a big JSON.parse, a
 * report, a long GC pause): no timer fires and no reply is read meanwhile.
 */
export function busyWait(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // spinning on purpose
  }
}

/**
 * Polls `isHeld` until it says the lease is gone or `withinMs` passed; what it said last (`false`: given
 * back in time).
 */
export function heldAfter(isHeld: () => Promise<boolean>, withinMs: number): Promise<boolean> {
  return eventually(isHeld, (held) => !held, withinMs);
}
