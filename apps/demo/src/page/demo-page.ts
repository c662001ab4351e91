/**
 * The page at `/`: fires a hundred requests at a cold product, with the lock on or off, and
 * shows what came back. One file, no build step: plain HTML, CSS and a small script.
 */
export const DEMO_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>nest-lock: the cache stampede</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 760px; margin: 2rem auto; padding: 0 1rem; color: #222; }
  button { font: inherit; padding: .5rem 1.2rem; cursor: pointer; }
  .result { display: flex; gap: 2rem; margin: 1.5rem 0; }
  .figure { font-size: 2.5rem; font-weight: 600; }
  .label { color: #666; font-size: .9rem; }
  svg rect { fill: #4a7bd0; }
  svg text { font-size: 11px; fill: #444; }
</style>
</head>
<body>
<h1>100 requests, one cold product</h1>
<p>Each request reads the cache, misses, and needs the product from a slow backend.
With the lock, one request loads it while the others wait and then read the cache.
Without it, every miss goes to the backend. (A browser sends only a few requests to one host
at a time, so the latencies show some queueing; <code>npm run demo:stampede</code> fires all at once.)</p>
<p>
  <label><input type="checkbox" id="lock" checked> lock on</label>
  &nbsp; <button id="fire">Fire 100 requests</button>
  <span id="state"></span>
</p>
<div class="result">
  <div><div class="figure" id="backend-calls">–</div><div class="label">backend calls</div></div>
  <div><div class="figure" id="statuses">–</div><div class="label">statuses</div></div>
  <div><div class="figure" id="p99">–</div><div class="label">p99 latency</div></div>
</div>
<svg id="histogram" width="720" height="220" role="img" aria-label="latency histogram"></svg>
<script>
const $ = (id) => document.getElementById(id);

async function fire() {
  $('fire').disabled = true;
  $('state').textContent = 'running…';
  const id = 1 + Math.floor(Math.random() * 10000);
  await fetch('/stats', { method: 'DELETE' });
  await fetch('/cache/' + id, { method: 'DELETE' });
  const query = $('lock').checked ? '' : '?lock=off';
  const results = await Promise.all(Array.from({ length: 100 }, async () => {
    const started = performance.now();
    // no-store: the browser's HTTP cache would otherwise hold back identical requests until the first returns.
    const response = await fetch('/products/' + id + query, { cache: 'no-store' });
    await response.text();
    return { status: response.status, ms: performance.now() - started };
  }));
  const stats = await (await fetch('/stats')).json();
  const counts = {};
  for (const { status } of results) counts[status] = (counts[status] || 0) + 1;
  const latencies = results.map((r) => r.ms).sort((a, b) => a - b);
  $('backend-calls').textContent = stats.backendCalls;
  $('statuses').textContent = Object.entries(counts).map(([s, n]) => n + '×' + s).join(' ');
  $('p99').textContent = Math.round(latencies[98]) + ' ms';
  drawHistogram(latencies);
  $('state').textContent = 'product ' + id + ', lock ' + ($('lock').checked ? 'on' : 'off');
  $('fire').disabled = false;
}

function drawHistogram(latencies) {
  const svg = $('histogram');
  const width = 720, height = 220, bins = 20, top = Math.max(...latencies) || 1;
  const counts = new Array(bins).fill(0);
  for (const ms of latencies) counts[Math.min(bins - 1, Math.floor((ms / top) * bins))]++;
  const highest = Math.max(...counts);
  const barWidth = width / bins;
  svg.innerHTML = counts.map((count, i) => {
    const barHeight = (count / highest) * (height - 40);
    return '<rect x="' + (i * barWidth + 2) + '" y="' + (height - 20 - barHeight) + '" width="' + (barWidth - 4) +
      '" height="' + barHeight + '"><title>' + count + ' requests</title></rect>' +
      (count ? '<text x="' + (i * barWidth + 4) + '" y="' + (height - 24 - barHeight) + '">' + count + '</text>' : '');
  }).join('') +
    '<text x="0" y="' + (height - 4) + '">0 ms</text>' +
    '<text x="' + (width - 60) + '" y="' + (height - 4) + '">' + Math.round(top) + ' ms</text>';
}

$('fire').addEventListener('click', fire);
</script>
</body>
</html>
`;
