import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import {
  acquireFreeLocksScript,
  acquireLockScript,
  countLockScript,
  extendLockScript,
  fenceLockScript,
  forceReleaseLockScript,
  inspectLockScript,
  LOCK_KEYS,
  lockRequestArgs,
  releaseLockScript,
} from '../libs/lock/src/kinds/lock.scripts.js';
import {
  acquirePermitScript,
  countPermitsScript,
  extendPermitScript,
  fencePermitScript,
  listPermitsScript,
  releasePermitScript,
  SEMAPHORE_KEYS,
  semaphoreRequestArgs,
} from '../libs/lock/src/kinds/semaphore.scripts.js';
import {
  ACQUIRE_ALL_IF_FREE_ARGV,
  ACQUIRE_ARGV,
  type AcquireArgs,
  acquireAllIfFreeArgv,
  acquireArgv,
  EXTEND_ARGV,
  extendArgv,
  FENCE_ARGV,
  fenceArgv,
  FORCE_RELEASE_ARGV,
  forceReleaseArgv,
  leaseKeysOf,
  NO_ARGV,
  RELEASE_ARGV,
  type ReleaseArgs,
  releaseArgv,
  type ScriptArg,
  type SuccessorArgs,
  wakeChannelOf,
} from '../libs/lock/src/store/redis/redis-layout.js';
import { declaredScripts, type RedisScript, type ScriptCall } from '../libs/lock/src/store/redis/script.js';
import {
  redlockAcquire,
  redlockExtend,
  redlockFence,
  redlockForceRelease,
  redlockInspect,
  type RedlockKeys,
  redlockMark,
  redlockRaiseFence,
  redlockRelease,
  redlockSeed,
} from '../libs/lock/src/store/redlock/redlock.scripts.js';
import { useRedisClient, useRedisServer } from './support/redis-server.js';

/*
 * Every Lua script of nest-lock on its own, against a real redis-server: each is called with EVALSHA
 * (EVAL after NOSCRIPT) with the KEYS and ARGV its builder writes, and its reply and what it left in
 * Redis are checked for the states that apply to it — free, held by another, held by the same token,
 * waiting in line, expired, a wrong token. Time is the server's own: a lease or a waiter that has run
 * out is written with a deadline in the past, rather than waited for.
 */

const HANDOVER_MS = 1_000;
const FENCE_COUNTER_TTL = 60_000;
const PROCESS = 'p1';
/** Fences are the server's clock in µs (or more): above this. */
const SOME_FENCE = 1_600_000_000_000_000;

