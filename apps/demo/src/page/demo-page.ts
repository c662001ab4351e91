/**
 * The page at `/`: asks the server to fire a hundred requests at a cold product (`POST /stampede`),
 * with the lock on, off or both, and shows the two modes side by side and the last few runs; below,
 * the scheduled jobs: the skip-when-busy price refresh and the leader-only stock report, with who leads.
 * One file, no build step: plain HTML, CSS and a small script.
 */
export const DEMO_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>nest-lock: the cache stampede</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 1100px; margin: 2rem auto; padding: 0 1rem; color: #222; }
  button { font: inherit; padding: .4rem 1rem; cursor: pointer; }
  .controls { display: flex; flex-wrap: wrap; gap: 1rem; align-items: center; }
  .panels { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 1rem; margin: 1.5rem 0; }
  .panel { border: 1px solid #ddd; border-radius: 6px; padding: .5rem 1rem 1rem; }
  .panel h2 { margin: 0; font-size: 1.1rem; }
  .figures { display: flex; flex-wrap: wrap; gap: .5rem 1.2rem; margin: .5rem 0; }
  .figure { font-size: 1.4rem; font-weight: 600; white-space: nowrap; }
  .label, .product { color: #666; font-size: .85rem; }
  #panel-on rect { fill: #4a7bd0; }
  #panel-off rect { fill: #d0704a; }
  #panel-single-flight rect { fill: #4aa06a; }
  svg text { font-size: 11px; fill: #444; }
  table { border-collapse: collapse; font-size: .9rem; }
  th, td { padding: .2rem .8rem; text-align: right; border-bottom: 1px solid #eee; }
</style>
</head>
<body>
<h1>100 requests, one cold product</h1>
<p>Each request reads the cache, misses, and needs the product from a slow backend.
With the lock, one request loads it while the others wait and then read the cache.
Without it, every miss goes to the backend. With single-flight, one request loads it and every other
receives the product when it is loaded, in every process, without taking the lock in turn. The server fires the requests itself, all at once,
each over its own connection: a browser would send only a few at a time to one host.</p>
<div class="controls">
  <label><input type="checkbox" id="lock" checked> <span id="lock-label">lock on</span></label>
  <button id="fire">Fire 100 requests</button>
  <button id="fire-both">Fire both: lock on, then off</button>
  <button id="fire-all">Fire all three: lock, none, single-flight</button>
  <label id="spread-control" hidden><input type="checkbox" id="spread"> spread over <span id="processes"></span> processes</label>
  <span id="state"></span>
</div>
<div class="panels">
${['on', 'off', 'single-flight'].map(panel).join('')}
</div>
<h2>A scheduled job on one process</h2>
<p>Every demo process fires the "nightly" price refresh at the same moments (every 3 seconds here:
<code>@Cron('*/3 * * * * *')</code>). <code>@WithLock('demo:price-refresh', { onBusy: 'skip', holdAtLeast: 1_500 })</code>
lets one process run each firing; the others skip it quietly. Start several demo processes on one
<code>REDIS_URL</code> to see it.</p>
<div class="figures" id="job">
  <div><div class="figure" id="job-fired">–</div><div class="label">firings, all processes</div></div>
  <div><div class="figure" id="job-ran">–</div><div class="label">runs</div></div>
  <div><div class="figure" id="job-skipped">–</div><div class="label">skipped</div></div>
</div>
<table id="job-runs">
  <thead><tr><th>firing</th><th>run by</th></tr></thead>
  <tbody></tbody>
</table>
<h2>A leader-only job</h2>
<p>The demo processes also elect a leader (<code>LeaderService</code>). The stock report fires at the same
moments in every process, but <code>@LeaderOnly('demo')</code> runs it on the leader alone, firing after
firing, where the price refresh above goes to whichever process takes the lock first. Stop the leading
process: another leads within the lease (5 s), at once on Ctrl-C, under a higher term.</p>
<p id="leader">Leading: <strong id="leader-by">nobody yet</strong>, term <strong id="leader-term">–</strong>,
since <span id="leader-since">–</span>. This page is served by <span id="leader-here">–</span>.</p>
<div class="figures" id="report">
  <div><div class="figure" id="report-fired">–</div><div class="label">firings, all processes</div></div>
  <div><div class="figure" id="report-ran">–</div><div class="label">runs, on the leader</div></div>
  <div><div class="figure" id="report-skipped">–</div><div class="label">skipped, not leading</div></div>
</div>
<table id="report-runs">
  <thead><tr><th>firing</th><th>run by</th><th>term</th></tr></thead>
  <tbody></tbody>
</table>
<h2>Recent runs</h2>
<table id="history">
  <thead><tr><th>lock</th><th>product</th><th>processes</th><th>backend calls</th><th>statuses</th><th>p50</th><th>p99</th><th>Redis cmds / req</th></tr></thead>
  <tbody></tbody>
</table>
<script>
const $ = (selector) => document.querySelector(selector);
const KEEP_RUNS = 8;
const shown = {};

function showLockLabel() {
  $('#lock-label').textContent = $('#lock').checked ? 'lock on' : 'lock off';
}

async function fire(lock) {
  for (const button of document.querySelectorAll('button')) button.disabled = true;
  $('#state').textContent = 'running…';
  try {
    const response = await fetch('/stampede', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ n: 100, lock, spread: $('#spread').checked }),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.message);
    for (const run of answer.runs) {
      shown[run.lock] = run;
      addToHistory(run);
    }
    for (const run of Object.values(shown)) showRun(run);
    $('#state').textContent = 'done: ' + answer.runs.map((run) => modeText(run.lock) + ', product ' + run.productId).join('; ');
  } catch (error) {
    $('#state').textContent = 'failed: ' + error.message;
  } finally {
    for (const button of document.querySelectorAll('button')) button.disabled = false;
  }
}

function statusText(statuses) {
  return Object.entries(statuses).map(([status, count]) => count + '×' + status).join(' ');
}

function showRun(run) {
  const panel = $('#panel-' + run.lock);
  panel.querySelector('.backend-calls').textContent = run.backendCalls;
  panel.querySelector('.statuses').textContent = statusText(run.statuses);
  panel.querySelector('.p50').textContent = run.latencyMs.p50 + ' ms';
  panel.querySelector('.p99').textContent = run.latencyMs.p99 + ' ms';
  panel.querySelector('.commands').textContent = run.redisCommandsPerRequest ?? 'n/a';
  panel.querySelector('.product').textContent =
    run.requests + ' requests for product ' + run.productId + ' on ' + run.processes + ' process(es)';
  // One time axis for both panels, so that their bars line up.
  const spanMs = Math.max(...Object.values(shown).map((shownRun) => shownRun.histogram.binMs * shownRun.histogram.counts.length));
  drawHistogram(panel.querySelector('svg'), run.histogram, spanMs);
}

function drawHistogram(svg, { binMs, counts }, spanMs) {
  const width = 400, height = 180, highest = Math.max(...counts);
  const barWidth = (binMs / spanMs) * width;
  svg.innerHTML = counts.map((count, i) => {
    if (count === 0) return '';
    const barHeight = (count / highest) * (height - 40);
    const x = i * barWidth;
    return '<rect x="' + (x + 1) + '" y="' + (height - 20 - barHeight) + '" width="' + Math.max(1, barWidth - 2) +
      '" height="' + barHeight + '"><title>' + count + ' requests, ' + i * binMs + '–' + (i + 1) * binMs + ' ms</title></rect>' +
      '<text x="' + x + '" y="' + (height - 24 - barHeight) + '">' + count + '</text>';
  }).join('') +
    '<text x="0" y="' + (height - 4) + '">0 ms</text>' +
    '<text x="' + (width - 50) + '" y="' + (height - 4) + '">' + spanMs + ' ms</text>';
}

function modeText(lock) {
  return lock === 'single-flight' ? 'single-flight' : 'lock ' + lock;
}

function addToHistory(run) {
  const row = document.createElement('tr');
  const cells = [modeText(run.lock), run.productId, run.processes, run.backendCalls, statusText(run.statuses),
    run.latencyMs.p50 + ' ms', run.latencyMs.p99 + ' ms', run.redisCommandsPerRequest ?? 'n/a'];
  for (const text of cells) row.appendChild(document.createElement('td')).textContent = text;
  const body = $('#history tbody');
  body.prepend(row);
  while (body.rows.length > KEEP_RUNS) body.lastElementChild.remove();
}

async function offerSpread() {
  const { processes } = await (await fetch('/stampede')).json();
  if (processes < 2) return;
  $('#processes').textContent = processes;
  $('#spread-control').hidden = false;
}

async function showJob() {
  try {
    const [stats, runs] = await Promise.all([(await fetch('/stats')).json(), (await fetch('/stats/jobs')).json()]);
    $('#job-fired').textContent = stats.priceRefreshFirings;
    $('#job-ran').textContent = stats.priceRefreshRuns;
    $('#job-skipped').textContent = stats.priceRefreshFirings - stats.priceRefreshRuns;
    showJobRuns('#job-runs', runs, ['by']);
  } catch {
    // The next poll tries again.
  }
}

async function showLeader() {
  try {
    const [stats, { leader, here, runs }] = await Promise.all([(await fetch('/stats')).json(), (await fetch('/leader')).json()]);
    $('#report-fired').textContent = stats.stockReportFirings;
    $('#report-ran').textContent = stats.stockReportRuns;
    $('#report-skipped').textContent = stats.stockReportFirings - stats.stockReportRuns;
    if (leader) {
      $('#leader-by').textContent = leader.by;
      $('#leader-term').textContent = leader.term;
      $('#leader-since').textContent = new Date(leader.since).toLocaleTimeString();
    }
    $('#leader-here').textContent = here.by + (here.leads ? ', the leader' : ', not leading');
    showJobRuns('#report-runs', runs, ['by', 'term']);
  } catch {
    // The next poll tries again.
  }
}

function showJobRuns(table, runs, fields) {
  $(table + ' tbody').replaceChildren(...runs.slice(0, 6).map((run) => {
    const row = document.createElement('tr');
    row.appendChild(document.createElement('td')).textContent = new Date(run.firing).toLocaleTimeString();
    for (const field of fields) row.appendChild(document.createElement('td')).textContent = run[field];
    return row;
  }));
}

$('#lock').addEventListener('change', showLockLabel);
$('#fire').addEventListener('click', () => fire($('#lock').checked ? 'on' : 'off'));
$('#fire-both').addEventListener('click', () => fire('both'));
$('#fire-all').addEventListener('click', () => fire('all'));
showLockLabel();
void offerSpread();
void showJob();
void showLeader();
setInterval(showJob, 1500);
setInterval(showLeader, 1500);
</script>
</body>
</html>
`;

function panel(lock: string): string {
  return `<section class="panel" id="panel-${lock}">
  <h2>${lock === 'single-flight' ? 'single-flight' : `lock ${lock}`}</h2>
  <div class="figures">
    <div><div class="figure backend-calls">–</div><div class="label">backend calls</div></div>
    <div><div class="figure statuses">–</div><div class="label">statuses</div></div>
    <div><div class="figure p50">–</div><div class="label">p50</div></div>
    <div><div class="figure p99">–</div><div class="label">p99</div></div>
    <div><div class="figure commands">–</div><div class="label">Redis commands / request</div></div>
  </div>
  <svg viewBox="0 0 400 180" width="100%" role="img" aria-label="latency histogram, ${lock}"></svg>
  <div class="product">not fired yet</div>
</section>
`;
}
