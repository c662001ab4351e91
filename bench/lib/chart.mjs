// Plain SVG, written by hand: wait time against percentile, one line per library, the
// percentile axis in "nines" (50 %, 90 %, 99 %, 99.9 % … equally spaced) so that the tail — where
// unfair locks differ — gets as much room as the median. No browser, no chart library.
import { quantile } from './stats.mjs';

const COLORS = ['#d62728', '#1f77b4', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
const WIDTH = 900;
const PANEL_HEIGHT = 360;
const MARGIN = { left: 70, right: 260, top: 46, bottom: 50 };

/**
 * `panels`: `[{ title, series: [{ label, waits: sorted ms[], subject }] }]`, stacked vertically.
 * Returns the SVG text.
 */
export function waitChart(panels, caption) {
  const height = panels.length * PANEL_HEIGHT + 30;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
  ];
  panels.forEach((panel, index) => parts.push(drawPanel(panel, index * PANEL_HEIGHT)));
  parts.push(`<text x="${MARGIN.left}" y="${height - 10}" fill="#555">${escape(caption)}</text>`, '</svg>');
  return parts.join('\n') + '\n';
}

function drawPanel({ title, series }, top) {
  const drawn = series.filter((line) => line.waits.length > 0);
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const plotHeight = PANEL_HEIGHT - MARGIN.top - MARGIN.bottom;
  const x0 = MARGIN.left;
  const y0 = top + MARGIN.top;
  const out = [`<text x="${x0}" y="${top + 24}" font-size="15" font-weight="bold">${escape(title)}</text>`];
  if (drawn.length === 0) {
    out.push(`<text x="${x0}" y="${y0 + 20}">no data</text>`);
    return out.join('\n');
  }

  // x: nines, -log10(1 - p), up to the largest sample count (its max); y: log10(ms).
  const maxNines = Math.max(2, ...drawn.map((line) => Math.log10(line.waits.length)));
  const smallest = Math.min(...drawn.map((line) => Math.max(line.waits[0], 0.01)));
  const largest = Math.max(...drawn.map((line) => line.waits.at(-1)));
  const yLow = Math.floor(Math.log10(smallest));
  const yHigh = Math.max(yLow + 1, Math.ceil(Math.log10(largest)));
  const px = (nines) => x0 + (nines / maxNines) * plotWidth;
  const py = (ms) => y0 + plotHeight - ((Math.log10(Math.max(ms, 10 ** yLow)) - yLow) / (yHigh - yLow)) * plotHeight;

  // grid and axes
  for (let decade = yLow; decade <= yHigh; decade++) {
    const y = py(10 ** decade).toFixed(1);
    out.push(`<line x1="${x0}" y1="${y}" x2="${x0 + plotWidth}" y2="${y}" stroke="#ddd"/>`);
    out.push(
      `<text x="${x0 - 8}" y="${y}" text-anchor="end" dominant-baseline="middle">${formatMs(10 ** decade)}</text>`,
    );
  }
  const ticks = [
    [0, '0 %'],
    [Math.log10(2), '50 %'],
    [1, '90 %'],
    [2, '99 %'],
    [3, '99.9 %'],
    [4, '99.99 %'],
  ].filter(([nines]) => nines <= maxNines);
  for (const [nines, label] of ticks) {
    const x = px(nines).toFixed(1);
    out.push(`<line x1="${x}" y1="${y0}" x2="${x}" y2="${y0 + plotHeight}" stroke="#ddd"/>`);
    out.push(`<text x="${x}" y="${y0 + plotHeight + 16}" text-anchor="middle">${label}</text>`);
  }
  out.push(
    `<rect x="${x0}" y="${y0}" width="${plotWidth}" height="${plotHeight}" fill="none" stroke="#888"/>`,
    `<text x="${x0 + plotWidth / 2}" y="${y0 + plotHeight + 36}" text-anchor="middle" fill="#333">percentile of waits (right edge: the longest wait)</text>`,
    `<text transform="translate(${x0 - 52} ${y0 + plotHeight / 2}) rotate(-90)" text-anchor="middle" fill="#333">wait (ms, log scale)</text>`,
  );

  // lines
  drawn.forEach((line, index) => {
    const color = COLORS[index % COLORS.length];
    const n = line.waits.length;
    const lineNines = Math.log10(n);
    const points = [];
    const steps = 240;
    for (let step = 0; step <= steps; step++) {
      const nines = (step / steps) * lineNines;
      const p = step === steps ? 1 : 1 - 10 ** -nines;
      points.push(`${px(nines).toFixed(1)},${py(quantile(line.waits, p)).toFixed(1)}`);
    }
    const width = line.subject ? 3 : 1.8;
    out.push(
      `<polyline fill="none" stroke="${color}" stroke-width="${width}" stroke-linejoin="round" points="${points.join(' ')}"/>`,
    );
    // legend
    const ly = y0 + 8 + index * 38;
    const lx = x0 + plotWidth + 16;
    out.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 22}" y2="${ly}" stroke="${color}" stroke-width="${width}"/>`);
    out.push(
      `<text x="${lx + 28}" y="${ly}" dominant-baseline="middle" font-weight="${line.subject ? 'bold' : 'normal'}">${escape(line.label)}</text>`,
    );
    const summary = `p50 ${formatMs(quantile(line.waits, 0.5))} · p99 ${formatMs(quantile(line.waits, 0.99))} · max ${formatMs(line.waits.at(-1))}`;
    out.push(
      `<text x="${lx + 28}" y="${ly + 15}" dominant-baseline="middle" fill="#555" font-size="11">${summary}</text>`,
    );
  });
  return out.join('\n');
}

export function formatMs(ms) {
  if (!Number.isFinite(ms)) return '–';
  if (ms >= 1000) return `${(ms / 1000).toFixed(ms >= 10_000 ? 0 : 1)} s`;
  if (ms >= 10) return `${Math.round(ms)} ms`;
  if (ms >= 1) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}

function escape(text) {
  return String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
