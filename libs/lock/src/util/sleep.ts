/**
 * `setTimeout` as a promise, ended sooner once `until` settles (a wake-up); an `AbortSignal` cuts it
 * short with its own reason (not an `AbortError`).
 */
export function sleep(ms: number, signal?: AbortSignal, until?: Promise<unknown>): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const settle = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = () => {
      settle();
      reject(signal!.reason);
    };
    const wake = () => {
      settle();
      resolve();
    };
    const timer = setTimeout(wake, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
    until?.then(wake, wake);
  });
}
