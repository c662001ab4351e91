#!/usr/bin/env node
// Why a leader's term matters. Process A leads and decides to write; before its write leaves, A is
// frozen (a long GC pause, a stopped VM) past its lease. B leads meanwhile, under a higher term, and
// writes. A runs again and sends the write it had decided on: the ledger, which keeps the highest
// term it has accepted, refuses it. (A itself stops leading the moment it runs again: `isLeader` is
// false and its `signal` aborted — but the write it had already decided on is on its way.)
//
// usage: REDIS_URL=redis://127.0.0.1:6379 npm run example:leader
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import { LeaderService, LockModule } from '../libs/lock/dist/index.js';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const ledgerKey = `ledger:${process.argv[3] ?? process.pid}`;

// The protected resource, on Redis: it appends an entry only with a term at least as high as the
// highest it has accepted. KEYS[1] the highest term, KEYS[2] the entries; ARGV[1] the term, ARGV[2]
// the entry. Returns 1 (accepted) or 0 (refused: a deposed leader's late write).
const FENCED_APPEND = `
local highest = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < highest then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1`;

if (process.argv[2] === 'A' || process.argv[2] === 'B') await leader(process.argv[2]);
else await orchestrate();

/** One process: campaigns for the ledger's writer, and writes once it leads (A after a pause). */
async function leader(name) {
  const app = await NestFactory.createApplicationContext(LockModule.forRoot({ redis: url }), { logger: false });
  const ledger = new Redis(url);
  ledger.defineCommand('fencedAppend', { numberOfKeys: 2, lua: FENCED_APPEND });
  const leadership = app.get(LeaderService).campaign('ledger-writer', { ttl: 300 });
  await leadership.whenLeader();
  const { term, signal } = leadership;
  console.log(JSON.stringify({ name, term }));
  // A decides to write now, and is frozen before the write leaves (the orchestrator stops it here).
  if (name === 'A') await sleep(1_000);
  // What A knows when it runs again, before the write it had decided on leaves.
  const stillLeading = leadership.isLeader && leadership.term === term;
  const aborted = signal.aborted;
  const accepted = await ledger.fencedAppend(`${ledgerKey}:term`, `${ledgerKey}:entries`, term, name);
  console.log(JSON.stringify({ name, accepted: accepted === 1, stillLeading, aborted }));
  ledger.disconnect();
  await app.close();
}

/** Starts A, freezes it once it leads, starts B, then lets A run again. */
async function orchestrate() {
  const self = fileURLToPath(import.meta.url);
  const start = (name) => {
    const child = spawn(process.execPath, [self, name, String(process.pid)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const lines = createInterface({ input: child.stdout });
    const next = async () => JSON.parse((await once(lines, 'line'))[0]);
    return { child, next, exited: once(child, 'exit') };
  };
  const a = start('A');
  const { term: aTerm } = await a.next();
  a.child.kill('SIGSTOP');
  console.log(`A leads with term ${aTerm}, decides to write, and is frozen before the write leaves`);
  const b = start('B');
  const { term: bTerm } = await b.next();
  const bWrite = await b.next();
  console.log(
    `B leads with term ${bTerm} once A's lease ran out, and writes: ${bWrite.accepted ? 'accepted' : 'refused'}`,
  );
  a.child.kill('SIGCONT');
  const aWrite = await a.next();
  console.log(
    `A runs again (still leading under term ${aTerm}: ${aWrite.stillLeading}, signal aborted ${aWrite.aborted}); ` +
      `its write with term ${aTerm}: ${aWrite.accepted ? 'accepted' : 'refused'}`,
  );
  const redis = new Redis(url);
  console.log(`ledger entries: ${JSON.stringify(await redis.lrange(`${ledgerKey}:entries`, 0, -1))}`);
  await redis.del(`${ledgerKey}:term`, `${ledgerKey}:entries`);
  redis.disconnect();
  await Promise.all([a.exited, b.exited]);
}
