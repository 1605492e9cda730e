/**
 * Tool-layer benchmark: runner dispatch overhead and accumulator scaling.
 *
 *   npx tsx bench/tools.ts            full run
 *   npx tsx bench/tools.ts --quick    fewer sizes and repetitions
 *
 * `runToolsBench()` returns the same numbers for a bench driver.
 */
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { ToolCallAccumulator, defineTool, runToolCalls, streamToolCalls, type AnyTool, type ToolCall } from '../src/tools/index.js';
import { Prng } from '../src/gguf/prng.js';

export interface ToolsBenchOptions {
  /** Fewer repetitions and sizes (for CI and smoke runs). */
  readonly quick?: boolean;
}

interface DispatchRow {
  readonly case: string;
  readonly calls: number;
  readonly medianMs: number;
  readonly minMs: number;
  /** Median wall time per call. */
  readonly usPerCall: number;
}

interface AccumulatorRow {
  readonly megabytes: number;
  readonly bytes: number;
  readonly fragments: number;
  readonly medianMs: number;
  readonly minMs: number;
  /** From the minimum, the least noisy figure on a shared machine. */
  readonly nsPerByte: number;
  readonly mbPerSecond: number;
}

/** A deterministic PRNG in [0, 1) (the project's mulberry32). */
function rng(seed: number): () => number {
  const p = new Prng(seed);
  return () => p.next();
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Median and minimum wall time of `repeats` runs after three warm-up runs. */
async function timeIt(repeats: number, fn: () => Promise<void> | void): Promise<{ median: number; min: number }> {
  for (let i = 0; i < 3; i++) await fn();
  const samples: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const start = performance.now();
    await fn();
    samples.push(performance.now() - start);
  }
  return { median: median(samples), min: Math.min(...samples) };
}

async function benchDispatch(quick: boolean): Promise<DispatchRow[]> {
  const n = 1_000;
  const repeats = quick ? 5 : 25;
  const tools: AnyTool[] = Array.from({ length: n }, (_, i) => defineTool({ name: `tool_${i}`, handler: (args: Record<string, unknown>) => args.i }));
  const calls: ToolCall[] = Array.from({ length: n }, (_, i) => ({ id: `c${i}`, name: `tool_${i}`, arguments: { i } }));
  const stringCalls: ToolCall[] = calls.map((c) => ({ ...c, arguments: JSON.stringify(c.arguments) }));
  const rows: DispatchRow[] = [];
  const add = (label: string, t: { median: number; min: number }): void => {
    rows.push({ case: label, calls: n, medianMs: round(t.median, 2), minMs: round(t.min, 2), usPerCall: round((t.median * 1000) / n, 2) });
  };
  add('runToolCalls, 1,000 tools, 1 call each', await timeIt(repeats, async () => void (await runToolCalls(calls, tools))));
  add('runToolCalls, JSON-string arguments', await timeIt(repeats, async () => void (await runToolCalls(stringCalls, tools))));
  add(
    'runToolCalls, maxConcurrency Infinity',
    await timeIt(repeats, async () => void (await runToolCalls(calls, tools, { maxConcurrency: Infinity }))),
  );
  add(
    'streamToolCalls, 1,000 tools',
    await timeIt(repeats, async () => {
      for await (const _event of streamToolCalls(calls, tools)) {
        // drain
      }
    }),
  );
  return rows;
}

/** A JSON object of about `bytes` bytes: a long string with escapes plus an array of small records. */
function argumentsOfSize(bytes: number, random: () => number): string {
  const words = ['alpha', 'beta', 'gamma', 'delta', 'quote"d', 'line\nbreak', 'tab\there', 'unicodé', 'back\\slash'];
  const parts: string[] = [];
  let size = 0;
  const half = bytes / 2;
  while (size < half) {
    const w = words[Math.floor(random() * words.length)]!;
    parts.push(w);
    size += w.length + 1;
  }
  const items: { id: number; name: string; ok: boolean }[] = [];
  let itemBytes = 0;
  while (itemBytes < half) {
    const item = { id: items.length, name: words[items.length % words.length]!, ok: random() < 0.5 };
    items.push(item);
    itemBytes += JSON.stringify(item).length + 1;
  }
  return JSON.stringify({ content: parts.join(' '), items });
}

