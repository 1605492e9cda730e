// Hand-written SVG line charts for the benchmark results (no dependencies).
//
//   npx tsx bench/plot.ts [bench/results/replay-....json]
//
// redraws bench/results/replay-ttft.svg from a replay result (default: the newest), and copies it
// to docs/replay-ttft.svg when that result is from a full (not --quick) run.
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export interface PlotSeries {
  label: string;
  /** One value per x position (turn); non-finite or non-positive values are skipped. */
  values: number[];
}

export interface LineChartOptions {
  title: string;
  /** A smaller second line under the title. */
  subtitle?: string;
  xLabel?: string;
  yLabel?: string;
  /** X tick labels (default 0, 1, 2, ...). */
  xTicks?: string[];
  width?: number;
  height?: number;
}

const COLORS = ['#1f77b4', '#2ca02c', '#d62728', '#ff7f0e', '#9467bd', '#8c564b'];
const DASHES = ['', '6 3', '2 3', '8 3 2 3', '', ''];

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function num(n: number): string {
  return (Math.round(n * 10) / 10).toString();
}

function tickLabel(v: number): string {
  if (v >= 1000) return `${v / 1000} s`;
  if (v >= 1) return `${v} ms`;
  return `${v} ms`;
}

/** A line chart with a logarithmic y axis (values span orders of magnitude: cold vs cached turns). */
export function lineChartSvg(series: PlotSeries[], o: LineChartOptions): string {
  const width = o.width ?? 760;
  const height = o.height ?? 440;
  const legendH = 18 * series.length + 12;
  const m = { left: 76, right: 24, top: o.subtitle ? 58 : 44, bottom: 56 + legendH };
  const pw = width - m.left - m.right;
  const ph = height - m.top - m.bottom;
  const n = Math.max(1, ...series.map((s) => s.values.length));
  const all = series.flatMap((s) => s.values).filter((v) => Number.isFinite(v) && v > 0);
  const lo = Math.floor(Math.log10(all.length ? Math.min(...all) : 1));
  let hi = Math.ceil(Math.log10(all.length ? Math.max(...all) : 10));
  if (hi <= lo) hi = lo + 1;
  const x = (i: number) => m.left + (n === 1 ? pw / 2 : (i / (n - 1)) * pw);
  const y = (v: number) => m.top + ph - ((Math.log10(v) - lo) / (hi - lo)) * ph;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`);
  parts.push(`<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`);
  parts.push(`<text x="${width / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">${esc(o.title)}</text>`);
  if (o.subtitle) parts.push(`<text x="${width / 2}" y="42" text-anchor="middle" font-size="11" fill="#555555">${esc(o.subtitle)}</text>`);
  // grid and y ticks (decades labelled, 2x and 5x as light lines)
  for (let d = lo; d <= hi; d++) {
    for (const f of [1, 2, 5]) {
      const v = f * 10 ** d;
      if (Math.log10(v) > hi + 1e-9) continue;
      const yy = num(y(v));
      parts.push(`<line x1="${m.left}" y1="${yy}" x2="${m.left + pw}" y2="${yy}" stroke="${f === 1 ? '#cccccc' : '#eeeeee'}" stroke-width="1"/>`);
      if (f === 1 || hi - lo <= 2) parts.push(`<text x="${m.left - 8}" y="${num(y(v) + 4)}" text-anchor="end" fill="#333333">${esc(tickLabel(v))}</text>`);
    }
  }
  // x ticks
  for (let i = 0; i < n; i++) {
    const xx = num(x(i));
    parts.push(`<line x1="${xx}" y1="${m.top + ph}" x2="${xx}" y2="${m.top + ph + 5}" stroke="#333333"/>`);
    parts.push(`<text x="${xx}" y="${m.top + ph + 19}" text-anchor="middle" fill="#333333">${esc(o.xTicks?.[i] ?? String(i))}</text>`);
  }
  parts.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#333333"/>`);
  if (o.xLabel) parts.push(`<text x="${m.left + pw / 2}" y="${m.top + ph + 40}" text-anchor="middle">${esc(o.xLabel)}</text>`);
  if (o.yLabel) parts.push(`<text transform="translate(16 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`);
  // series
  series.forEach((s, si) => {
    const color = COLORS[si % COLORS.length]!;
    const dash = DASHES[si % DASHES.length]!;
    const pts = s.values.map((v, i) => [i, v] as const).filter(([, v]) => Number.isFinite(v) && v > 0);
    if (pts.length > 1) {
      const d = pts.map(([i, v], j) => `${j === 0 ? 'M' : 'L'}${num(x(i))} ${num(y(v))}`).join(' ');
      parts.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ''}/>`);
    }
    for (const [i, v] of pts) {
      parts.push(`<circle cx="${num(x(i))}" cy="${num(y(v))}" r="3.5" fill="${color}"><title>${esc(`${s.label}, ${o.xTicks?.[i] ?? i}: ${v.toFixed(1)} ms`)}</title></circle>`);
    }
    const ly = m.top + ph + 56 + si * 18;
    parts.push(`<line x1="${m.left}" y1="${ly}" x2="${m.left + 28}" y2="${ly}" stroke="${color}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ''}/>`);
    parts.push(`<circle cx="${m.left + 14}" cy="${ly}" r="3.5" fill="${color}"/>`);
    parts.push(`<text x="${m.left + 36}" y="${ly + 4}">${esc(s.label)}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** Time to first token per turn of the replay suite, as an SVG file. Returns the path. */
export function writeReplayPlot(series: PlotSeries[], o: { title: string; subtitle?: string; file: string }): string {
  const n = Math.max(0, ...series.map((s) => s.values.length));
  const svg = lineChartSvg(series, {
    title: o.title,
    ...(o.subtitle !== undefined ? { subtitle: o.subtitle } : {}),
    xLabel: 'turn (0: system prompt + user request; then one tool call + tool result per turn)',
    yLabel: 'time to first token (log scale)',
    xTicks: Array.from({ length: n }, (_, i) => String(i)),
  });
  mkdirSync(dirname(o.file), { recursive: true });
  writeFileSync(o.file, svg);
  return o.file;
}

export function replayPlotTitle(modelName: string, quick: boolean): string {
  return `Agent conversation: time to first token per turn (${modelName}${quick ? ', quick run' : ''})`;
}

export function replayPlotSubtitle(description: string, threads: number): string {
  return `${description}${threads > 0 ? `, ${threads} thread${threads > 1 ? 's' : ''}` : ''}`;
}

interface ReplayResultFile {
  mode?: 'quick' | 'full';
  model?: { name?: string; description?: string };
  settings?: { threads?: number };
  systems: Record<string, string>;
  turns: Record<string, Array<{ ttftMs: number }>>;
}

/** Redraws the plot from a replay result file; copies it to docs/ for a full run. */
export function plotReplayResult(file: string, root: string): string[] {
  const r = JSON.parse(readFileSync(file, 'utf8')) as ReplayResultFile;
  const series = Object.entries(r.turns).map(([key, turns]) => ({ label: r.systems[key] ?? key, values: turns.map((t) => t.ttftMs) }));
  const quick = r.mode === 'quick';
  const out = writeReplayPlot(series, {
    title: replayPlotTitle(r.model?.name ?? 'model', quick),
    subtitle: replayPlotSubtitle(r.model?.description ?? '', r.settings?.threads ?? 0),
    file: join(root, 'bench', 'results', 'replay-ttft.svg'),
  });
  const written = [out];
  if (!quick) {
    const docs = join(root, 'docs', 'replay-ttft.svg');
    copyFileSync(out, docs);
    written.push(docs);
  }
  return written;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
  const dir = join(root, 'bench', 'results');
  const file =
    process.argv[2] ??
    readdirSync(dir)
      .filter((f) => /^replay-.*\.json$/.test(f))
      .sort()
      .map((f) => join(dir, f))
      .at(-1);
  if (!file) {
    console.error('no replay result in bench/results: run "npm run bench -- --suite replay" first');
    process.exitCode = 1;
  } else {
    for (const f of plotReplayResult(file, root)) console.log(`wrote ${f}`);
  }
}
