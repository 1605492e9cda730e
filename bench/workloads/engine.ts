// Prefill/decode speed of llamux against the raw C++ loop and node-llama-cpp on the
// same model and thread count, and llamux's aggregate decode at 1..8 sequences.
import { llamuxConcurrent, llamuxSingle, withLlamux } from '../drivers/llamux.js';
import { nlcConcurrent, nlcSingle, withNodeLlamaCpp } from '../drivers/node-llama-cpp.js';
import { runRaw } from '../drivers/raw.js';
import { ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';

export interface EngineBenchOptions {
  quick?: boolean;
  threads?: number;
  models?: BenchModelName[];
}

export async function runEngineBench(opts: EngineBenchOptions = {}): Promise<string> {
  const threads = opts.threads ?? 2;
  const models = opts.models ?? (opts.quick ? ['llama2-tiny'] : ['250m-q8_0', 'llama2-tiny']);
  const out: string[] = [];
  const json: Record<string, unknown> = { threads, models: {} };
  for (const name of models) {
    progress(`engine: preparing ${name}`);
    const bm = await ensureBenchModel(name);
    const big = name.startsWith('250m');
    const prompt = opts.quick ? 32 : big ? 256 : 256;
    const gen = opts.quick ? 32 : big ? 128 : 1024;
    progress(`engine: raw C++ loop on ${name}`);
    const raw = runRaw(bm.path, prompt, gen, threads);
    progress(`engine: llamux on ${name}`);
    const { single, nVocab, conc } = await withLlamux(bm.path, async (model) => {
      const single = await llamuxSingle(model, prompt, gen, threads);
      const conc: Record<number, Awaited<ReturnType<typeof llamuxConcurrent>>> = {};
      for (const n of opts.quick ? [1, 2] : [1, 2, 4, 8]) {
        progress(`engine: llamux ${n} sequences on ${name}`);
        conc[n] = await llamuxConcurrent(model, n, Math.min(prompt, 64), opts.quick ? 16 : big ? 64 : 256, threads);
      }
      return { single, nVocab: model.vocab.size, conc };
    });
    progress(`engine: node-llama-cpp on ${name}`);
    const nlc = await withNodeLlamaCpp(bm.path, (m, mod) => nlcSingle(m, mod, nVocab, prompt, gen, threads));
    const rows: Row[] = [
      { system: 'raw C++ loop', 'prefill tok/s': fmt(raw.prefillTokensPerSec), 'decode tok/s': fmt(raw.decodeTokensPerSec), 'decode vs raw': '1.00x' },
      { system: 'llamux', 'prefill tok/s': fmt(single.prefillTokensPerSec), 'decode tok/s': fmt(single.decodeTokensPerSec), 'decode vs raw': `${(single.decodeTokensPerSec / raw.decodeTokensPerSec).toFixed(2)}x` },
      { system: 'node-llama-cpp 3.21.1', 'prefill tok/s': fmt(nlc.prefillTokensPerSec), 'decode tok/s': fmt(nlc.decodeTokensPerSec), 'decode vs raw': `${(nlc.decodeTokensPerSec / raw.decodeTokensPerSec).toFixed(2)}x` },
    ];
    out.push(table(`${bm.description}: ${prompt}-token prompt, ${gen} tokens, ${threads} threads (llamux/node-llama-cpp decode ratio ${(single.decodeTokensPerSec / nlc.decodeTokensPerSec).toFixed(2)}x)`, rows));
    const base = conc[1]!.aggregateDecodeTokensPerSec;
    const crow: Row[] = Object.entries(conc).map(([n, r]) => ({
      sequences: n,
      'aggregate decode tok/s': fmt(r.aggregateDecodeTokensPerSec),
      'vs 1 sequence': `${(r.aggregateDecodeTokensPerSec / base).toFixed(2)}x`,
      'TTFT p50 ms': fmt(r.ttftP50),
      'TTFT p95 ms': fmt(r.ttftP95),
    }));
    out.push(table(`llamux aggregate decode on ${name}`, crow));
    if (!opts.quick) {
      progress(`engine: node-llama-cpp 8 sequences on ${name}`);
      const nc8 = await withNodeLlamaCpp(bm.path, (m, mod) => nlcConcurrent(m, mod, nVocab, 8, Math.min(prompt, 64), big ? 64 : 256, threads));
      out.push(`node-llama-cpp, 8 sequences: ${fmt(nc8.aggregateDecodeTokensPerSec)} tok/s aggregate (llamux ${(conc[8]!.aggregateDecodeTokensPerSec / nc8.aggregateDecodeTokensPerSec).toFixed(2)}x)\n`);
      (json.models as Record<string, unknown>)[name] = { raw, llamux: single, nodeLlamaCpp: nlc, concurrent: conc, nodeLlamaCpp8: nc8 };
    } else {
      (json.models as Record<string, unknown>)[name] = { raw, llamux: single, nodeLlamaCpp: nlc, concurrent: conc };
    }
  }
  progressDone();
  const file = writeResult('engine', json);
  out.push(`results: ${file}`);
  return out.join('\n');
}
