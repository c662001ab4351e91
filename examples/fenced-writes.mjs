#!/usr/bin/env node
// Why a lock alone is not enough, and how a fence fixes it. Holder A stalls past its lease (a GC
// pause, a slow disk); B takes the lock meanwhile and writes; A wakes up believing it still holds
// the lock. The ledger keeps the highest fence it has seen and refuses A's late write. A holder that
// will write draws its fence first (`await lock.fence()`: one round trip, while the lock is its own).
//
// usage: npm run example:fencing            (the memory store)
//        REDIS_URL=redis://127.0.0.1:6379 npm run example:fencing
import { NestFactory } from '@nestjs/core';
import { setTimeout as sleep } from 'node:timers/promises';
import { LockModule, LockService } from '../libs/lock/dist/index.js';

/** The protected resource: it accepts a write only with a fence at least as high as the last one. */
class FencedLedger {
  highestFence = 0;
  entries = [];

  write(fence, entry) {
    if (fence < this.highestFence) return false;
    this.highestFence = fence;
    this.entries.push(entry);
    return true;
  }
}

const options = process.env.REDIS_URL ? { redis: process.env.REDIS_URL } : {};
const app = await NestFactory.createApplicationContext(LockModule.forRoot(options), { logger: false });
const locks = app.get(LockService);
const ledger = new FencedLedger();
const key = `ledger:${process.pid}`;

const a = await locks.lock(key, { ttl: 200 });
const aFence = await a.fence();
console.log(`A holds the lock with fence ${aFence} (ttl 200 ms), then stalls for 300 ms`);
await sleep(300);

const b = await locks.lock(key, { ttl: 5_000 });
const bFence = await b.fence();
console.log(`B takes the lock with fence ${bFence} and writes: ${ledger.write(bFence, 'B') ? 'accepted' : 'rejected'}`);

const lost = a.signal.aborted
  ? `signal aborted (${a.signal.reason.code}, ${a.signal.reason.reason})`
  : 'signal not aborted';
console.log(
  `A wakes up: ${lost}; its write with fence ${aFence}: ${ledger.write(aFence, 'A') ? 'accepted' : 'rejected'}`,
);
console.log(`ledger entries: ${JSON.stringify(ledger.entries)}`);

await b.unlock();
await app.close();
