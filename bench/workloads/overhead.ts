// The cost of the binding: the raw C++ decode loop (bench/native/raw_decode.cc, the same static
// llama.cpp), llamux and node-llama-cpp 3.21.1 on one model, one sequence and the same thread
// count, prefilling the same prompt tokens and decoding the same number of tokens greedily.
// Each system runs `reps` times; the best run counts (the least disturbed one on a shared machine).
import { llamuxSingle, withLlamux, type DecodeResult } from '../drivers/llamux.js';
import { nlcSingle, withNodeLlamaCpp } from '../drivers/node-llama-cpp.js';
import { runRaw } from '../drivers/raw.js';
import { ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';

export interface OverheadBenchOptions {
  quick?: boolean;
  threads?: number;
  model?: BenchModelName;
}

interface Rates {
  prefillTokensPerSec: number;
  decodeTokensPerSec: number;
}

function best(runs: Rates[]): Rates {
  return {
    prefillTokensPerSec: Math.max(...runs.map((r) => r.prefillTokensPerSec)),
    decodeTokensPerSec: Math.max(...runs.map((r) => r.decodeTokensPerSec)),
  };
}

export async function runOverheadBench(opts: OverheadBenchOptions = {}): Promise<string> {
  // Quick runs use one thread: llama.cpp's spinning thread pool on a busy 2-core machine stalls for whole
  // scheduler slices per step (quick mode measures nothing, it only has to finish).
  const threads = opts.threads ?? (opts.quick ? 1 : 2);
  const name: BenchModelName = opts.model ?? (opts.quick ? 'tiny-random' : '250m-q8_0');
  const promptTokens = opts.quick ? 64 : 256;
  const genTokens = opts.quick ? 64 : 128;
  const reps = opts.quick ? 1 : 3;
  progress(`overhead: preparing ${name}`);
  const bm = await ensureBenchModel(name);
  const raw: Rates[] = [];
  for (let i = 0; i < reps; i++) {
    progress(`overhead: raw C++ loop (${i + 1}/${reps})`);
    raw.push(runRaw(bm.path, promptTokens, genTokens, threads));
  }
  const { llamux, nVocab } = await withLlamux(bm.path, async (model) => {
    const runs: DecodeResult[] = [];
    for (let i = 0; i < reps; i++) {
      progress(`overhead: llamux (${i + 1}/${reps})`);
      runs.push(await llamuxSingle(model, promptTokens, genTokens, threads));
    }
    return { llamux: runs, nVocab: model.vocab.size };
  });
  const nlc = await withNodeLlamaCpp(bm.path, async (m, mod) => {
    const runs: DecodeResult[] = [];
    for (let i = 0; i < reps; i++) {
      progress(`overhead: node-llama-cpp (${i + 1}/${reps})`);
      runs.push(await nlcSingle(m, mod, nVocab, promptTokens, genTokens, threads));
    }
    return runs;
  });
  progressDone();
  const r = best(raw);
  const systems: Array<[string, Rates]> = [
    ['raw C++ loop', r],
    ['llamux', best(llamux)],
    ['node-llama-cpp 3.21.1', best(nlc)],
  ];
  const rows: Row[] = systems.map(([system, s]) => ({
    system,
    'prefill tok/s': fmt(s.prefillTokensPerSec),
    'prefill vs raw': `${(s.prefillTokensPerSec / r.prefillTokensPerSec).toFixed(2)}x`,
    'decode tok/s': fmt(s.decodeTokensPerSec),
    'decode vs raw': `${(s.decodeTokensPerSec / r.decodeTokensPerSec).toFixed(2)}x`,
    'overhead per decoded token µs': fmt((1 / s.decodeTokensPerSec - 1 / r.decodeTokensPerSec) * 1e6),
  }));
  const out: string[] = [];
  out.push(table(`overhead: one sequence (${bm.description}, ${threads} thread${threads > 1 ? 's' : ''}; ${promptTokens}-token prompt, ${genTokens} tokens decoded; best of ${reps})`, rows));
  const file = writeResult('overhead', {
    mode: opts.quick ? 'quick' : 'full',
    model: { name, description: bm.description, sizeBytes: bm.sizeBytes },
    settings: { threads, promptTokens, genTokens, reps },
    raw,
    llamux,
    nodeLlamaCpp: nlc,
  });
  out.push(`results: ${file}`);
  return out.join('\n');
}