function fragmentsOf(text: string, random: () => number, maxFragment: number): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < text.length) {
    const n = 1 + Math.floor(random() * maxFragment);
    out.push(text.slice(i, i + n));
    i += n;
  }
  return out;
}

async function benchAccumulator(quick: boolean): Promise<AccumulatorRow[]> {
  const sizes = quick ? [0.25, 0.5, 1] : [0.25, 0.5, 1, 2];
  const repeats = quick ? 3 : 11;
  const rows: AccumulatorRow[] = [];
  for (const mb of sizes) {
    const random = rng(42 + mb * 100);
    const text = argumentsOfSize(Math.round(mb * 1024 * 1024), random);
    const fragments = fragmentsOf(text, random, 64).map((piece) => [{ index: 0, function: { arguments: piece } }]);
    const t = await timeIt(repeats, () => {
      const acc = new ToolCallAccumulator();
      acc.feed([{ index: 0, id: 'call_big', type: 'function', function: { name: 'write_file' } }]);
      for (const f of fragments) acc.feed(f);
      const [call] = acc.finalize();
      if (call === undefined || call._invalid_arguments !== undefined) throw new Error('benchmark input did not round-trip');
    });
    rows.push({
      megabytes: mb,
      bytes: Buffer.byteLength(text),
      fragments: fragments.length,
      medianMs: round(t.median, 2),
      minMs: round(t.min, 2),
      nsPerByte: round((t.min * 1e6) / Buffer.byteLength(text), 1),
      mbPerSecond: round(Buffer.byteLength(text) / 1024 / 1024 / (t.min / 1000), 1),
    });
  }
  return rows;
}

function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** Runs both benchmarks and returns their rows plus the machine facts. */
export async function runToolsBench(opts: ToolsBenchOptions = {}): Promise<Record<string, unknown>> {
  const quick = opts.quick === true;
  const dispatch = await benchDispatch(quick);
  const accumulator = await benchAccumulator(quick);
  const perByte = accumulator.map((r) => r.nsPerByte);
  return {
    name: 'tools',
    node: process.version,
    quick,
    dispatch,
    accumulator,
    /** Largest over smallest ns/byte: about 1 for linear scaling. */
    accumulatorScaling: round(Math.max(...perByte) / Math.min(...perByte), 2),
  };
}

function table(rows: readonly Record<string, unknown>[]): string {
  if (rows.length === 0) return '';
  const keys = Object.keys(rows[0]!);
  const cells = [keys, ...rows.map((r) => keys.map((k) => String(r[k])))];
  const widths = keys.map((_, i) => Math.max(...cells.map((row) => row[i]!.length)));
  const line = (row: readonly string[]): string => `| ${row.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(keys), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...cells.slice(1).map(line)].join('\n');
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const result = await runToolsBench({ quick });
  const out = process.stdout;
  out.write(`tools benchmark (node ${process.version}${quick ? ', quick' : ''})\n\n`);
  out.write('Dispatch overhead (trivial synchronous handlers)\n');
  out.write(`${table(result.dispatch as DispatchRow[] as unknown as Record<string, unknown>[])}\n\n`);
  out.write('Accumulator: OpenAI fragments of 1-64 bytes, feed + finalize\n');
  out.write(`${table(result.accumulator as AccumulatorRow[] as unknown as Record<string, unknown>[])}\n\n`);
  out.write(`ns/byte largest/smallest: ${String(result.accumulatorScaling)} (1.0 = perfectly linear)\n`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    process.stderr.write(`${String((err as Error)?.stack ?? err)}\n`);
    process.exitCode = 1;
  });
}
