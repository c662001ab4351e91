import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { Handover, Turn, TurnWait } from '../store.js';

interface Waiter {
  /** Ends the wait: with the lease handed to it, or `null` for "look again". */
  settle(handover: Handover | null): void;
}

interface Channel {
  waiters: Set<Waiter>;
  /**
   * SUBSCRIBE was answered on the live connection: from then on every release reaches the waiters.
   * False until then, and again from the moment the connection drops until it is subscribed again.
   */
  ready: boolean;
  /** Drops the subscription when nobody has waited on the channel for a while. */
  linger?: NodeJS.Timeout;
}

/** How long a channel stays subscribed after its last waiter left: contention comes in bursts. */
const LINGER_MS = 2_000;

/**
 * The wake-up channels of one Redis store, on one subscriber connection of its own. A release
 * publishes to the process of the waiter it tells, on the channel of its lock or semaphore with that
 * process's suffix (`<channel>:<process>`, which the waiter's attempt recorded with its place in line):
 * `<token> <fence> <lease ms>` tells one waiter that the lease was handed to it and for how long the
 * releaser wrote it, `<token> 0 0` wakes one waiter to try for it; the other processes waiting for the lease hear nothing. A subscription is counted by
 * its waiters and dropped once nobody waits.
 *
 * Redis loses a message only with the subscriber's connection. So a waiter whose channel is
 * subscribed sleeps until it is told (within the bounds its caller sets: the deadline, the holder's
 * lease); when the connection drops, every waiter is woken at once to look again, and until the
 * channel is subscribed again waiters poll with their backoff step.
 */
export class WakeUps {
  private subscriber?: Redis | Cluster;
  private readonly channels = new Map<string, Channel>();
  /**
   * Open turns by owner token (a handover message names the token on its channel), oldest first: one
   * token may wait for several locks at once (a `token` option given to several calls). Keyed by the
   * token alone, whose string is the same on every call and hashes once, not by a key built anew.
   */
  private readonly turns = new Map<string, RedisTurn[]>();
  /** The subscriber's connection dropped since it was last ready: its channels must be subscribed again. */
  private connectionLost = false;
  private closed = false;

  /**
   * On a Redis Cluster whose ioredis supports it, the channels are sharded (SSUBSCRIBE to the
   * primary of their slot, where the scripts SPUBLISH), so a message never crosses the cluster bus.
   */
  readonly sharded: boolean;

  /** This store's suffix of the channels it listens on: random, so that two stores never share one. */
  readonly process = randomBytes(6).toString('base64url');

  constructor(private readonly client: Redis | Cluster) {
    this.sharded = isCluster(client) && supportsShardedSubscribers(client);
  }

  /** See `LockStore.openTurn`: subscribes nothing until the turn first waits. */
  openTurn(channel: string, token: string): Turn {
    const turn = new RedisTurn(this, channel, token);
    const open = this.turns.get(token);
    if (open === undefined) this.turns.set(token, [turn]);
    else open.push(turn);
    return turn;
  }

  /**
   * A release of this process handed the lease to the waiter `token` (see `Successor`): told as a
   * handover message would tell it. `false` when that waiter's turn is closed (it stopped waiting).
   */
  handOver(channel: string, token: string, handover: Handover): boolean {
    const turn = this.turnOf(channel, token);
    turn?.handed(handover);
    return turn !== undefined;
  }

  /** The channel where releases tell this process's waiters for the lease of `channel`. */
  listeningChannel(channel: string): string {
    return `${channel}:${this.process}`;
  }

  /** Called by a turn that closes. */
  forget(turn: RedisTurn): void {
    const open = this.turns.get(turn.token);
    const index = open?.indexOf(turn) ?? -1;
    if (open === undefined || index < 0) return;
    if (open.length === 1) this.turns.delete(turn.token);
    else open.splice(index, 1);
  }

