// Issue 29's generation surface: what `logprobs` costs per decoded token (one pass over the
// vocabulary, plus a top-k sort), and what `n` choices from one prefill save over n separate
// requests of the same prompt. Same model, context and thread count for every row; best of
// `reps` runs (the least disturbed one on a shared machine).
import { loadModel, setLogger, type GenerateResult, type Model } from '../../src/index.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';

export interface SurfaceBenchOptions {
  quick?: boolean;
  threads?: number;
  model?: BenchModelName;
}

const banEog = (model: Model) => Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));

export async function runSurfaceBench(opts: SurfaceBenchOptions = {}): Promise<string> {
  const threads = opts.threads ?? (opts.quick ? 1 : 2);
  const name: BenchModelName = opts.model ?? (opts.quick ? 'tiny-random' : '250m-q8_0');
  // The logprobs rows decode after a short prompt (prefill is not what they measure).
  const promptTokens = opts.quick ? 64 : 256;
  const logprobPrompt = 32;
  const genTokens = opts.quick ? 32 : 64;
  const n = 4;
  const reps = opts.quick ? 1 : 3;
  progress(`surface: preparing ${name}`);
  const bm = await ensureBenchModel(name);
  setLogger('silent');
  const model = await loadModel(bm.path);
  const out: string[] = [];
  const data: Record<string, unknown> = { mode: opts.quick ? 'quick' : 'full', model: { name, description: bm.description }, settings: { threads, promptTokens, logprobPrompt, genTokens, n, reps } };
  try {
    const bias = banEog(model);
    const prompt = benchPrompt(logprobPrompt, model.vocab.size);
    // logprobs: decode rate and sampler time per token, the same greedy tokens in every row.
    const single = await model.createContext({ contextSize: 1024, threads, batchThreads: threads, prefixCache: false });
    await single.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
    const variants: Array<[string, number | undefined]> = [['no logprobs', undefined], ['logprobs: 0', 0], ['logprobs: 20', 20]];
    const best = new Map<string, GenerateResult>();
    for (let i = 0; i < reps; i++) {
      for (const [label, k] of variants) {
        progress(`surface: ${label} (${i + 1}/${reps})`);
        const r = await single.complete({ prompt, maxTokens: genTokens, temperature: 0, logitBias: bias, ...(k !== undefined ? { logprobs: k } : {}) });
        const b = best.get(label);
        if (!b || r.timings.decodeTokensPerSec > b.timings.decodeTokensPerSec) best.set(label, r);
      }
    }
    await single.dispose();
    const base = best.get('no logprobs')!;
    const rows: Row[] = variants.map(([label]) => {
      const r = best.get(label)!;
      return {
        variant: label,
        'decode tok/s': fmt(r.timings.decodeTokensPerSec),
        'vs no logprobs': `${(r.timings.decodeTokensPerSec / base.timings.decodeTokensPerSec).toFixed(3)}x`,
        'µs/token over no logprobs': fmt((1 / r.timings.decodeTokensPerSec - 1 / base.timings.decodeTokensPerSec) * 1e6),
      };
    });
    progressDone();
    // Printed at once: the choices rows take much longer on a loaded machine.
    console.log(table(`surface: logprobs (${bm.description}, vocabulary ${model.vocab.size}, ${threads} thread${threads > 1 ? 's' : ''}; ${genTokens} tokens decoded greedily; best of ${reps})`, rows));
    data.logprobs = Object.fromEntries([...best].map(([k, r]) => [k, { decodeTokensPerSec: r.timings.decodeTokensPerSec, sampleMs: r.timings.sampleMs, generatedTokens: r.generatedTokens }]));

    // n choices: generateChoices (one prefill, forks) against n concurrent requests of the same prompt.
    const multi = await model.createContext({ contextSize: (promptTokens + genTokens + 16) * n, sequences: n, threads, batchThreads: threads });
    await multi.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
    const runs: Record<string, { ms: number; prefilled: number }[]> = { choices: [], separate: [] };
    const choiceReps = opts.quick ? 1 : 2;
    for (let i = 0; i < choiceReps; i++) {
      // A fresh prompt per run: nothing of it is cached before the run starts.
      const p = benchPrompt(promptTokens, model.vocab.size, 1000 + i);
      const q = benchPrompt(promptTokens, model.vocab.size, 2000 + i);
      const o = { maxTokens: genTokens, temperature: 0.8, seed: 1, logitBias: bias };
      progress(`surface: generateChoices n=${n} (${i + 1}/${choiceReps})`);
      let t0 = performance.now();
      const rs = await Promise.all((await multi.generateChoices({ prompt: p, ...o, n })).map((g) => g.result));
      runs.choices!.push({ ms: performance.now() - t0, prefilled: promptTokens - 1 + rs.reduce((a, r) => a + r.prefilledTokens, 0) });
      progress(`surface: ${n} separate requests (${i + 1}/${choiceReps})`);
      t0 = performance.now();
      const ss = await Promise.all(Array.from({ length: n }, (_, j) => multi.complete({ prompt: q, ...o, seed: 1 + j })));
      runs.separate!.push({ ms: performance.now() - t0, prefilled: ss.reduce((a, r) => a + r.prefilledTokens, 0) });
    }
    await multi.dispose();
    progressDone();
    const fastest = (xs: { ms: number; prefilled: number }[]) => xs.reduce((a, b) => (b.ms < a.ms ? b : a));
    const c = fastest(runs.choices!);
    const s = fastest(runs.separate!);
    out.push(
      table(`surface: ${n} choices of a ${promptTokens}-token prompt, ${genTokens} tokens each (${n} sequences; best of ${choiceReps})`, [
        { way: `generateChoices({ n: ${n} })`, 'prompt tokens prefilled': c.prefilled, 'wall ms': fmt(c.ms), 'vs separate': `${(s.ms / c.ms).toFixed(2)}x faster` },
        { way: `${n} concurrent generate()`, 'prompt tokens prefilled': s.prefilled, 'wall ms': fmt(s.ms), 'vs separate': '1.00x' },
      ]),
    );
    data.choices = runs;
  } finally {
    await model.dispose();
  }
  out.push(`results: ${writeResult('surface', data)}`);
  return out.join('\n');
}
