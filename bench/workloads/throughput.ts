// Concurrent conversations: 1, 4, 8 and 16 at once against llamux (one context with as many
// sequences, continuous batching on its native thread) and against node-llama-cpp 3.21.1 (one
// context with as many sequences, its own batching). Every conversation sends a distinct prompt and
// decodes a fixed number of tokens greedily (end of generation banned). Per level: aggregate decode
// tokens/s over the span where every conversation is decoding, end-to-end generated tokens/s, and
// p50/p95 time to first token from the common start, all measured on the client.
import { loadModel, setLogger, type Model } from '../../src/index.js';
import { withNodeLlamaCpp } from '../drivers/node-llama-cpp.js';
import { llamaServerBinary, startLlamaServer, streamTokenCompletion } from '../drivers/llama-server.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';
import { fmtSpread, pairedRatio, spread, type Spread } from '../stats.js';

export interface LevelResult {
  conversations: number;
  /** Generated tokens/s of all conversations together while every one of them decodes. */
  aggregateDecodeTokensPerSec: number;
  /** All generated tokens over start to last token. */
  endToEndTokensPerSec: number;
  ttftP50Ms: number;
  ttftP95Ms: number;
  ttftsMs: number[];
  totalMs: number;
  /** Length of the all-decoding window the aggregate figure comes from. */
  windowMs: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[i]!;
}

/** Per-token arrival times (ms from the common start) of each conversation → the level's figures. */
export function summarize(n: number, times: number[][]): LevelResult {
  const firsts = times.map((t) => t[0] ?? NaN);
  const lasts = times.map((t) => t.at(-1) ?? NaN);
  const from = Math.max(...firsts);
  const to = Math.min(...lasts);
  const all = times.flat();
  const end = Math.max(...lasts);
  let aggregate: number;
  let windowMs = to - from;
  const inWindow = all.filter((t) => t > from && t <= to).length;
  if (windowMs > 0 && inWindow >= n) {
    aggregate = inWindow / (windowMs / 1000);
  } else {
    // No span where all decode at once (very short runs): tokens after each first token over
    // the time after the last first token.
    windowMs = end - from;
    aggregate = windowMs > 0 ? (all.length - n) / (windowMs / 1000) : NaN;
  }
  const sorted = [...firsts].sort((a, b) => a - b);
  return {
    conversations: n,
    aggregateDecodeTokensPerSec: aggregate,
    endToEndTokensPerSec: all.length / (end / 1000),
    ttftP50Ms: percentile(sorted, 0.5),
    ttftP95Ms: percentile(sorted, 0.95),
    ttftsMs: sorted,
    totalMs: end,
    windowMs,
  };
}

async function llamuxLevel(model: Model, n: number, promptTokens: number, genTokens: number, threads: number, unifiedKv = true): Promise<LevelResult> {
  // Unified KV: one pool of cells, and every token attends over all sequences' cells (masked).
  // Per-sequence KV: each sequence its own contextSize / n cells, attending over its own only.
  const contextSize = unifiedKv ? n * (promptTokens + genTokens + 16) + 64 : n * (promptTokens + genTokens + 80);
  const ctx = await model.createContext({ contextSize, sequences: n, threads, batchThreads: threads, toolCallMarkers: false, unifiedKv });
  try {
    const bias = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
    await ctx.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
    const t0 = performance.now();
    const times = await Promise.all(
      Array.from({ length: n }, async (_, i) => {
        const out: number[] = [];
        const gen = ctx.generate({ prompt: benchPrompt(promptTokens, model.vocab.size, i + 1), maxTokens: genTokens, temperature: 0, logitBias: bias, emitTokenIds: true });
        for await (const ev of gen) {
          const t = performance.now() - t0;
          if (ev.type === 'text') for (let j = 0; j < (ev.tokens?.length ?? 1); j++) out.push(t);
          else if (ev.type === 'final') while (out.length < ev.generatedTokens) out.push(t);
        }
        return out;
      }),
    );
    return summarize(n, times);
  } finally {
    await ctx.dispose();
  }
}

