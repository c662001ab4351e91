// A child process of the fault suite and the fencing test. Its loops take leases over and over and
// record every hold (token, fence, when it was requested, granted, fenced, valid until, released or
// lost) so that test/support/history.ts can check the history afterwards.
//
// Fences are drawn on demand (`lease.fence()`), while the lease is held: every holder draws its fence
// at a random moment of its hold — right after the grant, after part of its section, or at its end —
// and records when (`fencedAt`, and `drawn`: 'grant' | 'during' | 'end'). A draw that fails (the lease
// was lost, or Redis is away for the rest of the lease) leaves the hold without a fence; it is counted
// in the summary's `fenceErrors`, and a unit of work claimed for it goes back in its queue.
//
// usage: node fault-worker.mjs '<config as JSON>'
//
// Modes:
// - lock: `loops` loops, each holding one of `keys` at a time through
//   `withLock(key, fn, { ttl, autoExtend: true })`, plus one loop on `slowKey` whose sections outlive
//   the ttl (so that renewals are in flight whenever a fault hits). Under each lock the loop does one
//   unit of fenced work against the `resourceUrl` server, which the suite never faults: it takes a
//   unit from the key's queue, works `sectionMs` (drawing its fence at some moment of it), and writes
//   it with its fence; the resource refuses a fence lower than the highest it has seen for that key
//   and the unit goes back in the queue. The claim of a unit names the fence once it is drawn.
// - broken: the control. A bare `lock()` without renewal, released by a raw `DEL` of the lock's Redis
//   key (no token check), and every `longEvery`-th section outlives the ttl. Its holders draw their
//   fence right after the grant, as they did when fences came with it: its stale writes still happen.
// - semaphore: `loops` loops, each holding a permit of one of `keys` (limit `limit`) through
//   `withPermit(name, limit, fn, { ttl, autoExtend: true })`, drawing its fence at a random moment of
//   the section; no fenced work.
// With `expires`, holders in the lock and semaphore modes call `expire()` with random shorter and
// longer ttls (0.3 to 1.2 × ttl) during their holds, unawaited too, so that it races the watchdog's
// renewals; each answer is followed by a validity sample, which the checker holds against other grants.
// The module's `commandTimeout`, `maxStep` and `fair` are the process's own: the suite gives each
// process other settings, as a rolling deploy or two services configured apart would.
// With `redlockUrls`, the module runs Redlock over those masters instead of `lockUrl` (`quarantine`: its
// redlock.quarantine); the broken mode then DELs the lock's key on every master.
// Records go to lists on the resource server as they happen, so that a SIGKILLed worker leaves every
// completed hold behind. The worker prints {"ready":true} once connected and a summary line at the end;
// it stops when the key `<run>:stop` appears on the resource server.
//
// - fence: `loops` loops in this process take `key` `count` times in all through `withLock`; each
//   holder draws its fence at once or after a random pause (up to 3 ms) and RPUSHes it to `listKey` on
//   the LOCK server while it holds the lock, so that the list is in the order the server granted the
//   lock. Prints one JSON line, {fences}, at the end.
import { NestFactory } from '@nestjs/core';
import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { LockModule, LockService, SemaphoreService } from '../../../libs/lock/dist/index.js';
import { LockStore } from '../../../libs/lock/dist/store/store.js';
import { lockKind } from '../../../libs/lock/dist/kinds/lock.kind.js';

const config = JSON.parse(process.argv[2]);
const summary = {
  pid: process.pid,
  holds: 0,
  lost: {},
  errors: {},
  unexpected: [],
  unhandledRejections: 0,
  lostHookCalls: 0,
  abortsAfterRelease: 0,
  appliedWrites: 0,
  rejectedWrites: 0,
  expires: {},
  /** Draws of a fence that failed (the hold went without one), by code (LOCK_LOST with its reason). */
  fenceErrors: {},
  /** Holds that began with a lease got from a releasing holder (`nest_lock.handovers`), by how: `process`, `store`. */
  handovers: {},
};
// The library's own count of the leases passed within this process and handed over through the store.
const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const metricReader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
metrics.setGlobalMeterProvider(new MeterProvider({ readers: [metricReader] }));
process.on('unhandledRejection', (reason) => {
  summary.unhandledRejections++;
  summary.unexpected.push(`unhandled rejection: ${describeError(reason)}`);
});

