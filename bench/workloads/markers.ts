// Marker cost: decode tokens/s with tool-call markers on vs off (same model, same tokens).
import { loadModel, setLogger } from '../../src/index.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';

export async function runMarkersBench(opts: { quick?: boolean; threads?: number } = {}): Promise<string> {
  setLogger('silent');
  const threads = opts.threads ?? 2;
  const names: BenchModelName[] = opts.quick ? ['llama2-tiny'] : ['250m-q8_0', 'llama2-tiny'];
  const rows: Row[] = [];
  const json: Record<string, unknown> = {};
  for (const name of names) {
    const bm = await ensureBenchModel(name);
    const model = await loadModel(bm.path);
    const big = name.startsWith('250m');
    const gen = opts.quick ? 64 : big ? 96 : 2000;
    const reps = opts.quick ? 1 : 3;
    const bias = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
    const rates: Record<'off' | 'on', number[]> = { off: [], on: [] };
    // Markers made of rare tokens: the matcher runs on every token but never opens a span.
    const markers = { start: [model.vocab.size - 1, model.vocab.size - 2], end: [model.vocab.size - 3] };
    for (let rep = 0; rep < reps; rep++) {
      for (const mode of ['off', 'on'] as const) {
        progress(`markers: ${name} ${mode} (${rep + 1}/${reps})`);
        const ctx = await model.createContext({ contextSize: 4096, threads, batchThreads: threads, toolCallMarkers: mode === 'on' ? markers : false });
        await ctx.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
        const r = await ctx.complete({ prompt: benchPrompt(32, model.vocab.size), maxTokens: gen, temperature: 0, logitBias: bias });
        rates[mode].push(r.timings.decodeTokensPerSec);
        await ctx.dispose();
      }
    }
    await model.dispose();
    const best = (xs: number[]) => Math.max(...xs);
    const off = best(rates.off);
    const on = best(rates.on);
    rows.push({ model: bm.description, 'markers off tok/s': fmt(off), 'markers on tok/s': fmt(on), difference: `${(((on - off) / off) * 100).toFixed(2)} %` });
    json[name] = rates;
  }
  progressDone();
  const file = writeResult('markers', { threads, rates: json });
  return `${table('Tool-call marker cost (best of runs, greedy decode)', rows)}\nresults: ${file}\n`;
}
