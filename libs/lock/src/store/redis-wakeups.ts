import type { Cluster, Redis } from 'ioredis';
import { LONGEST_DURATION } from '../lock.options.js';

interface Waiter {
  /** The waiter's owner token: a handover names it. */
  token: string;
  /** Ends the wait: with the fence of a lease handed to it, or 0 for "look again". */
  settle(fence: number): void;
}

interface Channel {
  waiters: Set<Waiter>;
  /** Settles once SUBSCRIBE was answered; a failed subscription leaves the waiters to their timers. */
  subscribed: Promise<boolean>;
  ready: boolean;
  /** Drops the subscription when nobody has waited on the channel for a while. */
  linger?: NodeJS.Timeout;
}

/** How long a channel stays subscribed after its last waiter left: contention comes in bursts. */
const LINGER_MS = 2_000;

/**
 * The wake-up channels of one Redis store, on one subscriber connection of its own. A release
 * publishes on the channel of its lock or semaphore: an empty message wakes every waiter, and
 * `<token> <fence>` tells one waiter that the lease was handed to it. A subscription is counted by
 * its waiters and dropped once nobody waits. Waiters never rely on a message alone: each wait is
 * bounded by the caller (its backoff step, the holder's remaining lease), so a lost message or a
 * dropped connection costs at most one step.
 */
export class WakeUps {
  private subscriber?: Redis | Cluster;
  private readonly channels = new Map<string, Channel>();
  private closed = false;

  constructor(private readonly client: Redis | Cluster) {}

  /**
   * Waits on `channel` up to `maxWait` ms: resolves with the fence when the lease was handed to
   * `token`, 0 when woken or when the time is up, and rejects with the signal's reason on abort.
   * A wait that first had to subscribe resolves with 0 as soon as the subscription stands, so that
   * the caller looks again at once: a release may have come before anyone listened.
   */
  wait(channel: string, token: string, maxWait: number, signal?: AbortSignal): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const subscription = this.channelOf(channel);
      const waiter: Waiter = {
        token,
        settle: (fence) => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          this.leave(channel, subscription, waiter);
          resolve(fence);
        },
      };
      const onAbort = () => {
        clearTimeout(timer);
        this.leave(channel, subscription, waiter);
        reject(signal!.reason);
      };
      subscription.waiters.add(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
      const timer = setTimeout(() => waiter.settle(0), Math.min(maxWait, LONGEST_DURATION));
      if (!subscription.ready) {
        void subscription.subscribed.then((subscribed) => {
          if (subscribed && subscription.waiters.has(waiter)) waiter.settle(0);
        });
      }
    });
  }

  /** Number of channels subscribed right now (for soak checks). */
  get subscribedChannels(): number {
    return this.channels.size;
  }

  close(): void {
    this.closed = true;
    for (const [, subscription] of this.channels) {
      clearTimeout(subscription.linger);
      for (const waiter of [...subscription.waiters]) waiter.settle(0);
    }
    this.channels.clear();
    this.subscriber?.disconnect();
  }

  private channelOf(name: string): Channel {
    const existing = this.channels.get(name);
    if (existing) {
      clearTimeout(existing.linger);
      existing.linger = undefined;
      return existing;
    }
    const subscription: Channel = { waiters: new Set(), subscribed: Promise.resolve(false), ready: false };
    subscription.subscribed = this.connection()
      .subscribe(name)
      .then(
        () => (subscription.ready = true),
        () => false,
      );
    this.channels.set(name, subscription);
    return subscription;
  }

  private leave(name: string, subscription: Channel, waiter: Waiter): void {
    subscription.waiters.delete(waiter);
    if (subscription.waiters.size > 0 || this.closed) return;
    subscription.linger = setTimeout(() => {
      if (subscription.waiters.size > 0 || this.channels.get(name) !== subscription) return;
      this.channels.delete(name);
      this.subscriber?.unsubscribe(name).catch(() => undefined);
    }, LINGER_MS).unref();
  }

  private connection(): Redis | Cluster {
    if (this.subscriber === undefined) {
      // Its own connection: a subscribed connection can do nothing else. It may queue SUBSCRIBE
      // while it connects (unlike the lock commands, a late subscription harms nobody) and
      // subscribes again by itself after a reconnect.
      const settings = { enableOfflineQueue: true, autoResubscribe: true, lazyConnect: false };
      const subscriber: Redis | Cluster = isCluster(this.client)
        ? this.client.duplicate(undefined, { redisOptions: settings })
        : this.client.duplicate(settings);
      subscriber.on('error', () => undefined); // the lock client reports outages; waiters fall back to their timers
      subscriber.on('message', (channel: string, message: string) => this.deliver(channel, message));
      this.subscriber = subscriber;
    }
    return this.subscriber;
  }

  private deliver(name: string, message: string): void {
    const subscription = this.channels.get(name);
    if (subscription === undefined) return;
    if (message === '') {
      for (const waiter of [...subscription.waiters]) waiter.settle(0);
      return;
    }
    const [token, fence] = message.split(' ');
    for (const waiter of subscription.waiters) {
      if (waiter.token === token) {
        waiter.settle(Number(fence));
        return;
      }
    }
  }
}

function isCluster(client: Redis | Cluster): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}
