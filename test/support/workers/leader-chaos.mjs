// One process of the leader-election chaos test: campaigns for a name and, while it leads, writes
// its term to a fenced counter on another Redis (the resource) every few ms (see FENCED_WRITE: a
// violation is a process that found itself leading after a newer leader began). Prints one JSON line
// per change of leadership.
//
// usage: node leader-chaos.mjs <lockTarget> <resourceRedisUrl> <name> <ttl> <fair> <election> [retryDelay]
//   lockTarget: a redis:// URL, cluster:<host:port>,… (a Redis Cluster), redlock:<url>,… (Redlock over
//               independent masters) or sentinel:<name>,<host:port>,… (a primary watched by sentinels,
//               with waitForReplicas: one replica acknowledges every lease); the naive election runs
//               on a redis:// URL only
//   fair:     true | false | strict (the module's default for the campaign's lock: a rolling deploy mixes them)
//   election: nest-lock (LeaderService) | naive (the control: SET NX PX, renewed with PEXPIRE, leading
//             until a renewal says otherwise, with a term from the resource's INCR)
//   retryDelay: the campaign's wait after a store failure, in ms (100 unless given)
//
// SIGTERM closes the application (nest-lock: the campaign resigns), prints {"event":"closed"}, exits.
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import { setTimeout as delay } from 'node:timers/promises';
import { LeaderService, LockModule } from '../../../libs/lock/dist/index.js';

const [lockUrl, resourceUrl, name, ttlArg, fairArg, election, retryDelayArg = '100'] = process.argv.slice(2);
const ttl = Number(ttlArg);
const fair = fairArg === 'strict' ? 'strict' : fairArg === 'true';
const print = (line) => process.stdout.write(`${JSON.stringify({ ...line, pid: process.pid, at: Date.now() })}\n`);

// KEYS[1] the counter (a hash: the highest term accepted, since when its leader led, writes, late
// writes, violations), KEYS[2] the violations' list. ARGV: the writer's term, its pid, when it last
// found itself leading (its check right before this write), and since when it leads — times on this
// machine's clock, in ms with fractions.
// A write with a term below the highest accepted is refused. It is a violation — two leaderships at
// once — when its writer still found itself leading after the newer leader began leading; else it
// is a late write (sent while it led, arrived after its successor's), what the fence is there for.
const FENCED_WRITE = `
local highest = tonumber(redis.call('HGET', KEYS[1], 'term') or '0')
local term = tonumber(ARGV[1])
if term < highest then
  local since = tonumber(redis.call('HGET', KEYS[1], 'since'))
  if tonumber(ARGV[3]) >= since then
    redis.call('HINCRBY', KEYS[1], 'violations', 1)
    redis.call('RPUSH', KEYS[2], ARGV[2] .. ' led under term ' .. ARGV[1] .. ' at ' .. ARGV[3] .. ', after term ' .. highest .. ' began at ' .. since)
  else
    redis.call('HINCRBY', KEYS[1], 'late', 1)
  end
  return 0
end
if term > highest then redis.call('HSET', KEYS[1], 'term', term, 'since', ARGV[4]) end
redis.call('HINCRBY', KEYS[1], 'writes', 1)
return 1`;

const resource = new Redis(resourceUrl, { maxRetriesPerRequest: null });
resource.defineCommand('fencedWrite', { numberOfKeys: 2, lua: FENCED_WRITE });
const clock = () => (performance.timeOrigin + performance.now()).toFixed(3);
const write = (term, checkedAt, since) =>
  resource.fencedWrite(`${name}:counter`, `${name}:violations`, term, process.pid, checkedAt, since);

if (election === 'naive') await naive();
else await withLeaderService();

async function withLeaderService() {
  const app = await NestFactory.createApplicationContext(
    LockModule.forRoot({ ...storeOf(lockUrl), defaults: { fair, maxStep: 100 }, commandTimeout: 500, logger: false }),
    { logger: false },
  );
  const leadership = app.get(LeaderService).campaign(name, {
    ttl,
    retryDelay: Number(retryDelayArg),
    onElected: (term, signal) => {
      const since = clock();
      print({ event: 'elected', term });
      void lead(term, signal, since);
    },
    onRevoked: (reason) => print({ event: 'revoked', reason: reason.reason }),
  });
  // Writes while it leads: `isLeader` is checked right before each write, as a careful leader would.
  async function lead(term, signal, since) {
    while (!signal.aborted) {
      if (leadership.isLeader && leadership.term === term) await write(term, clock(), since).catch(() => undefined);
      await delay(5);
    }
  }
  process.once('SIGTERM', () => void app.close().then(() => exit()));
  print({ event: 'ready' });
}

/** The control: what a hand-written election does, and where it fails. */
async function naive() {
  const locks = new Redis(lockUrl, { maxRetriesPerRequest: 1, commandTimeout: 500 });
  locks.on('error', () => undefined);
  const token = `${process.pid}`;
  let stopped = false;
  process.once('SIGTERM', () => {
    stopped = true;
    void locks
      .eval(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
        1,
        `leader:${name}`,
        token,
      )
      .catch(() => undefined)
      .then(() => exit());
  });
  print({ event: 'ready' });
  while (!stopped) {
    const won = await locks.set(`leader:${name}`, token, 'PX', ttl, 'NX').catch(() => null);
    if (won !== 'OK') {
      await delay(50);
      continue;
    }
    const term = await resource.incr(`${name}:naive-term`);
    const since = clock();
    print({ event: 'elected', term });
    let leading = true;
    const renew = setInterval(() => {
      void locks.pexpire(`leader:${name}`, ttl).then(
        (renewed) => (leading = leading && renewed === 1),
        () => (leading = false),
      );
    }, ttl / 3);
    while (leading && !stopped) {
      await write(term, clock(), since).catch(() => undefined);
      await delay(5);
    }
    clearInterval(renew);
    print({ event: 'revoked', reason: 'taken' });
  }
}

/** The module's store options for a lock target. */
function storeOf(target) {
  const [kind, list] = target.split(/:(.*)/s);
  if (kind === 'cluster') return { redis: { cluster: { nodes: list.split(',').map((node) => `redis://${node}`) } } };
  if (kind === 'redlock') return { redlock: { nodes: list.split(','), quarantine: 0 } };
  if (kind === 'sentinel') {
    const [name, ...sentinels] = list.split(',');
    const addresses = sentinels.map((address) => ({
      host: address.split(':')[0],
      port: Number(address.split(':')[1]),
    }));
    return { redis: { name, sentinels: addresses }, waitForReplicas: { replicas: 1, timeout: 100 } };
  }
  return { redis: target };
}

function exit() {
  print({ event: 'closed' });
  resource.disconnect();
  process.exit(0);
}
