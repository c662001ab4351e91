/** An integer reply: a number, or a string when the client was made with ioredis's `stringNumbers`. */
export type Integer = number | string;

/**
 * A PTTL reply as the ms a lease still runs. 0 means it ends within the current millisecond (the
 * key is still there): 1, since 0 reads as "free" in an inspection and as "expiry unknown" in
 * `Attempt.retryIn` (a waiter would sleep a whole step). -1 (no expiry) and -2 (no key) pass through.
 */
export function leaseRunsOutIn(pttl: Integer): number {
  const ms = Number(pttl);
  return ms === 0 ? 1 : ms;
}
