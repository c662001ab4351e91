// A child process of the read-write lock test: `workers` concurrent loops, each running `sections`
// sections on one key, one in four to write and the rest to read, under the lock (`lock`: the
// writers with mode 'write', the readers with mode 'read') or (control, `none`) under nothing.
//
// Every section checks in with one Redis script as it starts and checks out as it ends: the script
// counts the writers and readers inside and answers whom it found, so that a writer beside anybody,
// or a reader beside a writer, is seen by the process that entered — across processes, whatever the
// clocks. Writers also read-await-write a counter (a lost update would show), and the script keeps
// the largest number of processes whose readers were inside at once.
//
// usage: node read-write-sections.mjs <redisUrl> <key> <processes> <workers> <sections> <lock|none>
import { setTimeout as delay } from 'node:timers/promises';
import { startTogether, startWorkerApp } from './worker-app.mjs';

const [url, key, processes, workers, sections, mode] = process.argv.slice(2);
const { locks, redis, close } = await startWorkerApp(url);
const inside = `${key}:inside`;
const counter = `${key}:counter`;

// KEYS[1] the hash of who is inside (w: writers, r: readers, r:<pid>: readers of one process),
// KEYS[2] the largest number of processes with readers inside at once; ARGV[1] 'w' or 'r', ARGV[2]
// the pid. Returns {writers, readers} inside besides the caller, as it entered.
redis.defineCommand('enterSection', {
  numberOfKeys: 2,
  lua: `
local writers = tonumber(redis.call('HGET', KEYS[1], 'w') or '0')
local readers = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
if ARGV[1] == 'r' and redis.call('HINCRBY', KEYS[1], 'r:' .. ARGV[2], 1) == 1 then
  local pids = redis.call('HINCRBY', KEYS[1], 'pids', 1)
  if pids > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], pids) end
end
return {writers, readers}
`,
});
redis.defineCommand('leaveSection', {
  numberOfKeys: 1,
  lua: `
redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if ARGV[1] == 'r' and redis.call('HINCRBY', KEYS[1], 'r:' .. ARGV[2], -1) == 0 then
  redis.call('HINCRBY', KEYS[1], 'pids', -1)
end
return 1
`,
});

let violations = 0;
let writes = 0;
let reads = 0;
async function section(role) {
  const [writers, readers] = await redis.enterSection(inside, `${key}:reading-processes`, role, process.pid);
  if (writers > 0 || (role === 'w' && readers > 0)) violations++;
  if (role === 'w') {
    const value = Number(await redis.get(counter));
    await delay(1);
    await redis.set(counter, value + 1);
    writes++;
  } else {
    await delay(1 + Math.random() * 2);
    reads++;
  }
  await redis.leaveSection(inside, role, process.pid);
}

await startTogether(redis, `${key}:ready`, Number(processes));
await Promise.all(
  Array.from({ length: Number(workers) }, async () => {
    for (let i = 0; i < Number(sections); i++) {
      const role = Math.random() < 0.25 ? 'w' : 'r';
      if (mode === 'lock') {
        await locks.withLock(key, () => section(role), { mode: role === 'w' ? 'write' : 'read', timeout: 60_000 });
      } else {
        await section(role);
      }
    }
  }),
);

await close();
process.stdout.write(JSON.stringify({ violations, writes, reads }));