const server = useRedisServer();
describe('the Lua scripts, each on its own', () => {
  const redis = useRedisClient(server);

  /** The scripts this spec ran, by name: every declared one must be among them (see the last test). */
  const ran = new Set<string>();

  /** Runs `script` as the stores do: by SHA, by its text after NOSCRIPT. */
  async function evalScript(
    script: RedisScript,
    keys: readonly string[],
    argv: readonly ScriptArg[],
    variant: 'plain' | 'sharded' = 'plain',
  ): Promise<unknown> {
    ran.add(script.name);
    const { sha, source } = script[variant];
    try {
      return await redis().evalsha(sha, keys.length, ...keys, ...argv);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return await redis().eval(source, keys.length, ...keys, ...argv);
    }
  }

  const runCall = ({ script, keys, argv }: ScriptCall) => evalScript(script, keys, argv);

  /** The server's clock, ms. */
  async function serverNow(): Promise<number> {
    const [seconds, micros] = await redis().time();
    return Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000);
  }

  let leases = 0;

  /** A fresh lock's keys, by the names its Lua binds them to. */
  function lockKeys() {
    const lease = `t:{lock-${++leases}}`;
    const [, counter, line, alive, waiters, readers] = leaseKeysOf(lease, LOCK_KEYS.companions, 6);
    return { lease, counter, line, alive, waiters, readers, channel: wakeChannelOf(lease) };
  }

  /** A fresh semaphore's keys, by the names its Lua binds them to. */
  function semaphoreKeys() {
    const lease = `t:sem:{sem-${++leases}}`;
    const [, counter, line, alive, waiters, limits] = leaseKeysOf(lease, SEMAPHORE_KEYS.companions, 6);
    return { lease, counter, line, alive, waiters, limits, channel: wakeChannelOf(lease) };
  }

  type Keys = { lease: string; channel: string };
  const keysFor = (script: RedisScript, { lease }: Keys, companions: readonly string[]) =>
    leaseKeysOf(lease, companions, script.numberOfKeys);

  /** What one waiter's process heard on its channels, through a subscriber beside the scripts. */
  let subscriber: Redis;
  const heard: string[] = [];
  let syncs = 0;
  beforeAll(async () => {
    subscriber = new Redis(server().url);
    subscriber.on('pmessage', (_pattern: string, channel: string, message: string) => {
      heard.push(`${channel} ${message}`);
    });
    await subscriber.psubscribe('t:*');
  });
  afterAll(() => subscriber.disconnect());
  beforeEach(() => {
    heard.length = 0;
  });

  /** The messages published so far on `channel` (exactly), once everything published before has arrived. */
  async function messagesOn(channel: string): Promise<string[]> {
    const sync = `t:sync:${++syncs}`;
    await redis().publish(sync, 'sync');
    for (let i = 0; i < 200 && !heard.includes(`${sync} sync`); i++) await new Promise((r) => setTimeout(r, 5));
    return heard.filter((line) => line.startsWith(`${channel} `)).map((line) => line.slice(channel.length + 1));
  }

  /** Every message heard on any lease's channel (not the syncs). */
  async function allMessages(): Promise<string[]> {
    await messagesOn('t:none');
    return heard.filter((line) => !line.startsWith('t:sync:'));
  }

  /** A waiter standing in a lease's line as an attempt would put it there: line (fair), alive, waiters. */
  async function standInLine(
    keys: { line: string; alive: string; waiters: string },
    token: string,
    { fair = true, ttl = 10_000, process = PROCESS, more = '', liveFor = 10_000, asked }: WaiterOptions = {},
  ): Promise<void> {
    const now = await serverNow();
    if (fair) await redis().zadd(keys.line, now * 1_000 + ++arrivals, token);
    await redis().zadd(keys.alive, now + liveFor, token);
    await redis().hset(keys.waiters, token, `${ttl} ${process}${more}`);
    if (asked) await redis().hset(asked.key, token, asked.value);
  }
  let arrivals = 0;
  interface WaiterOptions {
    fair?: boolean;
    ttl?: number;
    process?: string;
    more?: string;
    /** ms until it drops out; negative: its deadline has passed. */
    liveFor?: number;
    asked?: { key: string; value: string | number };
  }

  /** Whether `token` stands anywhere in the line (line, alive or waiters). */
  async function inLine(keys: { line: string; alive: string; waiters: string }, token: string) {
    return {
      line: (await redis().zscore(keys.line, token)) !== null,
      alive: (await redis().zscore(keys.alive, token)) !== null,
      waiters: await redis().hget(keys.waiters, token),
    };
  }
  const OUT_OF_LINE = { line: false, alive: false, waiters: null };

  describe('the calling convention: each Lua header binds what its builder writes', () => {
    const bound = (header: string, names: string) => `${header}\nreturn {${names}}`;

    it('acquire (ARGV[11…] the kind request)', async () => {
      const argv = acquireArgv({
        token: 'tok',
        ttl: 1234,
        fair: true,
        liveness: 567,
        inLine: false,
        handoverMs: 890,
        channel: 'ch',
        fenceCounterTtl: 4321,
        process: 'proc',
        joinOnlyBehindOthers: true,
        request: ['r'],
      });
      const names =
        'token, ttl, tostring(fair), tostring(liveness), tostring(inLine), tostring(handoverMs), channel, fenceCounterTtl, process, tostring(joinOnlyBehindOthers), request';
      expect(await redis().eval(bound(ACQUIRE_ARGV, names), 0, ...argv)).toEqual([
        'tok',
        '1234',
        'true',
        '567',
        'false',
        '890',
        'ch',
        '4321',
        'proc',
        'true',
        'r',
      ]);
    });

    it('release, with and without a successor', async () => {
      const names =
        "token, tostring(handoverMs), channel, fenceCounterTtl, successor or 'none', tostring(jump), successorTtl or 'none', successorRequest or 'none'";
      const common = { token: 'tok', handoverMs: 890, channel: 'ch', fenceCounterTtl: 4321 };
      expect(await redis().eval(bound(RELEASE_ARGV, names), 0, ...releaseArgv(common))).toEqual([
        'tok',
        '890',
        'ch',
        '4321',
        'none',
        'false',
        'none',
        'none',
      ]);
      const successor = { token: 'next', jump: true, ttl: 700, request: [3] };
      expect(await redis().eval(bound(RELEASE_ARGV, names), 0, ...releaseArgv({ ...common, successor }))).toEqual([
        'tok',
        '890',
        'ch',
        '4321',
        'next',
        'true',
        '700',
        '3',
      ]);
    });

    it('extend, fence, forceRelease, acquireAllIfFree; count and inspect take none', async () => {
      expect(await redis().eval(bound(EXTEND_ARGV, 'token, ttl'), 0, ...extendArgv({ token: 't', ttl: 9 }))).toEqual([
        't',
        '9',
      ]);
      const fence = fenceArgv({ token: 't', fenceCounterTtl: 8 });
      expect(await redis().eval(bound(FENCE_ARGV, 'token, fenceCounterTtl'), 0, ...fence)).toEqual(['t', '8']);
      const force = forceReleaseArgv({ handoverMs: 7, channel: 'ch', fenceCounterTtl: 6 });
      expect(
        await redis().eval(bound(FORCE_RELEASE_ARGV, 'tostring(handoverMs), channel, fenceCounterTtl'), 0, ...force),
      ).toEqual(['7', 'ch', '6']);
      const all = acquireAllIfFreeArgv({ token: 't', ttl: 5 });
      expect(await redis().eval(bound(ACQUIRE_ALL_IF_FREE_ARGV, 'token, ttl'), 0, ...all)).toEqual(['t', '5']);
      expect(NO_ARGV).toEqual([]);
    });

    it("KEYS: each kind's Lua names and its companions come from one list", async () => {
      expect(LOCK_KEYS.companions).toEqual(['fence', 'line', 'alive', 'waiters', 'readers']);
      expect(SEMAPHORE_KEYS.companions).toEqual(['fence', 'line', 'alive', 'waiters', 'limits']);
      const lock = leaseKeysOf('L', LOCK_KEYS.companions, 6);
      const lockNames = 'lease, counter, line, alive, waiters, readers';
      expect(await redis().eval(bound(LOCK_KEYS.lua, lockNames), 6, ...lock)).toEqual(lock);
      const sem = leaseKeysOf('S', SEMAPHORE_KEYS.companions, 6);
      const semNames = 'lease, counter, line, alive, waiters, limits';
      expect(await redis().eval(bound(SEMAPHORE_KEYS.lua, semNames), 6, ...sem)).toEqual(sem);
      expect(lock).toEqual(['L', 'L:fence', 'L:line', 'L:alive', 'L:waiters', 'L:readers']);
    });
  });

  /** An attempt's arguments as the tests' callers send them, but for the token and the request. */
  const attemptDefaults = (keys: Keys) => ({
    ttl: 10_000,
    fair: true,
    liveness: 0,
    inLine: false,
    handoverMs: HANDOVER_MS,
    channel: keys.channel,
    fenceCounterTtl: FENCE_COUNTER_TTL,
    process: PROCESS,
    joinOnlyBehindOthers: false,
  });

  describe('the lock scripts', () => {
    const lockAcquire = (keys: Keys, fields: Partial<AcquireArgs> & { token: string }) =>
      evalScript(
        acquireLockScript,
        keysFor(acquireLockScript, keys, LOCK_KEYS.companions),
        acquireArgv({ ...attemptDefaults(keys), request: lockRequestArgs('write'), ...fields }),
      );
    const read = lockRequestArgs('read');
    const lockRelease = (keys: Keys, token: string, successor?: SuccessorArgs) =>
      evalScript(
        releaseLockScript,
        keysFor(releaseLockScript, keys, LOCK_KEYS.companions),
        releaseArgvOf(keys, token, successor),
      );
    const releaseArgvOf = (keys: Keys, token: string, successor?: SuccessorArgs) =>
      releaseArgv({
        token,
        handoverMs: HANDOVER_MS,
        channel: keys.channel,
        fenceCounterTtl: FENCE_COUNTER_TTL,
        successor,
      });
    const on = (script: RedisScript, keys: Keys, argv: readonly ScriptArg[]) =>
      evalScript(script, keysFor(script, keys, LOCK_KEYS.companions), argv);

    describe('acquireLock', () => {
      it('free: takes it (SET NX PX) for the ttl, and draws no fence', async () => {
        const keys = lockKeys();
        expect(await lockAcquire(keys, { token: 'A' })).toBe(1);
        expect(await redis().get(keys.lease)).toBe('A');
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(9_000);
        expect(await redis().exists(keys.counter)).toBe(0);
      });

      it('held by another: {ms the holder still runs, the last fence}; it waits in line, with its ttl and process', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'H', 'PX', 5_000);
        await redis().set(keys.counter, String(SOME_FENCE * 2));
        const now = await serverNow();
        const reply = (await lockAcquire(keys, { token: 'A', liveness: 3_000, ttl: 7_000 })) as [number, string];
        expect(reply[0]).toBeGreaterThan(4_000);
        expect(reply[0]).toBeLessThanOrEqual(5_000);
        expect(reply[1]).toBe(String(SOME_FENCE * 2));
        expect(await inLine(keys, 'A')).toEqual({ line: true, alive: true, waiters: '7000 p1' });
        expect(Number(await redis().zscore(keys.alive, 'A'))).toBeGreaterThanOrEqual(now + 3_000);
        expect(await redis().get(keys.lease)).toBe('H');
      });

      it('held by another, with no fence drawn yet: the last fence is the server clock in µs', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'H', 'PX', 5_000);
        const before = (await serverNow()) * 1_000;
        const reply = (await lockAcquire(keys, { token: 'A' })) as [number, string];
        expect(Number(reply[1])).toBeGreaterThanOrEqual(before);
      });

      it('held by another, a last attempt (liveness 0): it does not join the line', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'H', 'PX', 5_000);
        expect(Array.isArray(await lockAcquire(keys, { token: 'A', liveness: 0 }))).toBe(true);
        expect(await inLine(keys, 'A')).toEqual(OUT_OF_LINE);
      });

      it('held, joining only behind others: out of an empty line (a third reply element, 1); behind a waiter, in line', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'H', 'PX', 5_000);
        const alone = (await lockAcquire(keys, {
          token: 'A',
          liveness: 3_000,
          joinOnlyBehindOthers: true,
        })) as unknown[];
        expect(alone).toHaveLength(3);
        expect(alone[2]).toBe(1);
        expect(await inLine(keys, 'A')).toEqual(OUT_OF_LINE);

        await standInLine(keys, 'W', { process: 'p2' });
        const behind = (await lockAcquire(keys, {
          token: 'A',
          liveness: 3_000,
          joinOnlyBehindOthers: true,
        })) as unknown[];
        expect(behind).toHaveLength(2);
        expect((await inLine(keys, 'A')).line).toBe(true);
        expect(await redis().get(keys.lease)).toBe('H');
      });

      it('held by the same token (a lost reply, a missed handover): granted again, its lease restarted, out of line', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 500);
        await standInLine(keys, 'A');
        expect(await lockAcquire(keys, { token: 'A', inLine: true, ttl: 10_000 })).toBe(1);
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(9_000);
        expect(await inLine(keys, 'A')).toEqual(OUT_OF_LINE);
      });

      it('in line: a free lock goes to the first waiter (told on its process), the caller waits behind it', async () => {
        const keys = lockKeys();
        await standInLine(keys, 'W', { ttl: 400, process: 'p2' });
        const reply = await lockAcquire(keys, { token: 'A', liveness: 2_000 });
        expect(Array.isArray(reply)).toBe(true);
        expect(await redis().get(keys.lease)).toBe('W');
        // The handover lease, or the waiter's own ttl when shorter.
        expect(await redis().pttl(keys.lease)).toBeLessThanOrEqual(400);
        const fence = await redis().get(keys.counter);
        expect(await messagesOn(`${keys.channel}:p2`)).toEqual([`W ${fence} 400`]);
        expect(await inLine(keys, 'W')).toEqual(OUT_OF_LINE);
        expect((await inLine(keys, 'A')).line).toBe(true);
      });

      it('in line, granted: the first waiter takes a free lock and leaves the line', async () => {
        const keys = lockKeys();
        await standInLine(keys, 'A');
        await standInLine(keys, 'B');
        expect(await lockAcquire(keys, { token: 'A', inLine: true })).toBe(1);
        expect(await redis().get(keys.lease)).toBe('A');
        expect(await inLine(keys, 'A')).toEqual(OUT_OF_LINE);
        expect((await inLine(keys, 'B')).line).toBe(true);
      });

      it('unordered (fair: false): a free lock is taken ahead of the line', async () => {
        const keys = lockKeys();
        await standInLine(keys, 'W');
        expect(await lockAcquire(keys, { token: 'A', fair: false })).toBe(1);
        expect(await redis().get(keys.lease)).toBe('A');
      });

      it('expired: a waiter whose deadline passed drops out of line and is not handed the lock', async () => {
        const keys = lockKeys();
        await standInLine(keys, 'GONE', { liveFor: -1_000, asked: undefined });
        expect(await lockAcquire(keys, { token: 'A' })).toBe(1);
        expect(await redis().get(keys.lease)).toBe('A');
        expect(await inLine(keys, 'GONE')).toEqual(OUT_OF_LINE);
        expect(await allMessages()).toEqual([]);
      });

      it('read: readers share the lock; a writer refused by them stands in line even unordered, and holds back later readers', async () => {
        const keys = lockKeys();
        expect(await lockAcquire(keys, { token: 'R1', request: read })).toBe(1);
        expect(await lockAcquire(keys, { token: 'R2', request: read })).toBe(1);
        expect(await redis().get(keys.lease)).toBe('');
        expect(await redis().zrange(keys.readers, '0', '-1')).toEqual(['R1', 'R2']);
        expect(Array.isArray(await lockAcquire(keys, { token: 'W', fair: false, liveness: 2_000 }))).toBe(true);
        expect(await inLine(keys, 'W')).toEqual({ line: true, alive: true, waiters: '10000 p1' });
        expect(Array.isArray(await lockAcquire(keys, { token: 'R3', request: read, liveness: 2_000 }))).toBe(true);
        expect((await inLine(keys, 'R3')).waiters).toBe('10000 p1 r');
      });

      it('read, held by the same reader: its deadline restarts', async () => {
        const keys = lockKeys();
        expect(await lockAcquire(keys, { token: 'R', request: read, ttl: 1_000 })).toBe(1);
        expect(await lockAcquire(keys, { token: 'R', request: read, ttl: 9_000 })).toBe(1);
        expect(Number(await redis().zscore(keys.readers, 'R'))).toBeGreaterThan((await serverNow()) + 8_000);
      });

      it('expired readers do not hold the lock: a writer takes it', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, '', 'PX', 10_000);
        await redis().zadd(keys.readers, (await serverNow()) - 1, 'R');
        expect(await lockAcquire(keys, { token: 'A' })).toBe(1);
        expect(await redis().get(keys.lease)).toBe('A');
      });
    });

    describe('releaseLock', () => {
      it('held, nobody waiting: deleted (the compare-and-delete path)', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        expect(await lockRelease(keys, 'A')).toBe(1);
        expect(await redis().exists(keys.lease)).toBe(0);
      });

      it('wrong token: 0, the lock stays; a waiter giving up leaves the line', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'H', 'PX', 10_000);
        await standInLine(keys, 'W');
        expect(await lockRelease(keys, 'W')).toBe(0);
        expect(await redis().get(keys.lease)).toBe('H');
        expect(await inLine(keys, 'W')).toEqual(OUT_OF_LINE);
        expect(await lockRelease(keys, 'nobody')).toBe(0);
      });

      it('in line: handed to the first fair waiter, for the handover lease, with a fence, told on its process', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await standInLine(keys, 'W', { process: 'p2' });
        expect(await lockRelease(keys, 'A')).toBe(1);
        expect(await redis().get(keys.lease)).toBe('W');
        expect(await redis().pttl(keys.lease)).toBeLessThanOrEqual(HANDOVER_MS);
        const fence = await redis().get(keys.counter);
        expect(Number(fence)).toBeGreaterThan(SOME_FENCE);
        expect(await redis().pttl(keys.counter)).toBeGreaterThan(FENCE_COUNTER_TTL - 1_000);
        expect(await messagesOn(`${keys.channel}:p2`)).toEqual([`W ${fence} ${HANDOVER_MS}`]);
        expect(await inLine(keys, 'W')).toEqual(OUT_OF_LINE);
      });

      it('an unordered waiter: the lock is freed and the waiter woken (<token> 0 0), out of alive', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await standInLine(keys, 'U', { fair: false, process: 'p3' });
        expect(await lockRelease(keys, 'A')).toBe(1);
        expect(await redis().exists(keys.lease)).toBe(0);
        expect(await messagesOn(`${keys.channel}:p3`)).toEqual(['U 0 0']);
        expect(await inLine(keys, 'U')).toEqual(OUT_OF_LINE);
      });

      it('a waiter that stopped attempting (expired) is dropped, not handed the lock', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await standInLine(keys, 'GONE', { liveFor: -1 });
        expect(await lockRelease(keys, 'A')).toBe(1);
        expect(await redis().exists(keys.lease)).toBe(0);
        expect(await inLine(keys, 'GONE')).toEqual(OUT_OF_LINE);
        expect(await allMessages()).toEqual([]);
      });

      it('a successor, nobody in line: {1, -1, ms, 1 (nobody else waits)}, its own for the shorter of the handover lease and its ttl, no message, no fence', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        const successor = { token: 'S', jump: false, ttl: 700, request: lockRequestArgs('write') };
        expect(await lockRelease(keys, 'A', successor)).toEqual([1, -1, 700, 1]);
        expect(await redis().get(keys.lease)).toBe('S');
        expect(await redis().pttl(keys.lease)).toBeLessThanOrEqual(700);
        expect(await redis().exists(keys.counter)).toBe(0);
        expect(await allMessages()).toEqual([]);
      });

      it('a successor behind a waiter of the line: the line goes first; with jump it goes ahead', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await standInLine(keys, 'W');
        const successor = { token: 'S', jump: false, ttl: 10_000, request: lockRequestArgs('write') };
        expect(await lockRelease(keys, 'A', successor)).toBe(1);
        expect(await redis().get(keys.lease)).toBe('W');

        await redis().set(keys.lease, 'B', 'PX', 10_000);
        await standInLine(keys, 'W2');
        // W2 still waits: the reply's last element says so (0).
        expect(await lockRelease(keys, 'B', { ...successor, jump: true })).toEqual([1, -1, HANDOVER_MS, 0]);
        expect(await redis().get(keys.lease)).toBe('S');
      });

      it('a reader successor joins the readers, and never goes ahead of the line', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        const successor = { token: 'S', jump: true, ttl: 10_000, request: read };
        expect(await lockRelease(keys, 'A', successor)).toEqual([1, -1, HANDOVER_MS, 1]);
        expect(await redis().get(keys.lease)).toBe('');
        expect(await redis().zrange(keys.readers, '0', '-1')).toEqual(['S']);

        const other = lockKeys();
        await redis().set(other.lease, 'A', 'PX', 10_000);
        await standInLine(other, 'W');
        expect(await lockRelease(other, 'A', successor)).toBe(1);
        expect(await redis().get(other.lease)).toBe('W');
      });

      it('readers: one leaves and the lock stays with the other; the last one frees it', async () => {
        const keys = lockKeys();
        expect(await lockAcquire(keys, { token: 'R1', request: read })).toBe(1);
        expect(await lockAcquire(keys, { token: 'R2', request: read })).toBe(1);
        expect(await lockRelease(keys, 'R1')).toBe(1);
        expect(await redis().get(keys.lease)).toBe('');
        expect(await lockRelease(keys, 'R2')).toBe(1);
        expect(await redis().exists(keys.lease, keys.readers)).toBe(0);
      });

      it('expired reader: 0, dropped all the same', async () => {
        const keys = lockKeys();
        const now = await serverNow();
        await redis().set(keys.lease, '', 'PX', 10_000);
        await redis().zadd(keys.readers, now - 1, 'OLD', now + 10_000, 'R');
        expect(await lockRelease(keys, 'OLD')).toBe(0);
        expect(await redis().zrange(keys.readers, '0', '-1')).toEqual(['R']);
      });

      it('a woken waiter giving up on a free lock passes the wake on to another', async () => {
        const keys = lockKeys();
        await standInLine(keys, 'U2', { fair: false, process: 'p3' });
        expect(await lockRelease(keys, 'U1')).toBe(0);
        expect(await messagesOn(`${keys.channel}:p3`)).toEqual(['U2 0 0']);
      });
    });

    describe('extendLock', () => {
      const extend = (keys: Keys, token: string, ttl: number) => on(extendLockScript, keys, extendArgv({ token, ttl }));

      it('held by the token: its lease restarts; another token, or a free lock: 0', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 500);
        expect(await extend(keys, 'A', 9_000)).toBe(1);
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(8_000);
        expect(await extend(keys, 'B', 9_000)).toBe(0);
        expect(await extend(lockKeys(), 'A', 9_000)).toBe(0);
      });

      it("a reader: its own deadline, and the lock's expiry follows the last reader; an expired reader is not revived", async () => {
        const keys = lockKeys();
        const now = await serverNow();
        await redis().set(keys.lease, '', 'PX', 1_000);
        await redis().zadd(keys.readers, now + 1_000, 'R', now - 1, 'OLD');
        expect(await extend(keys, 'R', 20_000)).toBe(1);
        expect(Number(await redis().zscore(keys.readers, 'R'))).toBeGreaterThanOrEqual(now + 20_000);
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(19_000);
        expect(await extend(keys, 'OLD', 20_000)).toBe(0);
      });
    });

    describe('fenceLock', () => {
      const fence = (keys: Keys, token: string) =>
        on(fenceLockScript, keys, fenceArgv({ token, fenceCounterTtl: FENCE_COUNTER_TTL }));

      it('held by the token: the server clock in µs, increasing; the counter kept for its ttl', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        const before = (await serverNow()) * 1_000;
        const first = Number(await fence(keys, 'A'));
        expect(first).toBeGreaterThanOrEqual(before);
        expect(Number(await fence(keys, 'A'))).toBeGreaterThan(first);
        expect(await redis().pttl(keys.counter)).toBeGreaterThan(FENCE_COUNTER_TTL - 1_000);
      });

      it('a counter ahead of the clock: one more than it', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await redis().set(keys.counter, String(SOME_FENCE * 2));
        expect(await fence(keys, 'A')).toBe(SOME_FENCE * 2 + 1);
      });

      it('a wrong token, or a free lock: 0, nothing drawn', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        expect(await fence(keys, 'B')).toBe(0);
        expect(await fence(lockKeys(), 'A')).toBe(0);
        expect(await redis().exists(keys.counter)).toBe(0);
      });

      it('a reader whose lease runs draws one; an expired reader does not', async () => {
        const keys = lockKeys();
        const now = await serverNow();
        await redis().set(keys.lease, '', 'PX', 10_000);
        await redis().zadd(keys.readers, now + 10_000, 'R', now - 1, 'OLD');
        expect(Number(await fence(keys, 'R'))).toBeGreaterThan(SOME_FENCE);
        expect(await fence(keys, 'OLD')).toBe(0);
      });
    });

    describe('countLock and inspectLock', () => {
      const count = (keys: Keys) => on(countLockScript, keys, NO_ARGV);
      const inspect = (keys: Keys) => on(inspectLockScript, keys, NO_ARGV);

      it('free: 0; {-2, no fence, no readers}', async () => {
        const keys = lockKeys();
        expect(await count(keys)).toBe(0);
        expect(await inspect(keys)).toEqual([-2, '', 0]);
      });

      it('held to write: 1; {its PTTL, the last fence as a string, 0}', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await redis().set(keys.counter, String(SOME_FENCE));
        expect(await count(keys)).toBe(1);
        const [pttl, counter, readers] = (await inspect(keys)) as [number, string, number];
        expect(pttl).toBeGreaterThan(9_000);
        expect([counter, readers]).toEqual([String(SOME_FENCE), 0]);
      });

      it('held to read: the readers whose lease runs; all expired: free', async () => {
        const keys = lockKeys();
        const now = await serverNow();
        await redis().set(keys.lease, '', 'PX', 10_000);
        await redis().zadd(keys.readers, now + 10_000, 'R1', now + 10_000, 'R2', now - 1, 'OLD');
        expect(await count(keys)).toBe(2);
        expect(((await inspect(keys)) as number[])[2]).toBe(2);
        await redis().zrem(keys.readers, 'R1', 'R2');
        expect(await count(keys)).toBe(0);
        expect(await inspect(keys)).toEqual([-2, '', 0]);
      });
    });

    describe('forceReleaseLock', () => {
      const forceRelease = (keys: Keys) =>
        on(
          forceReleaseLockScript,
          keys,
          forceReleaseArgv({ handoverMs: HANDOVER_MS, channel: keys.channel, fenceCounterTtl: FENCE_COUNTER_TTL }),
        );

      it('free: 0', async () => {
        expect(await forceRelease(lockKeys())).toBe(0);
      });

      it('held by a writer: freed whoever holds it, and handed to the line', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await standInLine(keys, 'W', { process: 'p2' });
        expect(await forceRelease(keys)).toBe(1);
        expect(await redis().get(keys.lease)).toBe('W');
        expect(await messagesOn(`${keys.channel}:p2`)).toEqual([`W ${await redis().get(keys.counter)} ${HANDOVER_MS}`]);
      });

      it('held by readers: every reader is gone; an unordered waiter is woken', async () => {
        const keys = lockKeys();
        await redis().set(keys.lease, '', 'PX', 10_000);
        await redis().zadd(keys.readers, (await serverNow()) + 10_000, 'R');
        await standInLine(keys, 'U', { fair: false });
        expect(await forceRelease(keys)).toBe(1);
        expect(await redis().exists(keys.lease, keys.readers)).toBe(0);
        expect(await messagesOn(`${keys.channel}:${PROCESS}`)).toEqual(['U 0 0']);
      });
    });

    describe('acquireFreeLocks', () => {
      const takeAll = (locks: Keys[], token: string) =>
        evalScript(
          acquireFreeLocksScript,
          locks.flatMap((keys) => keysFor(acquireFreeLocksScript, keys, LOCK_KEYS.companions)),
          acquireAllIfFreeArgv({ token, ttl: 10_000 }),
        );

      it('all free: every one is the token’s, for the ttl', async () => {
        const locks = [lockKeys(), lockKeys(), lockKeys()];
        expect(await takeAll(locks, 'A')).toBe(1);
        for (const keys of locks) {
          expect(await redis().get(keys.lease)).toBe('A');
          expect(await redis().pttl(keys.lease)).toBeGreaterThan(9_000);
        }
      });

      it('one held by another, or one with waiters: 0, none taken', async () => {
        const held = [lockKeys(), lockKeys()];
        await redis().set(held[1].lease, 'H', 'PX', 10_000);
        expect(await takeAll(held, 'A')).toBe(0);
        expect(await redis().exists(held[0].lease)).toBe(0);

        const waited = [lockKeys(), lockKeys()];
        await standInLine(waited[1], 'W');
        expect(await takeAll(waited, 'A')).toBe(0);
        expect(await redis().exists(waited[0].lease, waited[1].lease)).toBe(0);
      });
    });
  });

  describe('the semaphore scripts', () => {
    const on = (script: RedisScript, keys: Keys, argv: readonly ScriptArg[]) =>
      evalScript(script, keysFor(script, keys, SEMAPHORE_KEYS.companions), argv);
    const permitAcquire = (keys: Keys, fields: Partial<AcquireArgs> & { token: string; limit: number }) => {
      const { limit, ...rest } = fields;
      return on(
        acquirePermitScript,
        keys,
        acquireArgv({ ...attemptDefaults(keys), request: semaphoreRequestArgs(limit), ...rest }),
      );
    };
    const permitRelease = (keys: Keys, token: string, successor?: ReleaseArgs['successor']) =>
      on(
        releasePermitScript,
        keys,
        releaseArgv({
          token,
          handoverMs: HANDOVER_MS,
          channel: keys.channel,
          fenceCounterTtl: FENCE_COUNTER_TTL,
          successor,
        }),
      );
    /** Permits held, each with a deadline `ms` from now (negative: expired). */
    async function hold(keys: { lease: string }, permits: Record<string, number>) {
      const now = await serverNow();
      for (const [token, ms] of Object.entries(permits)) await redis().zadd(keys.lease, now + ms, token);
      await redis().pexpire(keys.lease, 60_000);
    }

    describe('acquirePermit', () => {
      it('free, under the limit: a permit by the server clock, and the set expires with its last lease', async () => {
        const keys = semaphoreKeys();
        const now = await serverNow();
        expect(await permitAcquire(keys, { token: 'A', limit: 2 })).toBe(1);
        expect(Number(await redis().zscore(keys.lease, 'A'))).toBeGreaterThanOrEqual(now + 10_000);
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(9_000);
        expect(await redis().exists(keys.counter)).toBe(0);
      });

      it('held by others up to the limit: {ms until the first runs out, the last fence}; it waits with its limit', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { H1: 3_000, H2: 8_000 });
        const reply = (await permitAcquire(keys, { token: 'A', limit: 2, liveness: 2_000, ttl: 5_000 })) as [
          number,
          string,
        ];
        expect(reply[0]).toBeGreaterThan(2_000);
        expect(reply[0]).toBeLessThanOrEqual(3_000);
        expect(Number(reply[1])).toBeGreaterThan(SOME_FENCE);
        expect(await inLine(keys, 'A')).toEqual({ line: true, alive: true, waiters: '5000 p1' });
        expect(await redis().hget(keys.limits, 'A')).toBe('2');
      });

      it('held by the same token: renewed, out of line', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { A: 500, H: 8_000 });
        await standInLine(keys, 'A', { asked: { key: keys.limits, value: 2 } });
        expect(await permitAcquire(keys, { token: 'A', limit: 2, inLine: true })).toBe(1);
        expect(Number(await redis().zscore(keys.lease, 'A'))).toBeGreaterThan((await serverNow()) + 9_000);
        expect(await inLine(keys, 'A')).toEqual(OUT_OF_LINE);
        expect(await redis().hget(keys.limits, 'A')).toBeNull();
      });

      it('expired: a permit whose lease ran out is dropped and does not count', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { OLD: -1 });
        expect(await permitAcquire(keys, { token: 'A', limit: 1 })).toBe(1);
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['A']);
      });

      it('in line: the waiters ahead are served first, each under its own limit', async () => {
        const keys = semaphoreKeys();
        await standInLine(keys, 'W', { process: 'p2', asked: { key: keys.limits, value: 1 } });
        const reply = await permitAcquire(keys, { token: 'A', limit: 1, liveness: 1_000 });
        expect(Array.isArray(reply)).toBe(true);
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['W']);
        const fence = await redis().get(keys.counter);
        expect(await messagesOn(`${keys.channel}:p2`)).toEqual([`W ${fence} ${HANDOVER_MS}`]);
        expect(await inLine(keys, 'W')).toEqual(OUT_OF_LINE);
      });

      it('in line: a first waiter that does not fit under its own limit holds back those behind it', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { H: 8_000 });
        await standInLine(keys, 'W', { asked: { key: keys.limits, value: 1 } });
        expect(Array.isArray(await permitAcquire(keys, { token: 'A', limit: 5 }))).toBe(true);
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['H']);
      });
    });

    describe('releasePermit', () => {
      it('held: 1, the permit is gone', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { A: 8_000, B: 8_000 });
        expect(await permitRelease(keys, 'A')).toBe(1);
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['B']);
      });

      it('expired: 0, dropped all the same', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { OLD: -1, B: 8_000 });
        expect(await permitRelease(keys, 'OLD')).toBe(0);
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['B']);
      });

      it('a wrong token: 0, the permits stay; a waiter giving up leaves the line', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { B: 8_000 });
        await standInLine(keys, 'W', { asked: { key: keys.limits, value: 1 } });
        expect(await permitRelease(keys, 'W')).toBe(0);
        expect(await inLine(keys, 'W')).toEqual(OUT_OF_LINE);
        expect(await redis().hget(keys.limits, 'W')).toBeNull();
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['B']);
      });

      it('a woken waiter giving up passes the wake on to another', async () => {
        const keys = semaphoreKeys();
        await standInLine(keys, 'U2', { fair: false, process: 'p3' });
        expect(await permitRelease(keys, 'U1')).toBe(0);
        expect(await messagesOn(`${keys.channel}:p3`)).toEqual(['U2 0 0']);
      });

      it('a successor that fits under the limit it asked: {1, -1, ms}, no message', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { A: 8_000 });
        await standInLine(keys, 'S', { asked: { key: keys.limits, value: 1 } });
        const successor = { token: 'S', jump: false, ttl: 600, request: semaphoreRequestArgs(1) };
        expect(await permitRelease(keys, 'A', successor)).toEqual([1, -1, 600]);
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['S']);
        expect(await allMessages()).toEqual([]);
      });

      it('a successor beyond its own limit is not handed one', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { A: 8_000, B: 8_000 });
        await standInLine(keys, 'S', { asked: { key: keys.limits, value: 1 } });
        const successor = { token: 'S', jump: false, ttl: 600, request: semaphoreRequestArgs(1) };
        expect(await permitRelease(keys, 'A', successor)).toBe(1);
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['B']);
      });

      it('in line: the freed permit goes to the first fair waiter; else an unordered one is woken', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { A: 8_000 });
        await standInLine(keys, 'W', { process: 'p2', asked: { key: keys.limits, value: 1 } });
        expect(await permitRelease(keys, 'A')).toBe(1);
        expect(await redis().zrange(keys.lease, '0', '-1')).toEqual(['W']);
        expect(await messagesOn(`${keys.channel}:p2`)).toEqual([`W ${await redis().get(keys.counter)} ${HANDOVER_MS}`]);

        const other = semaphoreKeys();
        await hold(other, { A: 8_000 });
        await standInLine(other, 'U', { fair: false, process: 'p3' });
        expect(await permitRelease(other, 'A')).toBe(1);
        expect(await messagesOn(`${other.channel}:p3`)).toEqual(['U 0 0']);
      });
    });

    describe('fencePermit, extendPermit, countPermits, listPermits', () => {
      const fence = (keys: Keys, token: string) =>
        on(fencePermitScript, keys, fenceArgv({ token, fenceCounterTtl: FENCE_COUNTER_TTL }));
      const extend = (keys: Keys, token: string, ttl: number) =>
        on(extendPermitScript, keys, extendArgv({ token, ttl }));

      it('fence: held → the next fence; expired or not held → 0, nothing drawn', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { A: 8_000, OLD: -1 });
        expect(await fence(keys, 'OLD')).toBe(0);
        expect(await fence(keys, 'B')).toBe(0);
        expect(await redis().exists(keys.counter)).toBe(0);
        const first = Number(await fence(keys, 'A'));
        expect(first).toBeGreaterThan(SOME_FENCE);
        expect(Number(await fence(keys, 'A'))).toBeGreaterThan(first);
      });

      it('extend: held → its deadline restarts and the set follows the last lease; expired or not held → 0', async () => {
        const keys = semaphoreKeys();
        await hold(keys, { A: 500, OLD: -1 });
        expect(await extend(keys, 'A', 30_000)).toBe(1);
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(29_000);
        expect(await extend(keys, 'OLD', 30_000)).toBe(0);
        expect(await extend(keys, 'B', 30_000)).toBe(0);
      });

      it('count and list: the permits whose lease runs, soonest first, in ms left', async () => {
        const keys = semaphoreKeys();
        expect(await on(countPermitsScript, keys, NO_ARGV)).toBe(0);
        expect(await on(listPermitsScript, keys, NO_ARGV)).toEqual([]);
        await hold(keys, { A: 8_000, B: 3_000, OLD: -1 });
        expect(await on(countPermitsScript, keys, NO_ARGV)).toBe(2);
        const [first, second] = (await on(listPermitsScript, keys, NO_ARGV)) as number[];
        expect(first).toBeGreaterThan(2_000);
        expect(first).toBeLessThanOrEqual(3_000);
        expect(second).toBeGreaterThan(7_000);
      });
    });
  });

  describe('the Redlock node scripts', () => {
    let runId: string;
    beforeAll(async () => {
      runId = /run_id:(\w+)/.exec(await redis().info('server'))![1];
    });
    function nodeKeys(): RedlockKeys {
      const lease = `t:{redlock-${++leases}}`;
      return { lease, counter: `${lease}:fence`, marker: `t:redlock:born:${leases}` };
    }
    /** The node known since `ms` ago (a marker of this run). */
    async function bornAgo(keys: RedlockKeys, ms: number) {
      await redis().set(keys.marker, `${runId}:${(await serverNow()) - ms}`);
    }
    const lease = { ttl: 10_000, quarantine: 5_000 };

    it('redlockMark: marks this run born now, once', async () => {
      const keys = nodeKeys();
      const now = await serverNow();
      expect(await runCall(redlockMark(keys))).toBe(1);
      const marker = (await redis().get(keys.marker))!;
      expect(marker.startsWith(`${runId}:`)).toBe(true);
      expect(Number(marker.split(':')[1])).toBeGreaterThanOrEqual(now);
      await bornAgo(keys, 60_000);
      const old = await redis().get(keys.marker);
      expect(await runCall(redlockMark(keys))).toBe(1);
      expect(await redis().get(keys.marker)).toBe(old);
    });

    describe('redlockAcquire', () => {
      it('free: {1, 0, mature, run_id}, the lease written for the ttl, no fence', async () => {
        const keys = nodeKeys();
        await bornAgo(keys, 60_000);
        expect(await runCall(redlockAcquire(keys, { token: 'A', ...lease }))).toEqual([1, 0, 1, runId]);
        expect(await redis().get(keys.lease)).toBe('A');
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(9_000);
        expect(await redis().exists(keys.counter)).toBe(0);
      });

      it('held by another: {0, its PTTL, mature, run_id}, untouched', async () => {
        const keys = nodeKeys();
        await bornAgo(keys, 60_000);
        await redis().set(keys.lease, 'H', 'PX', 4_000);
        const [took, pttl, mature, id] = (await runCall(redlockAcquire(keys, { token: 'A', ...lease }))) as unknown[];
        expect([took, mature, id]).toEqual([0, 1, runId]);
        expect(pttl).toBeGreaterThan(3_000);
        expect(await redis().get(keys.lease)).toBe('H');
      });

      it('held by the same token: taken again, its lease restarted', async () => {
        const keys = nodeKeys();
        await bornAgo(keys, 60_000);
        await redis().set(keys.lease, 'A', 'PX', 500);
        expect(await runCall(redlockAcquire(keys, { token: 'A', ...lease }))).toEqual([1, 0, 1, runId]);
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(9_000);
      });

      it('birth marker: a node seen for the first time is young (it takes the lock, but says so) and marked now', async () => {
        const keys = nodeKeys();
        const now = await serverNow();
        expect(await runCall(redlockAcquire(keys, { token: 'A', ...lease }))).toEqual([1, 0, 0, runId]);
        expect(Number((await redis().get(keys.marker))!.split(':')[1])).toBeGreaterThanOrEqual(now);
      });

      it('birth marker: a marker of another run (a restart from an older snapshot) is a new birth: young again', async () => {
        const keys = nodeKeys();
        await redis().set(keys.marker, `0123456789abcdef:${(await serverNow()) - 60_000}`);
        expect(((await runCall(redlockAcquire(keys, { token: 'A', ...lease }))) as unknown[])[2]).toBe(0);
        expect((await redis().get(keys.marker))!.startsWith(`${runId}:`)).toBe(true);
      });

      it('quarantine: young until the quarantine has passed since its birth; 0 turns it off', async () => {
        const keys = nodeKeys();
        await bornAgo(keys, 4_000);
        expect(((await runCall(redlockAcquire(keys, { token: 'A', ...lease }))) as unknown[])[2]).toBe(0);
        await bornAgo(keys, 5_000);
        expect(((await runCall(redlockAcquire(keys, { token: 'A', ...lease }))) as unknown[])[2]).toBe(1);
        const fresh = nodeKeys();
        expect(
          ((await runCall(redlockAcquire(fresh, { token: 'A', ttl: 1_000, quarantine: 0 }))) as unknown[])[2],
        ).toBe(1);
      });
    });

    describe('redlockFence and redlockRaiseFence', () => {
      it('held by the token: {the fence as a decimal string, PTTL, mature, run_id}; the counter kept for its ttl', async () => {
        const keys = nodeKeys();
        await bornAgo(keys, 60_000);
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        const args = { token: 'A', fenceCounterTtl: FENCE_COUNTER_TTL, quarantine: 5_000 };
        const [fence, pttl, mature, id] = (await runCall(redlockFence(keys, args))) as [string, number, number, string];
        expect(BigInt(fence)).toBeGreaterThan(BigInt(SOME_FENCE));
        expect(await redis().get(keys.counter)).toBe(fence);
        expect(pttl).toBeGreaterThan(9_000);
        expect([mature, id]).toEqual([1, runId]);
        expect(await redis().pttl(keys.counter)).toBeGreaterThan(FENCE_COUNTER_TTL - 1_000);
      });

      it("a wrong token, or a free lock: {'0', 0, mature, run_id}, nothing drawn", async () => {
        const keys = nodeKeys();
        await redis().set(keys.lease, 'H', 'PX', 10_000);
        const args = { token: 'A', fenceCounterTtl: FENCE_COUNTER_TTL, quarantine: 5_000 };
        expect(await runCall(redlockFence(keys, args))).toEqual(['0', 0, 0, runId]);
        expect(await runCall(redlockFence(nodeKeys(), args))).toEqual(['0', 0, 0, runId]);
        expect(await redis().exists(keys.counter)).toBe(0);
      });

      it('raise: a lower counter goes up to the fence, with the counter ttl; a higher one is never lowered', async () => {
        const keys = nodeKeys();
        const high = '9007199254740993'; // beyond a double's integers: kept as written
        expect(await runCall(redlockRaiseFence(keys, { fence: high, fenceCounterTtl: FENCE_COUNTER_TTL }))).toBe(1);
        expect(await redis().get(keys.counter)).toBe(high);
        expect(await redis().pttl(keys.counter)).toBeGreaterThan(FENCE_COUNTER_TTL - 1_000);
        await redis().pexpire(keys.counter, 5_000);
        expect(await runCall(redlockRaiseFence(keys, { fence: String(SOME_FENCE), fenceCounterTtl: 90_000 }))).toBe(1);
        expect(await redis().get(keys.counter)).toBe(high);
        expect(await redis().pttl(keys.counter)).toBeLessThanOrEqual(5_000);
      });
    });

    describe('redlockRelease, redlockExtend, redlockSeed', () => {
      it('release: 1 and deleted when the token holds it; a wrong token: 0, kept', async () => {
        const keys = nodeKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        expect(await runCall(redlockRelease(keys, { token: 'B' }))).toBe(0);
        expect(await redis().get(keys.lease)).toBe('A');
        expect(await runCall(redlockRelease(keys, { token: 'A' }))).toBe(1);
        expect(await redis().exists(keys.lease)).toBe(0);
        expect(await runCall(redlockRelease(keys, { token: 'A' }))).toBe(0);
      });

      it('extend: {1 renewed | 0 free | -1 another holds it, mature, run_id}', async () => {
        const keys = nodeKeys();
        await bornAgo(keys, 60_000);
        await redis().set(keys.lease, 'A', 'PX', 500);
        expect(await runCall(redlockExtend(keys, { token: 'A', ...lease }))).toEqual([1, 1, runId]);
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(9_000);
        expect(await runCall(redlockExtend(keys, { token: 'B', ...lease }))).toEqual([-1, 1, runId]);
        await redis().del(keys.lease);
        expect(await runCall(redlockExtend(keys, { token: 'A', ...lease }))).toEqual([0, 1, runId]);
        const young = nodeKeys();
        expect(await runCall(redlockExtend(young, { token: 'A', ...lease }))).toEqual([0, 0, runId]);
      });

      it('seed: a free node takes the token back (SET NX PX); a held one is never overwritten', async () => {
        const keys = nodeKeys();
        expect(await runCall(redlockSeed(keys, { token: 'A', ttl: 10_000 }))).toBe(1);
        expect(await redis().get(keys.lease)).toBe('A');
        expect(await redis().pttl(keys.lease)).toBeGreaterThan(9_000);
        expect(await runCall(redlockSeed(keys, { token: 'B', ttl: 10_000 }))).toBe(0);
        expect(await redis().get(keys.lease)).toBe('A');
      });
    });

    describe('redlockInspect and redlockForceRelease', () => {
      it("inspect: {holder or '', PTTL, last fence or ''}", async () => {
        const keys = nodeKeys();
        expect(await runCall(redlockInspect(keys))).toEqual(['', -2, '']);
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await redis().set(keys.counter, String(SOME_FENCE));
        const [holder, pttl, fence] = (await runCall(redlockInspect(keys))) as [string, number, string];
        expect([holder, fence]).toEqual(['A', String(SOME_FENCE)]);
        expect(pttl).toBeGreaterThan(9_000);
      });

      it("force release: the holder's token, deleted whoever holds it; '' when free", async () => {
        const keys = nodeKeys();
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        expect(await runCall(redlockForceRelease(keys))).toBe('A');
        expect(await redis().exists(keys.lease)).toBe(0);
        expect(await runCall(redlockForceRelease(keys))).toBe('');
      });
    });
  });

  describe('every script', () => {
    it('loads in both variants, the sharded one publishing with SPUBLISH where the plain one does with PUBLISH', async () => {
      for (const script of declaredScripts()) {
        for (const variant of ['plain', 'sharded'] as const) {
          expect(await redis().script('LOAD', script[variant].source)).toBe(script[variant].sha);
        }
        expect(script.sharded.source).toBe(
          script.plain.source.replaceAll("redis.call('PUBLISH'", "redis.call('SPUBLISH'"),
        );
      }
    });

    it('the sharded variant tells a waiter on its shard channel', async () => {
      const keys = lockKeys();
      const shard = new Redis(server().url);
      try {
        const told = new Promise<string>((resolve) =>
          shard.on('smessage', (_channel: string, message: string) => resolve(message)),
        );
        await shard.ssubscribe(`${keys.channel}:p2`);
        await redis().set(keys.lease, 'A', 'PX', 10_000);
        await standInLine(keys, 'W', { process: 'p2' });
        const argv = releaseArgv({
          token: 'A',
          handoverMs: HANDOVER_MS,
          channel: keys.channel,
          fenceCounterTtl: FENCE_COUNTER_TTL,
        });
        expect(
          await evalScript(releaseLockScript, keysFor(releaseLockScript, keys, LOCK_KEYS.companions), argv, 'sharded'),
        ).toBe(1);
        expect(await told).toBe(`W ${await redis().get(keys.counter)} ${HANDOVER_MS}`);
      } finally {
        shard.disconnect();
      }
    });

    // Last: the specs above ran every script nest-lock declares.
    it('has a direct spec above', () => {
      expect(
        declaredScripts()
          .map(({ name }) => name)
          .filter((name) => !ran.has(name)),
      ).toEqual([]);
    });
  });
});
