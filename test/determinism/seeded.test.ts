// Issue 26, item 2: each request's sampler chain has its own random stream
// (llama_sampler_init_dist(seed) in native/sampling/sampler.cc), so a seed gives the same tokens alone and
// beside 7 other sequences, in deterministic mode (where the logits are equal too).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { writeRandomModel } from '../../src/gguf/random.js';
import { loadModel, type Model } from '../../src/index.js';

let dir: string;
let model: Model;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llamux-seeded-'));
  const path = join(dir, 'tiny-q8_0.gguf');
  await writeRandomModel(path, { preset: 'tiny', type: 'Q8_0', seed: 7 });
  model = await loadModel(path);
}, 60_000);

afterAll(async () => {
  await model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

it('the same seed gives the same sampled tokens alone and beside 7 other sequences', async () => {
  const ctx = await model.createContext({ threads: 2, batchThreads: 2, contextSize: 2048, sequences: 8, cacheRamMb: 0, prefixCache: false, toolCallMarkers: false, deterministic: true });
  try {
    const prompt = Array.from(model.tokenize('river stone light paper green music table cloud', { addSpecial: false }));
    const o = (seed: number) => ({ prompt, temperature: 1.2, topK: 0, topP: 1, minP: 0, maxTokens: 24, seed, emitTokenIds: true });
    const alone: number[][] = [];
    for (const s of [11, 12, 13]) alone.push(Array.from((await ctx.complete(o(s))).tokens ?? []));
    // distinct seeds sample differently (the stream is seeded, not fixed)
    expect(new Set(alone.map((t) => t.join(','))).size).toBeGreaterThan(1);
    for (let k = 0; k < 3; k++) {
      const seeds = [11, 12, 13, 21, 22, 23, 24, 25];
      const beside = await Promise.all(seeds.map(async (s) => Array.from((await ctx.complete(o(s))).tokens ?? [])));
      expect(beside.slice(0, 3)).toEqual(alone);
    }
  } finally {
    await ctx.dispose();
  }
}, 60_000);