  /**
   * Waits on `channel` (see `Turn.wait`). A wait that must subscribe first resolves with 0 as soon
   * as the subscription stands, so that the caller looks again at once: a release may have come
   * before anyone listened.
   */
  wait(turn: RedisTurn, wait: TurnWait, signal?: AbortSignal): Promise<Handover | null> {
    return new Promise<Handover | null>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const name = this.listeningChannel(turn.channel);
      const subscription = this.channelOf(name);
      const end = () => {
        clearTimeout(timer);
        turn.waiting = undefined;
        this.leave(name, subscription, entry);
      };
      const entry: Waiter = {
        settle: (handover) => {
          end();
          signal?.removeEventListener('abort', onAbort);
          resolve(handover);
        },
      };
      const onAbort = () => {
        end();
        reject(signal!.reason);
      };
      subscription.waiters.add(entry);
      turn.waiting = entry;
      signal?.addEventListener('abort', onAbort, { once: true });
      const timer = setTimeout(() => entry.settle(null), subscription.ready ? wait.limit : wait.step);
    });
  }

  close(): void {
    this.closed = true;
    for (const [, subscription] of this.channels) {
      clearTimeout(subscription.linger);
      wakeAll(subscription);
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
    const subscription: Channel = { waiters: new Set(), ready: false };
    this.channels.set(name, subscription);
    this.subscribe(name, subscription);
    return subscription;
  }

  /** Subscribes `name`; once that stands, its waiters look again (a release may have come unheard). */
  private subscribe(name: string, subscription: Channel): void {
    const connection = this.connection();
    (this.sharded ? connection.ssubscribe(name) : connection.subscribe(name)).then(
      () => {
        if (this.closed) return;
        // Dropped while SUBSCRIBE was on its way (nobody waited any more): unsubscribed now, unless it is wanted again.
        if (this.channels.get(name) === undefined) this.unsubscribe(name);
        if (this.channels.get(name) !== subscription) return;
        subscription.ready = true;
        wakeAll(subscription);
      },
      () => undefined, // the waiters go on polling with their step; the next 'ready' subscribes again
    );
  }

  private leave(name: string, subscription: Channel, waiter: Waiter): void {
    subscription.waiters.delete(waiter);
    if (subscription.waiters.size > 0 || this.closed) return;
    subscription.linger = setTimeout(() => {
      if (subscription.waiters.size > 0 || this.channels.get(name) !== subscription) return;
      this.channels.delete(name);
      if (subscription.ready) this.unsubscribe(name);
    }, LINGER_MS).unref();
  }

  private unsubscribe(name: string): void {
    const subscriber = this.subscriber;
    if (subscriber === undefined) return;
    (this.sharded ? subscriber.sunsubscribe(name) : subscriber.unsubscribe(name)).catch(() => undefined);
  }

  private connection(): Redis | Cluster {
    if (this.subscriber === undefined) {
      // Its own connection: a subscribed connection can do nothing else. It may queue SUBSCRIBE
      // while it connects (unlike the lock commands, a late subscription harms nobody). After a
      // reconnect it subscribes again itself (not ioredis's autoResubscribe), so that it knows when
      // each channel stands again.
      const settings = { enableOfflineQueue: true, autoResubscribe: false, lazyConnect: false };
      let subscriber: Redis | Cluster;
      if (this.sharded) {
        // ioredis keeps one subscriber per primary and subscribes the channels again after a slot
        // move or a failover ('subscribersReady'); a shard's subscriber that ends is a '-node'.
        subscriber = (this.client as Cluster).duplicate(undefined, {
          shardedSubscribers: true,
          enableOfflineQueue: true,
          lazyConnect: false,
        });
        subscriber.on('smessage', (channel: string, message: string) => this.deliver(channel, message));
        subscriber.on('-node', () => this.lost());
        subscriber.on('subscribersReady', () => this.resubscribed());
      } else {
        subscriber = isCluster(this.client)
          ? this.client.duplicate(undefined, { redisOptions: settings })
          : this.client.duplicate(settings);
        subscriber.on('message', (channel: string, message: string) => this.deliver(channel, message));
        subscriber.on('close', () => this.lost());
        subscriber.on('ready', () => this.reconnected());
      }
      subscriber.on('error', () => undefined); // the lock client reports outages; waiters fall back to their steps
      this.subscriber = subscriber;
    }
    return this.subscriber;
  }

  /** Messages published from now until the channels stand again are lost: every waiter looks again. */
  private lost(): void {
    this.connectionLost = true;
    for (const [, subscription] of this.channels) {
      subscription.ready = false;
      wakeAll(subscription);
    }
  }

  private reconnected(): void {
    if (this.closed || !this.connectionLost) return;
    this.connectionLost = false;
    for (const [name, subscription] of this.channels) this.subscribe(name, subscription);
  }

  /** ioredis subscribed the sharded channels again: messages reach the waiters, who look again at once. */
  private resubscribed(): void {
    if (this.closed || !this.connectionLost) return;
    this.connectionLost = false;
    for (const [, subscription] of this.channels) {
      subscription.ready = true;
      wakeAll(subscription);
    }
  }

  /** The open turn of `token` on `channel`; the latest one if the same token waits twice for the same lock. */
  private turnOf(channel: string, token: string): RedisTurn | undefined {
    return this.turns.get(token)?.findLast((turn) => turn.channel === channel);
  }

  private deliver(name: string, message: string): void {
    const subscription = this.channels.get(name);
    if (subscription === undefined) return;
    // "<token> <fence> <lease ms>", or "<token> 0 0" (woken to try): the numbers have no space in
    // them, a caller's own token may.
    const leaseAt = message.lastIndexOf(' ');
    const fenceAt = message.lastIndexOf(' ', leaseAt - 1);
    const fence = Number(message.slice(fenceAt + 1, leaseAt));
    const lease = Number(message.slice(leaseAt + 1));
    const channel = name.slice(0, name.length - this.process.length - 1);
    const handover = fence > 0 && lease > 0 ? { fence, lease } : null;
    this.turnOf(channel, message.slice(0, fenceAt))?.handed(handover);
  }
}

