// Takes a lock or a permit with a short ttl and keeps renewing it, so that only the death of
// this process can free it; prints one line once it holds it, then runs until it is killed.
//
// usage: node hold-until-killed.mjs <redisUrl> <lock|read-lock|semaphore> <key or name> <ttl>
import { startWorkerApp } from './worker-app.mjs';

const [url, kind, id, ttl] = process.argv.slice(2);
const { locks, semaphores } = await startWorkerApp(url);
const lease =
  kind === 'semaphore'
    ? await semaphores.acquire(id, 1, { ttl: Number(ttl) })
    : await locks.lock(id, { ttl: Number(ttl), mode: kind === 'read-lock' ? 'read' : 'write' });
setInterval(() => void lease.expire(), Number(ttl) / 5);
process.stdout.write(`${JSON.stringify({ token: lease.token })}\n`);
