// Sliding-window models (gemma4, gpt-oss): swa_full (the default) keeps every position in the
// sliding-window layers, so every reuse path works as on a plain KV; swaFull: false keeps about
// one window per sequence (less KV memory) and reuses a sequence only when a prompt extends all
// of it. Both against a cold single-sequence run; the KV memory of both, from llama.cpp's log.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ZooArchitecture, ZooModelDescription } from '../../src/gguf/index.js';
import { loadModel, setLogger, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD } from '../helpers/models.js';
import { zooModels } from '../helpers/zoo.js';

const SWA: ZooArchitecture[] = ['gemma4', 'gpt-oss'];
const STEPS = 5;
const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
const report: string[] = [];
let zoo: Record<ZooArchitecture, ZooModelDescription>;

function words(n: number, seed: number): string {
  const w = ['river', 'stone', 'light', 'paper', 'green', 'music', 'table', 'cloud', 'north', 'glass', 'water', 'house'];
  return Array.from({ length: n }, (_, i) => w[(i * 7 + seed * 5) % w.length]).join(' ');
}

beforeAll(async () => {
  zoo = await zooModels(SWA);
}, 180_000);

afterAll(() => {
  if (report.length) console.log(`sliding-window KV (8 sequences x 4096 cells, unified):\n${report.join('\n')}`);
});

/** Sum of the "llama_kv_cache: size = X MiB" lines llama.cpp logs while the context is created. */
async function kvMib(model: Model, swaFull: boolean): Promise<number> {
  const lines: string[] = [];
  setLogger('info', (_level, message) => lines.push(message));
  try {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 8, swaFull, cacheRamMb: 0 });
    await ctx.dispose();
  } finally {
    setLogger('warn');
  }
  let mib = 0;
  for (const l of lines) {
    const m = /llama_kv_cache: size =\s*([\d.]+) MiB/.exec(l);
    if (m) mib += Number(m[1]);
  }
  return mib;
}

describe.each(SWA)('%s: swa_full on and off', (arch) => {
  let model: Model;
  const tok = (text: string): number[] => Array.from(model.tokenize(text, { addSpecial: false }));

  beforeAll(async () => {
    model = await loadModel(zoo[arch].path);
  }, 60_000);
  afterAll(async () => {
    await model?.dispose();
  });

  it('reports KV memory both ways, and reuses by what each can do', async () => {
    const full = await kvMib(model, true);
    const window = await kvMib(model, false);
    expect(full).toBeGreaterThan(0);
    expect(window).toBeGreaterThan(0);
    expect(window).toBeLessThan(full);
    // a prompt longer than the window (128), then one diverging from it, then an extension
    const base = tok(words(150, 1));
    const diverged = [...base.slice(0, 140), ...tok(' ' + words(10, 2))];
    const cold = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, prefixCache: false, cacheRamMb: 0 });
    const o = (prompt: number[]) => ({ prompt, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
    const wantA = await cold.complete(o(base));
    const wantB = await cold.complete(o(diverged));
    const outcomes: string[] = [];
    for (const swaFull of [true, false]) {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, swaFull, cacheRamMb: 0 });
      const a = await ctx.complete(o(base));
      expect(ids(a)).toEqual(ids(wantA));
      const ext = [...base, ...ids(a).slice(0, -1), ...tok(' ' + words(6, 3))];
      const e = await ctx.complete(o(ext));
      expect(e.reusedTokens).toBe(base.length + STEPS - 1); // extends the whole sequence
      const b = await ctx.complete(o(diverged));
      expect(ids(b)).toEqual(ids(wantB));
      // swa_full: any prefix; window only: the tail cannot be cut back, recomputed
      expect(b.reusedTokens).toBe(swaFull ? 140 : 0);
      expect(b.cache.outcome).toBe(swaFull ? 'partial' : 'cold');
      outcomes.push(`swaFull ${swaFull}: diverging prompt reused ${b.reusedTokens} of ${diverged.length}`);
      await ctx.dispose();
    }
    await cold.dispose();
    report.push(`  ${arch}: KV ${full.toFixed(2)} MiB with swa_full, ${window.toFixed(2)} MiB without; ${outcomes.join('; ')}`);
  }, 90_000);
});