const app = await NestFactory.createApplicationContext(
  LockModule.forRoot({
    ...(config.redlockUrls
      ? { redlock: withoutUndefined({ nodes: config.redlockUrls, quarantine: config.quarantine }) }
      : { redis: config.lockUrl }),
    ...withoutUndefined({ commandTimeout: config.commandTimeout }),
    defaults: withoutUndefined({
      ttl: config.ttl,
      timeout: config.timeout,
      maxStep: config.maxStep,
      fair: config.fair,
    }),
    // Not in fence mode, which needs nothing but fences.
    ...(config.mode === 'fence' ? {} : { onLockLost: () => summary.lostHookCalls++ }),
  }),
  { logger: false },
);
const locks = app.get(LockService);
const semaphores = app.get(SemaphoreService);

if (config.mode === 'fence') await runFenceMode();
else await runFaultMode();

async function runFenceMode() {
  const lockServer = new Redis(config.lockUrl);
  const fences = [];
  let remaining = config.count;
  await Promise.all(
    Array.from({ length: config.loops }, async () => {
      while (remaining > 0) {
        remaining--;
        await locks.withLock(
          config.key,
          async (lock) => {
            // At a random moment of the hold: at once, or after part of it has passed.
            if (Math.random() < 0.5) await delay(Math.random() * 3);
            const fence = await lock.fence();
            fences.push(fence);
            await lockServer.rpush(config.listKey, String(fence));
          },
          { timeout: 60_000 },
        );
      }
    }),
  );
  lockServer.disconnect();
  await app.close();
  process.stdout.write(`${JSON.stringify({ fences })}\n`);
}

