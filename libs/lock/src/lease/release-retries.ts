import { LockBackendError } from '../lock.errors.js';
import type { LeaseKind } from '../kinds/lease-kind.js';

/** A lease by its owner: which lease, and whose. */
export interface OwnedLease {
  readonly kind: LeaseKind;
  readonly id: string;
  readonly token: string;
}

/**
 * Releases that failed while the store was away, tried again in the background until the lease
 * would have run out by itself, so that the key comes back soon after the store does rather than a
 * whole ttl later. One per module.
 */
export class ReleaseRetries {
  /** Releases being retried, by kind, id and token. */
  private readonly retrying = new Map<string, { timer?: NodeJS.Timeout; cancelled: boolean }>();
  private closed = false;

  /**
   * Tries `giveBack` again, backing off from 50 ms to 1 s, until it gets an answer or `until`
   * (`performance.now()`) passes, after which the server has let the lease go by itself.
   * Compare-and-delete makes a late retry harmless to other owners; `forget` stops it when the same
   * token takes the same lease again (a caller's own token), so that it never frees that lease.
   */
  retry(lease: OwnedLease, giveBack: () => Promise<unknown>, until: number): void {
    const key = ownerKeyOf(lease);
    this.forget(lease);
    const retrying = { timer: undefined as NodeJS.Timeout | undefined, cancelled: false };
    const done = () => {
      if (this.retrying.get(key) === retrying) this.retrying.delete(key);
    };
    const retry = (delay: number) => {
      if (this.closed || retrying.cancelled || performance.now() + delay >= until) return done();
      retrying.timer = setTimeout(() => {
        if (retrying.cancelled) return;
        giveBack().then(done, (error: unknown) => {
          if (error instanceof LockBackendError && error.transient) retry(Math.min(delay * 2, 1_000));
          else done();
        });
      }, delay).unref();
    };
    this.retrying.set(key, retrying);
    retry(50);
  }

  /**
   * Stops retrying the release of `lease` — also after a retry that is on its way now: that token is
   * taking the lease again. (A retry already sent goes before the new attempt on the same connection,
   * so it only ever frees the old lease.)
   */
  forget(lease: OwnedLease): void {
    const key = ownerKeyOf(lease);
    const retrying = this.retrying.get(key);
    if (retrying === undefined) return;
    retrying.cancelled = true;
    clearTimeout(retrying.timer);
    this.retrying.delete(key);
  }

  /** The store is closing: nobody releases any more. */
  close(): void {
    this.closed = true;
    for (const retrying of this.retrying.values()) {
      retrying.cancelled = true;
      clearTimeout(retrying.timer);
    }
    this.retrying.clear();
  }
}

function ownerKeyOf({ kind, id, token }: OwnedLease): string {
  return `${kind.name}\0${id}\0${token}`;
}
