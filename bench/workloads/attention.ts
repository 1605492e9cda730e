// Small batches over a long KV (issue 13): the time to first token for 1, 3, 16, 63 and 64 new
// tokens after a ~3,800-token prefix that is already in the KV. This is where an F16 vector
// step longer than the attention head (AVX512-FP16 with -march=native) made vector flash
// attention 10–40x slower: batches under 64 tokens were slow, 64 was fast.
// All three systems keep the prefix and decode only the new tokens; timed by the client.
import { withLlamux } from '../drivers/llamux.js';
import { withNodeLlamaCpp } from '../drivers/node-llama-cpp.js';
import { runRawSuffix } from '../drivers/raw.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { progress, progressDone, table, writeResult, type Row } from '../report.js';
import { fmtSpread, ratio, spread, type Spread } from '../stats.js';
import { runNodeLlamaCpp } from '../util.js';

export interface AttentionBenchOptions {
  quick?: boolean;
  threads?: number;
  model?: BenchModelName;
  runs?: number;
}

const SUFFIXES = [1, 3, 16, 63, 64];

export async function runAttentionBench(opts: AttentionBenchOptions = {}): Promise<string> {
  const threads = opts.threads ?? 2;
  const runs = opts.runs ?? (opts.quick ? 3 : 7);
  const bm = await ensureBenchModel(opts.model ?? (opts.quick ? 'llama2-tiny' : '250m-q8_0'));
  const prefix = opts.quick ? 480 : 3830;
  const ctxSize = opts.quick ? 1024 : 4096;
  const raw: Record<number, Spread> = {};
  const llamux: Record<number, Spread> = {};
  const nlc: Record<number, Spread> = {};

  for (const s of SUFFIXES) {
    progress(`attention: raw C++ loop, ${s} tokens over ${prefix}`);
    const r = runRawSuffix(bm.path, prefix, s, runs, threads);
    raw[s] = { median: r.medianMs, min: r.minMs, max: r.maxMs, runs: [r.minMs, r.medianMs, r.maxMs] };
  }

  let nVocab = 0;
  await withLlamux(bm.path, async (model) => {
    nVocab = model.vocab.size;
    const ctx = await model.createContext({ contextSize: ctxSize, sequences: 1, threads, batchThreads: threads });
    try {
      const base = benchPrompt(prefix, nVocab);
      await ctx.complete({ prompt: base, maxTokens: 1, temperature: 0 });
      for (const s of SUFFIXES) {
        const times: number[] = [];
        for (let r = -1; r < runs; r++) { // r = -1: untimed warm-up for this batch shape
          progress(`attention: llamux, ${s} tokens over ${prefix} (${r + 1}/${runs})`);
          const prompt = [...base, ...benchPrompt(s, nVocab, 1031 + r * 31 + s)];
          const t0 = performance.now();
          let first = 0;
          for await (const ev of ctx.generate({ prompt, maxTokens: 1, temperature: 0 })) {
            if (first === 0 && (ev.type === 'text' || ev.type === 'final')) first = performance.now() - t0;
            if (ev.type === 'final' && ev.prefilledTokens !== s) throw new Error(`llamux prefilled ${ev.prefilledTokens} tokens, expected ${s}`);
          }
          if (r >= 0) times.push(first);
        }
        llamux[s] = spread(times);
      }
    } finally {
      await ctx.dispose();
    }
  });

  if (runNodeLlamaCpp) await withNodeLlamaCpp(bm.path, async (model, m) => {
    const ctx = await model.createContext({ contextSize: ctxSize, threads, batchSize: 512 });
    try {
      const seq = ctx.getSequence();
      const base = benchPrompt(prefix, nVocab) as never as import('node-llama-cpp').Token[];
      {
        const it = seq.evaluate(base, { temperature: 0 });
        await it.next();
        await it.return(undefined);
      }
      for (const s of SUFFIXES) {
        const times: number[] = [];
        for (let r = -1; r < runs; r++) {
          progress(`attention: node-llama-cpp, ${s} tokens over ${prefix} (${r + 1}/${runs})`);
          await seq.eraseContextTokenRanges([{ start: prefix, end: seq.nextTokenIndex }]);
          const suffix = benchPrompt(s, nVocab, 1031 + r * 31 + s) as never as import('node-llama-cpp').Token[];
          const t0 = performance.now();
          const it = seq.evaluate(suffix, { temperature: 0 });
          await it.next();
          if (r >= 0) times.push(performance.now() - t0);
          await it.return(undefined);
        }
        nlc[s] = spread(times);
      }
      void m;
    } finally {
      await ctx.dispose();
    }
  });
  const idle = await idleKvTax(bm.path, opts.quick ? 480 : 2000, runs, threads);
  progressDone();

  const rows: Row[] = SUFFIXES.map((s) => ({
    'new tokens': s,
    'raw C++ loop ms': fmtSpread(raw[s]!),
    'llamux TTFT ms': fmtSpread(llamux[s]!),
    'node-llama-cpp TTFT ms': nlc[s] ? fmtSpread(nlc[s]) : 'not run',
    'llamux vs raw': ratio(llamux[s]!, raw[s]!),
    'llamux vs node-llama-cpp': nlc[s] ? ratio(llamux[s]!, nlc[s]) : 'not run',
  }));
  const out = [table(`${bm.description}: new tokens over a ${prefix}-token KV, ${threads} threads; median of ${runs} (min–max)`, rows)];
  out.push(table(`Idle KV tax: a 40-token request decoding 64 tokens next to an idle ${idle.idleTokens}-token session (unified KV, 2 sequences); decode tok/s, median of ${runs} (min–max)`, idle.rows));
  out.push(`results: ${writeResult('attention', { prefix, threads, runs, raw, llamux, nodeLlamaCpp: nlc, idleKv: idle.json })}`);
  return out.join('\n');
}

