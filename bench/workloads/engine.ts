// Prefill/decode speed of llamux against the raw C++ loop and node-llama-cpp on the same model
// and thread count, at 1 and 8 sequences; llamux's aggregate decode at 1..8 sequences.
// Every figure is the median of `runs` runs with its spread; the raw loop runs twice: with a
// plain greedy `llama_sampler_sample` (the true limit) and with llamux's per-token sampler work.
import { llamuxConcurrent, llamuxSingle, withLlamux } from '../drivers/llamux.js';
import { nlcConcurrent, nlcSingle, withNodeLlamaCpp } from '../drivers/node-llama-cpp.js';
import { rawNlcBinary, runRaw } from '../drivers/raw.js';
import { ensureBenchModel, type BenchModelName } from '../models.js';
import { progress, progressDone, table, writeResult, type Row } from '../report.js';
import { runNodeLlamaCpp } from '../util.js';
import { fmtSpread, ratio, repeat, type Spread } from '../stats.js';

export interface EngineBenchOptions {
  quick?: boolean;
  threads?: number;
  models?: BenchModelName[];
  /** Runs per figure (default 3; 1 with quick). */
  runs?: number;
}

export async function runEngineBench(opts: EngineBenchOptions = {}): Promise<string> {
  const threads = opts.threads ?? 2;
  const runs = opts.runs ?? (opts.quick ? 1 : 3);
  const models = opts.models ?? (opts.quick ? ['llama2-tiny'] : ['250m-q8_0', 'llama2-tiny']);
  const out: string[] = [];
  const json: Record<string, unknown> = { threads, runs, models: {} };
  for (const name of models) {
    progress(`engine: preparing ${name}`);
    const bm = await ensureBenchModel(name);
    const big = name.startsWith('250m');
    const prompt = opts.quick ? 32 : 256;
    const gen = opts.quick ? 32 : big ? 128 : 1024;
    const seqPrompt = Math.min(prompt, 64);
    const seqGen = opts.quick ? 16 : big ? 64 : 256;
    const nSeq = opts.quick ? 2 : 8;

    // The raw loops run in a child process between llamux's runs (run by run), so drift on a
    // shared machine lands on every row alike instead of on whichever system ran last.
    const nlcBin = rawNlcBinary();
    progress(`engine: raw C++ loops and llamux on ${name}`);
    const { one, many, nVocab, conc } = await withLlamux(bm.path, async (model) => {
      const one = await repeat(runs, async () => {
        const plain = runRaw(bm.path, prompt, gen, threads, 1, 'plain');
        const sampler = runRaw(bm.path, prompt, gen, threads, 1, 'llamux');
        const onNlc = nlcBin ? runRaw(bm.path, prompt, gen, threads, 1, 'plain', nlcBin) : { prefillTokensPerSec: NaN, decodeTokensPerSec: NaN };
        const l = await llamuxSingle(model, prompt, gen, threads);
        return {
          plainPrefill: plain.prefillTokensPerSec, plainDecode: plain.decodeTokensPerSec,
          samplerPrefill: sampler.prefillTokensPerSec, samplerDecode: sampler.decodeTokensPerSec,
          nlcPrefill: onNlc.prefillTokensPerSec, nlcDecode: onNlc.decodeTokensPerSec,
          llamuxPrefill: l.prefillTokensPerSec, llamuxDecode: l.decodeTokensPerSec, llamuxTtft: l.ttftMs,
        };
      });
      const conc: Record<number, { aggregateDecodeTokensPerSec: Spread; ttftP50: Spread; ttftP95: Spread }> = {};
      for (const n of opts.quick ? [1, 2] : [1, 2, 4]) {
        if (n === nSeq) continue;
        progress(`engine: llamux ${n} sequences on ${name}`);
        conc[n] = await repeat(runs, () => llamuxConcurrent(model, n, seqPrompt, seqGen, threads));
      }
      progress(`engine: raw C++ loops and llamux, ${nSeq} sequences on ${name}`);
      const many = await repeat(runs, async () => {
        const plain = runRaw(bm.path, seqPrompt, seqGen, threads, nSeq, 'plain');
        const sampler = runRaw(bm.path, seqPrompt, seqGen, threads, nSeq, 'llamux');
        const onNlc = nlcBin ? runRaw(bm.path, seqPrompt, seqGen, threads, nSeq, 'plain', nlcBin) : { decodeTokensPerSec: NaN };
        const l = await llamuxConcurrent(model, nSeq, seqPrompt, seqGen, threads);
        return { plain: plain.decodeTokensPerSec, sampler: sampler.decodeTokensPerSec, nlc: onNlc.decodeTokensPerSec, ...l };
      });
      conc[nSeq] = { aggregateDecodeTokensPerSec: many.aggregateDecodeTokensPerSec, ttftP50: many.ttftP50, ttftP95: many.ttftP95 };
      return { one, many, nVocab: model.vocab.size, conc };
    });
    const rawPlain = { prefillTokensPerSec: one.plainPrefill, decodeTokensPerSec: one.plainDecode };
    const rawSampler = { prefillTokensPerSec: one.samplerPrefill, decodeTokensPerSec: one.samplerDecode };
    const rawNlc = nlcBin ? { prefillTokensPerSec: one.nlcPrefill, decodeTokensPerSec: one.nlcDecode } : undefined;
    const single = { prefillTokensPerSec: one.llamuxPrefill, decodeTokensPerSec: one.llamuxDecode, ttftMs: one.llamuxTtft };
    const rawPlainN = { decodeTokensPerSec: many.plain };
    const rawSamplerN = { decodeTokensPerSec: many.sampler };
    const rawNlcN = nlcBin ? { decodeTokensPerSec: many.nlc } : undefined;
    progress(`engine: node-llama-cpp on ${name}`);
    const nlc = runNodeLlamaCpp ? await withNodeLlamaCpp(bm.path, (m, mod) => repeat(runs, () => nlcSingle(m, mod, nVocab, prompt, gen, threads))) : undefined;
    progress(`engine: node-llama-cpp ${nSeq} sequences on ${name}`);
    const nlcN = runNodeLlamaCpp ? await withNodeLlamaCpp(bm.path, (m, mod) => repeat(runs, () => nlcConcurrent(m, mod, nVocab, nSeq, seqPrompt, seqGen, threads))) : undefined;

    const row = (system: string, prefill: Spread, decode: Spread): Row => ({
      system,
      'prefill tok/s': fmtSpread(prefill),
      'decode tok/s': fmtSpread(decode),
      'vs raw (plain)': ratio(decode, rawPlain.decodeTokensPerSec),
      'vs raw (llamux sampler)': ratio(decode, rawSampler.decodeTokensPerSec),
    });
    out.push(
      table(`${bm.description}: 1 sequence, ${prompt}-token prompt, ${gen} tokens, ${threads} threads; median of ${runs} (min–max)`, [
        row('raw C++ loop, plain greedy sampler', rawPlain.prefillTokensPerSec, rawPlain.decodeTokensPerSec),
        row("raw C++ loop, llamux's sampler work", rawSampler.prefillTokensPerSec, rawSampler.decodeTokensPerSec),
        ...(rawNlc ? [row("raw C++ loop on node-llama-cpp's prebuilt binaries, plain", rawNlc.prefillTokensPerSec, rawNlc.decodeTokensPerSec)] : []),
        row('llamux', single.prefillTokensPerSec, single.decodeTokensPerSec),
        ...(nlc ? [row('node-llama-cpp 3.21.1', nlc.prefillTokensPerSec, nlc.decodeTokensPerSec)] : []),
      ]),
    );
    const aggRow = (system: string, agg: Spread): Row => ({
      system,
      'aggregate decode tok/s': fmtSpread(agg),
      'vs raw (plain)': ratio(agg, rawPlainN.decodeTokensPerSec),
      'vs raw (llamux sampler)': ratio(agg, rawSamplerN.decodeTokensPerSec),
    });
    out.push(
      table(`${bm.description}: ${nSeq} sequences, ${seqPrompt}-token prompts, ${seqGen} tokens each; median of ${runs} (min–max)`, [
        aggRow('raw C++ loop, plain greedy sampler', rawPlainN.decodeTokensPerSec),
        aggRow("raw C++ loop, llamux's sampler work", rawSamplerN.decodeTokensPerSec),
        ...(rawNlcN ? [aggRow("raw C++ loop on node-llama-cpp's prebuilt binaries, plain", rawNlcN.decodeTokensPerSec)] : []),
        aggRow('llamux', conc[nSeq]!.aggregateDecodeTokensPerSec),
        ...(nlcN ? [aggRow('node-llama-cpp 3.21.1', nlcN.aggregateDecodeTokensPerSec)] : []),
      ]),
    );
    const base = conc[1]!.aggregateDecodeTokensPerSec;
    out.push(
      table(
        `llamux aggregate decode by sequences on ${name}; median of ${runs} (min–max)`,
        Object.entries(conc).map(([n, r]) => ({
          sequences: n,
          'aggregate decode tok/s': fmtSpread(r.aggregateDecodeTokensPerSec),
          'vs 1 sequence': ratio(r.aggregateDecodeTokensPerSec, base),
          'TTFT p50 ms': fmtSpread(r.ttftP50),
          'TTFT p95 ms': fmtSpread(r.ttftP95),
        })),
      ),
    );
    (json.models as Record<string, unknown>)[name] = { rawPlain, rawSampler, rawPlainN, rawSamplerN, rawNlc, rawNlcN, llamux: single, concurrent: conc, nodeLlamaCpp: nlc, nodeLlamaCppN: nlcN };
  }
  progressDone();
  const file = writeResult('engine', json);
  out.push(`results: ${file}`);
  return out.join('\n');
}