async function nlcLevel(
  model: import('node-llama-cpp').LlamaModel,
  m: typeof import('node-llama-cpp'),
  eogTokens: readonly number[],
  nVocab: number,
  n: number,
  promptTokens: number,
  genTokens: number,
  threads: number,
): Promise<LevelResult> {
  // node-llama-cpp's contextSize is per sequence.
  const ctx = await model.createContext({ contextSize: promptTokens + genTokens + 16, sequences: n, threads, batchSize: 512 });
  try {
    const bias = new m.TokenBias(model.tokenizer);
    for (const t of eogTokens) bias.set(t as never, 'never');
    const seqs = Array.from({ length: n }, () => ctx.getSequence());
    {
      let i = 0;
      for await (const _ of seqs[0]!.evaluate(benchPrompt(8, nVocab, 99) as never, { temperature: 0, tokenBias: bias })) if (++i >= 4) break;
      await seqs[0]!.clearHistory();
    }
    const t0 = performance.now();
    const times = await Promise.all(
      seqs.map(async (seq, i) => {
        const out: number[] = [];
        for await (const _ of seq.evaluate(benchPrompt(promptTokens, nVocab, i + 1) as never, { temperature: 0, tokenBias: bias })) {
          out.push(performance.now() - t0);
          if (out.length >= genTokens) break;
        }
        return out;
      }),
    );
    return summarize(n, times);
  } finally {
    await ctx.dispose();
  }
}

/** llama-server with `n` slots; n concurrent streamed /v1/completions through the openai client. */
async function llamaServerLevel(bin: string, path: string, nVocab: number, n: number, promptTokens: number, genTokens: number, threads: number): Promise<LevelResult> {
  const srv = await startLlamaServer(bin, path, { ctx: n * (promptTokens + genTokens + 16) + 64, parallel: n, threads });
  try {
    await streamTokenCompletion(srv.openai, benchPrompt(8, nVocab, 99), 4, { ignore_eos: true });
    const t0 = performance.now();
    const runs = await Promise.all(
      Array.from({ length: n }, (_, i) => streamTokenCompletion(srv.openai, benchPrompt(promptTokens, nVocab, i + 1), genTokens, { ignore_eos: true }, t0)),
    );
    return summarize(n, runs.map((r) => r.tokenTimesMs));
  } finally {
    await srv.close();
  }
}

export interface ThroughputBenchOptions {
  quick?: boolean;
  threads?: number;
  model?: BenchModelName;
  levels?: number[];
  /** Runs per level; within a run the systems take turns, so a slow spell weighs on each (default 3, quick 1). */
  runs?: number;
}

type SystemName = 'llamux' | 'llamuxPerSequenceKv' | 'nodeLlamaCpp' | 'llamaServer';