/**
 * Decode speed of a short request while a long session sits idle in the same unified KV:
 * with no idle cells, with the idle session kept (idleKvSpillMs 0: every decoded token attends
 * over its cells too; the default), and with idleKvSpillMs set (it moves to the RAM tier; the
 * copy happens inside the timed decode, as it would for a request that is running).
 */
export async function idleKvTax(path: string, idleTokens: number, runs: number, threads: number) {
  const cases = [
    { name: 'no idle session', idle: false, idleKvSpillMs: 0 },
    { name: 'idle session kept in the KV (default)', idle: true, idleKvSpillMs: 0 },
    { name: 'idle session spilled to RAM (idleKvSpillMs: 1000), after the spill', idle: true, idleKvSpillMs: 1000 },
    { name: 'per-sequence KV (unifiedKv: false), idle session kept', idle: true, idleKvSpillMs: 0, unifiedKv: false },
  ];
  const speeds: Record<string, Spread> = {};
  const paired: Record<string, Spread> = {};
  await withLlamux(path, async (model) => {
    const big = benchPrompt(idleTokens, model.vocab.size, 5);
    const small = benchPrompt(40, model.vocab.size, 9);
    // Runs interleave the cases, so a slow moment of a shared machine lands on all of them.
    const values: Record<string, number[]> = Object.fromEntries(cases.map((c) => [c.name, []]));
    for (let r = 0; r < runs; r++) {
      for (const c of cases) {
        progress(`attention: idle KV, ${c.name} (${r + 1}/${runs})`);
        // Per-sequence KV gives each sequence contextSize / sequences cells: twice the cells so
        // the idle session still fits.
        const unifiedKv = c.unifiedKv ?? true;
        const ctx = await model.createContext({ contextSize: (idleTokens + 512) * (unifiedKv ? 1 : 2), sequences: 2, threads, batchThreads: threads, idleKvSpillMs: c.idleKvSpillMs, unifiedKv });
        try {
          if (c.idle) {
            await ctx.createSession({ id: 'idle' }).generate({ prompt: big, maxTokens: 1, temperature: 0 }).result;
            await new Promise((res) => setTimeout(res, 1050));
          }
          // The spill happens while another request decodes (it stalls that request once, for
          // the state copy): a short request triggers it, then the measured one runs.
          if (c.idleKvSpillMs > 0) await ctx.complete({ prompt: small.slice(0, 8), maxTokens: 4, temperature: 0 });
          // client-timed: first token to last token
          let t1 = 0;
          let n = 0;
          for await (const ev of ctx.generate({ prompt: small, maxTokens: 65, temperature: 0, logitBias: Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity])) })) {
            if (ev.type === 'text' && t1 === 0) t1 = performance.now();
            if (ev.type === 'final') n = ev.generatedTokens;
          }
          values[c.name]!.push((n - 1) / ((performance.now() - t1) / 1000));
        } finally {
          await ctx.dispose();
        }
      }
    }
    for (const c of cases) {
      speeds[c.name] = spread(values[c.name]!);
      paired[c.name] = spread(values[c.name]!.map((v, r) => v / values[cases[0]!.name]![r]!));
    }
  });
  const base = speeds[cases[0]!.name]!;
  const rows: Row[] = cases.map((c) => ({
    case: c.name,
    'decode tok/s': fmtSpread(speeds[c.name]!),
    'vs no idle session': ratio(speeds[c.name]!, base),
    'run by run': `${fmtSpread(paired[c.name]!, 2)}x`,
  }));
  return { idleTokens, rows, json: { speeds, runByRun: paired } };
}