/**
 * One waiter's turn: a handover that arrives while the waiter is not waiting (its attempt is on
 * its way, and the release came right after it) is kept for its next wait.
 */
class RedisTurn implements Turn {
  private handover: Handover | null = null;
  /** Woken while it was not waiting: its next wait ends at once. */
  private woken = false;
  /** The wait in progress, if any (set by `WakeUps.wait`). */
  waiting?: Waiter;

  constructor(
    private readonly wakeUps: WakeUps,
    readonly channel: string,
    readonly token: string,
  ) {}

  wait(wait: TurnWait, signal?: AbortSignal): Promise<Handover | null> {
    if (this.handover !== null) {
      const handover = this.handover;
      this.handover = null;
      return Promise.resolve(handover);
    }
    if (this.woken) {
      this.woken = false;
      return Promise.resolve(null);
    }
    return this.wakeUps.wait(this, wait, signal);
  }

  /** The lease was handed to this waiter, or (`null`) it was woken to try for it. */
  handed(handover: Handover | null): void {
    if (this.waiting) this.waiting.settle(handover);
    else if (handover !== null) this.handover = handover;
    else this.woken = true;
  }

  close(): void {
    this.wakeUps.forget(this);
  }
}

function wakeAll(subscription: Channel): void {
  for (const waiter of [...subscription.waiters]) waiter.settle(null);
}

function isCluster(client: Redis | Cluster): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/** ioredis 6 (and late 5.x) keep a subscriber per shard for SSUBSCRIBE (`shardedSubscribers`); older ones do not. */
function supportsShardedSubscribers(cluster: Cluster): boolean {
  return (
    typeof (cluster as unknown as { createShardedSubscriberGroup?: unknown }).createShardedSubscriberGroup ===
    'function'
  );
}