async function runFaultMode() {
  const { run, mode } = config;
  const resource = new Redis(config.resourceUrl);
  // Outside the library, on the lock server: only the broken mode uses it, for its raw DEL.
  const lockServers =
    mode === 'broken'
      ? (config.redlockUrls ?? [config.lockUrl]).map((url) => new Redis(url, { maxRetriesPerRequest: 1 }))
      : [];
  defineResourceScripts(resource);

  const stopping = new AbortController();
  // Holds whose lease was given back: an abort after that is a signal aborted by an intentional release.
  const settledHolds = new WeakSet();
  const stopPoll = setInterval(() => {
    resource.exists(`${run}:stop`).then(
      (stop) => {
        if (stop) stopping.abort();
      },
      () => undefined,
    );
  }, 50);

  process.stdout.write(`${JSON.stringify({ ready: true, pid: process.pid })}\n`);

  const loops = Array.from({ length: config.loops }, (_, loop) => runLoop(loop, () => pick(config.keys)));
  if (mode === 'lock' && config.slowKey) loops.push(runLoop(config.loops, () => config.slowKey, config.slowSectionMs));
  await Promise.all(loops);

  clearInterval(stopPoll);
  await app.close();
  for (const server of lockServers) server.disconnect();
  summary.handovers = await handoversCounted();
  await resource.hset(`${run}:summaries`, String(process.pid), JSON.stringify(summary));
  resource.disconnect();
  process.stdout.write(`${JSON.stringify(summary)}\n`);

  async function runLoop(loop, nextKey, sectionMs) {
    for (let section = 1; !stopping.signal.aborted; section++) {
      const key = nextKey();
      try {
        if (mode === 'semaphore') await holdPermit(loop, key);
        else if (mode === 'broken') await holdBrokenLock(loop, key, section);
        else await holdLock(loop, key, sectionMs ?? config.sectionMs);
      } catch (error) {
        if (stopping.signal.aborted) break;
        count(summary.errors, error?.code ?? 'OTHER');
        if (!['LOCK_TIMEOUT', 'SEMAPHORE_TIMEOUT', 'BACKEND_UNAVAILABLE'].includes(error?.code)) {
          summary.unexpected.push(describeError(error));
        }
        // Redis is away: do not spin.
        await delay(20);
      }
    }
  }

  async function holdLock(loop, key, sectionMs) {
    const requestedAt = Date.now();
    let hold;
    try {
      await locks.withLock(
        key,
        async (lock) => {
          hold = startHold(loop, key, 'lock', lock, requestedAt);
          try {
            await fencedWork(hold, lock, sectionMs);
          } finally {
            hold.releasedAt = Date.now();
          }
        },
        { ttl: config.ttl, autoExtend: true, signal: stopping.signal },
      );
    } finally {
      if (hold) await finishHold(hold);
    }
  }

  async function holdPermit(loop, name) {
    const requestedAt = Date.now();
    let hold;
    try {
      await semaphores.withPermit(
        name,
        config.limit,
        async (permit) => {
          hold = startHold(loop, name, 'semaphore', permit, requestedAt);
          hold.limit = config.limit;
          const { drawn, before } = drawMoment(config.sectionMs);
          await workWhileExpiring(hold, permit, before);
          await drawFence(hold, permit, drawn);
          await workWhileExpiring(hold, permit, config.sectionMs - before);
          sampleValidity(hold, permit);
          hold.releasedAt = Date.now();
        },
        { ttl: config.ttl, autoExtend: true, signal: stopping.signal },
      );
    } finally {
      if (hold) await finishHold(hold);
    }
  }

  async function holdBrokenLock(loop, key, section) {
    const requestedAt = Date.now();
    const lock = await locks.lock(key, { ttl: config.ttl, signal: stopping.signal });
    const hold = startHold(loop, key, 'lock', lock, requestedAt);
    const sectionMs = section % config.longEvery === 0 ? config.ttl * 1.5 : config.sectionMs;
    try {
      await fencedWork(hold, lock, sectionMs);
    } finally {
      hold.releasedAt = Date.now();
      await Promise.all(lockServers.map((server) => server.del(lockKeyOf(key))));
      await finishHold(hold);
    }
  }

  function startHold(loop, key, kind, lease, requestedAt) {
    const acquiredAt = Date.now();
    const hold = {
      pid: process.pid,
      worker: loop,
      key,
      kind,
      token: lease.token,
      requestedAt,
      acquiredAt,
      validUntil: acquiredAt,
    };
    sampleValidity(hold, lease);
    lease.signal.addEventListener(
      'abort',
      () => {
        const error = lease.signal.reason;
        hold.lost = { at: Date.now(), reason: error?.reason ?? describeError(error), code: error?.code };
        count(summary.lost, hold.lost.reason);
        if (settledHolds.has(hold)) summary.abortsAfterRelease++;
      },
      { once: true },
    );
    return hold;
  }

  // Works `sectionMs`; with `expires`, calls expire() with a random ttl at random moments meanwhile
  // (one in three sections of the short loops), sometimes without awaiting it before the next one.
  async function workWhileExpiring(hold, lease, sectionMs) {
    if (!config.expires || sectionMs <= 0) return delay(Math.max(0, sectionMs));
    const end = Date.now() + sectionMs;
    const expiring = [];
    do {
      if (Math.random() < 1 / 3) {
        const ttl = Math.round(config.ttl * (0.3 + Math.random() * 0.9));
        // From the moment a shorter ttl is sent, the holder gives up the rest of its lease: it may be
        // applied at once, and another owner granted the key when it runs out.
        hold.validUntil = Math.min(hold.validUntil, Date.now() + ttl);
        const answer = lease.expire(ttl).then(
          (extended) => {
            count(summary.expires, extended ? 'extended' : 'notOurs');
            sampleValidity(hold, lease);
          },
          (error) => {
            count(summary.expires, error?.code ?? 'OTHER');
            if (error?.code !== 'BACKEND_UNAVAILABLE') summary.unexpected.push(`expire: ${describeError(error)}`);
          },
        );
        expiring.push(answer);
        if (Math.random() < 0.5) await answer;
      }
      await delay(Math.max(0, Math.min(end - Date.now(), Math.random() * (config.ttl / 3))));
    } while (Date.now() < end);
    await Promise.all(expiring);
  }

  async function finishHold(hold) {
    settledHolds.add(hold);
    summary.holds++;
    const { work, ...record } = hold;
    const pipeline = resource.pipeline().rpush(`${run}:holds`, JSON.stringify(record));
    if (work) pipeline.rpush(`${run}:work`, JSON.stringify(work));
    await pipeline.exec();
  }

  // Take a unit, work on it, write it with the fence, drawn at a random moment of the section. No look
  // at `signal` before the write on purpose: a holder paused between its last check and its write is
  // the case fences exist for.
  async function fencedWork(hold, lease, sectionMs) {
    const { drawn, before } = mode === 'broken' ? { drawn: 'grant', before: 0 } : drawMoment(sectionMs);
    if (drawn === 'grant' && !(await drawFence(hold, lease, drawn))) return;
    const queue = `${run}:queue:${hold.key}`;
    const unit = await resource.claimUnit(queue, `${run}:claims`, claimOf(hold));
    sampleValidity(hold, lease);
    const work = (ms) => (mode === 'broken' ? delay(ms) : workWhileExpiring(hold, lease, ms));
    if (drawn !== 'grant') {
      await work(before);
      if (!(await drawFence(hold, lease, drawn))) {
        // No fence, no write: the unit waits for a later holder.
        if (unit !== null) await resource.unclaimUnit(`${run}:claims`, queue, unit);
        return;
      }
      // The claim names its fence now (the suite freezes a holder caught with a fenced claim).
      if (unit !== null) await resource.hset(`${run}:claims`, unit, claimOf(hold));
    }
    await work(sectionMs - before);
    if (unit === null) return;
    const applied =
      (await resource.writeFenced(
        `${run}:highest:${hold.key}`,
        `${run}:claims`,
        `${run}:applied`,
        queue,
        unit,
        String(hold.fence),
        hold.key,
      )) === 1;
    if (applied) summary.appliedWrites++;
    else summary.rejectedWrites++;
    hold.work = { unit, fence: hold.fence, applied, key: hold.key, pid: process.pid, at: Date.now() };
    sampleValidity(hold, lease);
  }

  function claimOf(hold) {
    return JSON.stringify({ pid: process.pid, key: hold.key, token: hold.token, fence: hold.fence });
  }

  /**
   * When in a section of `sectionMs` the fence is drawn: right after the grant, after a random part of
   * the section, or at its end — a third of the holds each. `before`: ms of the section before the draw.
   */
  function drawMoment(sectionMs) {
    const roll = Math.random();
    if (roll < 1 / 3) return { drawn: 'grant', before: 0 };
    if (roll < 2 / 3) return { drawn: 'during', before: Math.random() * sectionMs };
    return { drawn: 'end', before: sectionMs };
  }

  /**
   * Draws the lease's fence into `hold` (with `fencedAt`, right after it came); true if one was drawn.
   * Redis away: tried again while the lease lasts. Lost (taken, expired): the hold goes without one.
   */
  async function drawFence(hold, lease, drawn) {
    for (;;) {
      try {
        hold.fence = await lease.fence();
        hold.fencedAt = Date.now();
        hold.drawn = drawn;
        return true;
      } catch (error) {
        const code = error?.code ?? 'OTHER';
        count(summary.fenceErrors, code === 'LOCK_LOST' ? `${code} ${error.reason}` : code);
        if (code === 'BACKEND_UNAVAILABLE' && !lease.signal.aborted && lease.validity > 0) {
          await delay(20);
          continue;
        }
        if (!['LOCK_LOST', 'BACKEND_UNAVAILABLE'].includes(code))
          summary.unexpected.push(`fence: ${describeError(error)}`);
        return false;
      }
    }
  }
}

