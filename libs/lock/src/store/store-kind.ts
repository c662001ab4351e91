import type { RedisLayout } from './redis/redis-layout.js';

/** An operation a store runs on a lease: what a backend error says could not be done. */
export type StoreOperation = 'acquire' | 'release' | 'extend' | 'fence' | 'count' | 'inspect' | 'forceRelease';

/**
 * What a store needs to know of a kind of lease (a lock, a permit of a semaphore, …). The stores
 * are written once against it: they never ask which kind they hold. `Request` is what a caller asks
 * for beyond the lease itself (a semaphore's limit; nothing for a lock).
 */
export interface StoreKind<Request = unknown> {
  /** `lock`, `semaphore`: in telemetry, in `LockLostError.kind`. */
  readonly name: string;
  /** What an operation on lease `id` is for, as a message says it could not be done: `take lock "k"`. */
  readonly purposes: Readonly<Record<StoreOperation, (id: string) => string>>;
  /**
   * On the memory store: whether a caller asking `request` may hold the lease beside its live
   * `holders` (what each of them asked for), while other callers that were refused still wait for it
   * (`waiting`: what they asked for; a lock's waiting writer holds back readers). A token that holds
   * it already is always let in again.
   */
  admits(holders: readonly Request[], request: Request, waiting?: readonly Request[]): boolean;
  /** On Redis: its keys and scripts. */
  readonly redis: RedisLayout<Request>;
  /**
   * How it lives on Redlock's independent masters: `'token-lease'` — one owner's token per key, with
   * the lease as its expiry, the one lease Redlock's quorum protocol holds (a lock: the Redlock store
   * writes it with its own scripts, not the kind's); or why it cannot, for the `InvalidArgumentError`
   * its calls reject with there. Every kind says which: a lease with more state than its owner's token
   * would silently lose it there.
   */
  readonly redlock: 'token-lease' | { readonly refusal: string };
  /** For a token lease: why Redlock refuses some requests of it (a lock's read mode), if it does. */
  redlockRefusal?(request: Request): string | undefined;
}
