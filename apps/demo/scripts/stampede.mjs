#!/usr/bin/env node
// Fires N concurrent requests at one cold product on one or more demo processes, then prints
// what happened: backend calls, status counts, latency percentiles, Redis commands per request (with
// REDIS_URL). --lock on: the lock and a second read of the cache; off: none; single-flight: one load
// for every request that missed, handed to all of them.
//
// usage: npm run demo:stampede -- [--n 100] [--id <product id>] [--lock on|off|single-flight] [--json] [url ...]
//        (default url: http://localhost:3000; several urls share the requests round-robin)
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    n: { type: 'string', default: '100' },
    id: { type: 'string', default: String(1 + Math.floor(Math.random() * 10_000)) },
    lock: { type: 'string', default: 'on' },
    json: { type: 'boolean', default: false },
  },
});
const urls = positionals.length > 0 ? positionals : ['http://localhost:3000'];
const count = Number(values.n);
if (!Number.isInteger(count) || count < 1) throw new Error(`--n must be a whole number ≥ 1, got ${values.n}`);
if (!['on', 'off', 'single-flight'].includes(values.lock)) {
  throw new Error(`--lock must be on, off or single-flight, got ${values.lock}`);
}
const commandsProcessed = async () => (await (await fetch(`${urls[0]}/stats/redis`)).json()).commandsProcessed;

// A cold start: no cached product, no counts from earlier runs.
await fetch(`${urls[0]}/stats`, { method: 'DELETE' });
await fetch(`${urls[0]}/cache/${values.id}`, { method: 'DELETE' });

const query = values.lock === 'on' ? '' : `?lock=${values.lock}`;
const before = await commandsProcessed();
const results = await Promise.all(
  Array.from({ length: count }, async (_, i) => {
    const started = performance.now();
    const response = await fetch(`${urls[i % urls.length]}/products/${values.id}${query}`);
    await response.arrayBuffer();
    return { status: response.status, ms: performance.now() - started };
  }),
);

const after = await commandsProcessed();
const stats = await (await fetch(`${urls[0]}/stats`)).json();
const statuses = {};
for (const { status } of results) statuses[status] = (statuses[status] ?? 0) + 1;
const latencies = results.map(({ ms }) => ms).sort((a, b) => a - b);
const percentile = (p) =>
  Math.round(latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]);
const summary = {
  requests: count,
  product: Number(values.id),
  lock: values.lock,
  processes: urls.length,
  backendCalls: stats.backendCalls,
  statuses,
  p50Ms: percentile(50),
  p99Ms: percentile(99),
  // Less the INFO that read the first count.
  redisCommandsPerRequest: before === null ? null : Math.round(((after - before - 1) / count) * 100) / 100,
};

if (values.json) {
  console.log(JSON.stringify(summary));
} else {
  console.log(
    `${count} concurrent requests for product ${values.id} on ${urls.length} process(es), lock ${values.lock}:`,
  );
  console.log(`  backend calls: ${summary.backendCalls}`);
  console.log(
    `  statuses:      ${Object.entries(statuses)
      .map(([status, n]) => `${n} × ${status}`)
      .join(', ')}`,
  );
  console.log(`  latency:       p50 ${summary.p50Ms} ms, p99 ${summary.p99Ms} ms`);
  if (summary.redisCommandsPerRequest !== null) {
    console.log(`  Redis:         ${summary.redisCommandsPerRequest} commands per request`);
  }
}