export async function runThroughputBench(opts: ThroughputBenchOptions = {}): Promise<string> {
  setLogger('silent');
  // Quick runs use one thread: llama.cpp's spinning thread pool on a busy 2-core machine stalls for whole
  // scheduler slices per step (quick mode measures nothing, it only has to finish).
  const threads = opts.threads ?? (opts.quick ? 1 : 2);
  const name: BenchModelName = opts.model ?? (opts.quick ? 'tiny-random' : '250m-q8_0');
  const levels = opts.levels ?? [1, 4, 8, 16];
  const runs = opts.runs ?? (opts.quick ? 1 : 3);
  const promptTokens = opts.quick ? 32 : 128;
  const genTokens = opts.quick ? 24 : 96;
  progress(`throughput: preparing ${name}`);
  const bm = await ensureBenchModel(name);
  const ls = opts.quick ? { why: 'quick mode' } : llamaServerBinary();
  // results[system][level index][run]
  const results: Record<SystemName, LevelResult[][]> = { llamux: [], llamuxPerSequenceKv: [], nodeLlamaCpp: [], llamaServer: [] };
  for (const k of Object.keys(results) as SystemName[]) results[k] = levels.map(() => []);
  const model = await loadModel(bm.path);
  const nVocab = model.vocab.size;
  const eogTokens = [...model.vocab.eogTokens];
  try {
    await withNodeLlamaCpp(bm.path, async (m, mod) => {
      for (let run = 0; run < runs; run++) {
        for (const [li, n] of levels.entries()) {
          const tag = `run ${run + 1}/${runs}, ${n} conversation${n > 1 ? 's' : ''}`;
          progress(`throughput: llamux, ${tag}`);
          results.llamux[li]!.push(await llamuxLevel(model, n, promptTokens, genTokens, threads));
          // one sequence: the same KV either way
          progress(`throughput: llamux with per-sequence KV, ${tag}`);
          results.llamuxPerSequenceKv[li]!.push(n > 1 ? await llamuxLevel(model, n, promptTokens, genTokens, threads, false) : results.llamux[li]!.at(-1)!);
          if (ls.path) {
            progress(`throughput: llama-server, ${tag}`);
            results.llamaServer[li]!.push(await llamaServerLevel(ls.path, bm.path, nVocab, n, promptTokens, genTokens, threads));
          }
          progress(`throughput: node-llama-cpp, ${tag}`);
          results.nodeLlamaCpp[li]!.push(await nlcLevel(m, mod, eogTokens, nVocab, n, promptTokens, genTokens, threads));
        }
      }
    });
  } finally {
    await model.dispose();
  }
  progressDone();
  const agg = (sys: SystemName, li: number): Spread => spread(results[sys][li]!.map((r) => r.aggregateDecodeTokensPerSec));
  const e2e = (sys: SystemName, li: number): Spread => spread(results[sys][li]!.map((r) => r.endToEndTokensPerSec));
  const ttft = (sys: SystemName, li: number): string => {
    const p50 = spread(results[sys][li]!.map((r) => r.ttftP50Ms));
    const p95 = spread(results[sys][li]!.map((r) => r.ttftP95Ms));
    return `${fmt(p50.median)} / ${fmt(p95.median)}`;
  };
  const rows: Row[] = levels.map((n, i) => {
    const server = ls.path ? agg('llamaServer', i) : undefined;
    return {
      conversations: n,
      'llamux decode tok/s': fmtSpread(agg('llamux', i)),
      'llamux per-sequence KV tok/s': fmtSpread(agg('llamuxPerSequenceKv', i)),
      ...(server ? {
        'llama-server decode tok/s': fmtSpread(server),
        'llamux / llama-server': pairedRatio(agg('llamux', i), server),
        'per-sequence / llama-server': pairedRatio(agg('llamuxPerSequenceKv', i), server),
      } : {}),
      'node-llama-cpp decode tok/s': fmtSpread(agg('nodeLlamaCpp', i)),
      'llamux / nlc': pairedRatio(agg('llamux', i), agg('nodeLlamaCpp', i)),
      'llamux end-to-end tok/s': fmtSpread(e2e('llamux', i)),
      ...(server ? { 'llama-server end-to-end tok/s': fmtSpread(e2e('llamaServer', i)) } : {}),
      'llamux TTFT p50 / p95 ms': ttft('llamux', i),
      ...(server ? { 'llama-server TTFT p50 / p95 ms': ttft('llamaServer', i) } : {}),
      'nlc TTFT p50 / p95 ms': ttft('nodeLlamaCpp', i),
    };
  });
  const out: string[] = [];
  out.push(table(`throughput: concurrent conversations (${bm.description}, ${threads} thread${threads > 1 ? 's' : ''}; each a distinct ${promptTokens}-token prompt, ${genTokens} tokens decoded; median (min–max) of ${runs} interleaved run${runs > 1 ? 's' : ''}, ratios the median of run-by-run ratios)`, rows));
  const file = writeResult('throughput', {
    mode: opts.quick ? 'quick' : 'full',
    model: { name, description: bm.description, sizeBytes: bm.sizeBytes },
    settings: { threads, levels, promptTokens, genTokens, runs },
    llamux: results.llamux,
    llamuxPerSequenceKv: results.llamuxPerSequenceKv,
    nodeLlamaCpp: results.nodeLlamaCpp,
    llamaServer: ls.path ? results.llamaServer : { notMeasured: ls.why },
  });
  if (!ls.path) out.push(`note: llama-server not measured (${ls.why})\n`);
  out.push(`results: ${file}`);
  return out.join('\n');
}