/** `nest_lock.handovers` so far, by `nest_lock.via`. */
async function handoversCounted() {
  await metricReader.forceFlush();
  const scope = metricExporter
    .getMetrics()
    .at(-1)
    ?.scopeMetrics.find((scopeMetrics) => scopeMetrics.scope.name === 'nest-lock');
  const metric = scope?.metrics.find((candidate) => candidate.descriptor.name === 'nest_lock.handovers');
  const counts = {};
  for (const point of metric?.dataPoints ?? []) {
    const via = point.attributes['nest_lock.via'];
    counts[via] = (counts[via] ?? 0) + point.value;
  }
  return counts;
}

/**
 * The latest deadline the holder is sure of: `now + validity`, sampled only while validity > 0. Once the
 * lease is lost (or its deadline passed before the watchdog noticed) validity reads 0, and `now + 0` would
 * be later than the real deadline. `now` is read first, so the sample errs early. An `expire()` with a
 * shorter ttl lowers it when it is sent (see `workWhileExpiring`): the holder gives up what it had.
 */
function sampleValidity(hold, lease) {
  const now = Date.now();
  const validity = lease.validity;
  if (validity > 0) hold.validUntil = Math.max(hold.validUntil, now + validity);
}

function defineResourceScripts(resource) {
  // Moves the next unit of a key's queue to the claims (unit -> who holds it), or returns nil.
  // KEYS: queue, claims; ARGV: the claim.
  resource.defineCommand('claimUnit', {
    numberOfKeys: 2,
    lua: `
local unit = redis.call('LPOP', KEYS[1])
if not unit then return false end
redis.call('HSET', KEYS[2], unit, ARGV[1])
return unit`,
  });
  // Gives a claimed unit back to its queue, unwritten. KEYS: claims, queue; ARGV: the unit.
  resource.defineCommand('unclaimUnit', {
    numberOfKeys: 2,
    lua: `
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1`,
  });
  // The fenced write: applies the unit if its fence is not below the highest seen for the key (and makes
  // it the highest), else puts the unit back in the queue for a later holder. Fences go in and out as
  // decimal strings: they are microsecond clocks, beyond what cjson prints exactly.
  // KEYS: highest fence, claims, applied log, queue; ARGV: unit, fence, key. Returns 1 if applied, else 0.
  resource.defineCommand('writeFenced', {
    numberOfKeys: 4,
    lua: `
local highest = redis.call('GET', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if highest and tonumber(ARGV[2]) < tonumber(highest) then
  redis.call('RPUSH', KEYS[4], ARGV[1])
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('RPUSH', KEYS[3], '{"unit":' .. cjson.encode(ARGV[1]) .. ',"key":' .. cjson.encode(ARGV[3]) .. ',"fence":' .. ARGV[2] .. '}')
return 1`,
  });
}

/** The lock's own Redis key (the store's documented layout; checked against the store when it can tell). */
function lockKeyOf(key) {
  const lockKey = `lock:{${key}}`;
  const store = app.get(LockStore);
  if (typeof store.keysOf === 'function' && store.keysOf(lockKind, key)[0] !== lockKey) {
    throw new Error(`the lock key of "${key}" is ${store.keysOf(lockKind, key)[0]}, not ${lockKey}`);
  }
  return lockKey;
}

function withoutUndefined(options) {
  return Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
}

function pick(items) {
  return items[Math.floor(Math.random() * items.length)];
}

function count(counts, name) {
  counts[name] = (counts[name] ?? 0) + 1;
}

function describeError(error) {
  return error instanceof Error ? `${error.name} ${error.code ?? ''}: ${error.message}` : String(error);
}
