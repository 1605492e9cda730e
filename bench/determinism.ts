// Issue 26: what deterministic mode costs. Prefill and decode throughput, default vs
// deterministic, at 1 and 8 sequences, on one bench model (default 250m-q8_0).
//   npx tsx bench/determinism.ts [model] [threads]
import { ensureBenchModel, type BenchModelName } from './models.js';
import { loadModel } from '../src/index.js';

const name = (process.argv[2] ?? '250m-q8_0') as BenchModelName;
const threads = Number(process.argv[3] ?? 2);
const PROMPT = 128;
const GEN = 16;

const bm = await ensureBenchModel(name);
const model = await loadModel(bm.path);
const prompt = (seed: number) => Array.from({ length: PROMPT }, (_, i) => 10 + ((i * 131 + seed * 977) % 1500));
const rows: string[] = [];
for (const seqs of [1, 8]) {
  const res: Record<string, { prefill: number; decode: number }> = {};
  for (const deterministic of [false, true]) {
    const ctx = await model.createContext({ threads, batchThreads: threads, contextSize: 8 * (PROMPT + GEN + 16), sequences: seqs, prefixCache: false, cacheRamMb: 0, toolCallMarkers: false, deterministic });
    // warm-up
    await ctx.complete({ prompt: prompt(99), maxTokens: 2, temperature: 0 });
    const t0 = performance.now();
    const rs = await Promise.all(Array.from({ length: seqs }, (_, i) => ctx.complete({ prompt: prompt(i), maxTokens: GEN, temperature: 0 })));
    const wall = performance.now() - t0;
    // aggregate: prompt tokens over the longest prefill; generated tokens over the longest decode
    const prefillMs = Math.max(...rs.map((r) => r.timings.prefillMs));
    const decodeMs = Math.max(...rs.map((r) => r.timings.decodeMs));
    const gen = rs.reduce((a, r) => a + (r.tokens?.length ?? GEN), 0);
    res[deterministic ? 'det' : 'def'] = { prefill: (seqs * PROMPT) / (prefillMs / 1000), decode: gen / (decodeMs / 1000) };
    console.error(`seqs ${seqs} deterministic ${deterministic}: wall ${wall.toFixed(0)} ms`, res[deterministic ? 'det' : 'def']);
    await ctx.dispose();
  }
  const d = res.def!, x = res.det!;
  rows.push(`| ${seqs} | ${d.prefill.toFixed(0)} | ${x.prefill.toFixed(0)} | ${(x.prefill / d.prefill).toFixed(2)}x | ${d.decode.toFixed(1)} | ${x.decode.toFixed(1)} | ${(x.decode / d.decode).toFixed(2)}x |`);
}
await model.dispose();
console.log(`${bm.description}, ${threads} threads, ${PROMPT}-token prompts, ${GEN} tokens each`);
console.log('| sequences | prefill tok/s default | deterministic | ratio | decode tok/s default | deterministic | ratio |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
