// A child process of the multi-key lock test: `workers` concurrent loops, each making `transfers`
// transfers of 1 between two of `accounts` accounts picked at random (in a random order), holding both
// under one lock on the two keys (`lock`) or (control, `none`) under nothing. A transfer reads both
// balances, awaits ~1 ms and writes both back: an overlap with another transfer of either account
// loses an update, which shows as a balance other than the net of the transfers made to and from it
// (each process reports its own net per account).
//
// usage: node transfers.mjs <redisUrl> <prefix> <processes> <workers> <transfers> <accounts> <lock|none>
import { setTimeout as delay } from 'node:timers/promises';
import { startTogether, startWorkerApp } from './worker-app.mjs';

const [url, prefix, processes, workers, transfers, accounts, mode] = process.argv.slice(2);
const { locks, redis, close } = await startWorkerApp(url);
const account = (i) => `${prefix}:account:${i}`;

async function transfer(from, to) {
  const [a, b] = await redis.mget(from, to);
  await delay(1);
  await redis.mset(from, Number(a) - 1, to, Number(b) + 1);
}

await startTogether(redis, `${prefix}:ready`, Number(processes));
let done = 0;
const net = Array.from({ length: Number(accounts) }, () => 0);
await Promise.all(
  Array.from({ length: Number(workers) }, async () => {
    for (let i = 0; i < Number(transfers); i++) {
      const from = Math.floor(Math.random() * Number(accounts));
      const to = (from + 1 + Math.floor(Math.random() * (Number(accounts) - 1))) % Number(accounts);
      const keys = [account(from), account(to)];
      if (mode === 'lock') await locks.withLock(keys, () => transfer(...keys), { timeout: 60_000 });
      else await transfer(...keys);
      net[from]--;
      net[to]++;
      done++;
    }
  }),
);

await close();
process.stdout.write(JSON.stringify({ done, net }));
