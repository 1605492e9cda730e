// Quantized weights through every batch shape (issue 13). On landed main, Q8_0 batches of 2+
// tokens segfaulted on AMX CPUs (GCC 12 dropped half of the AMX tile-configuration stores):
// no test ran a quantized model. Here a scripted model with Q8_0 and Q4_0 matrix weights runs
// prompts of 1, 2, 63, 64 and 300 tokens (batch shapes around ggml's 64-row kernel switch and
// a multi-ubatch prompt) and 8 concurrent sequences, and must give its scripted continuation.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeGguf } from '../../src/gguf/writer.js';
import { buildScriptedModel, writeBytesAtomic, type ScriptedModelSpec } from '../../src/gguf/scripted.js';
import { sp } from '../../src/gguf/vocab.js';
import { loadModel, systemInfo, type Model } from '../../src/index.js';
import { fixturesDir } from '../helpers/paths.js';

const WORDS = ' one| two| three| four| five| six| seven| eight| nine| ten| eleven| twelve| thirteen| fourteen| fifteen| sixteen| seventeen| eighteen| nineteen| twenty';
const COUNTING = (weightType: ScriptedModelSpec['weightType']): ScriptedModelSpec => ({
  name: `counting-${weightType}`,
  weightType,
  scripts: [{ name: 'main', prompt: sp('Count|:'), continuation: sp(`${WORDS}|.`) }],
});

const GEN = 6;

for (const weightType of ['Q8_0', 'Q4_0'] as const) {
  describe(`a ${weightType} model`, () => {
    let model: Model;
    let greedy: number[];
    let prompt: number[];

    beforeAll(async () => {
      const built = buildScriptedModel(COUNTING(weightType));
      mkdirSync(fixturesDir, { recursive: true });
      const path = join(fixturesDir, `counting-${weightType}.gguf`);
      await writeBytesAtomic(path, encodeGguf(built.gguf));
      greedy = [...built.description.scripts.main!.greedy];
      prompt = [...built.description.scripts.main!.promptTokens];
      model = await loadModel(path);
    });
    afterAll(async () => {
      await model?.dispose();
    });

    /** A prompt of exactly `length` tokens whose last token is greedy[at]: its continuation is
     * greedy[at + 1 …]. Earlier tokens cycle through the script (the scripted model's next
     * token depends only on the current one). */
    function promptOf(length: number, at: number): { tokens: Int32Array; expected: number[] } {
      const pool = [...prompt, ...greedy];
      const tokens = new Int32Array(length);
      for (let i = 0; i < length - 1; i++) tokens[i] = pool[i % pool.length]!;
      tokens[length - 1] = greedy[at]!;
      return { tokens, expected: greedy.slice(at + 1, at + 1 + GEN) };
    }

    for (const length of [1, 2, 63, 64, 300]) {
      it(`continues a ${length}-token prompt with its script`, async () => {
        const ctx = await model.createContext({ contextSize: 1024, sequences: 1, batchSize: 512, microBatchSize: 512, prefixCache: false });
        try {
          const { tokens, expected } = promptOf(length, length % 7);
          const r = await ctx.complete({ prompt: tokens, maxTokens: GEN, temperature: 0, emitTokenIds: true });
          expect([...r.tokens!]).toEqual(expected);
          expect(r.prefilledTokens).toBe(length);
        } finally {
          await ctx.dispose();
        }
      });
    }

    // 16–63 new tokens over a cached KV: llama.cpp runs these through its per-row flash
    // attention, which llamux's patch (scripts/llama-patches.mjs) moves to the tiled kernel.
    for (const suffix of [16, 40, 63]) {
      it(`continues ${suffix} new tokens over a 900-token cached prefix with its script`, async () => {
        const ctx = await model.createContext({ contextSize: 1024, sequences: 1, batchSize: 512, microBatchSize: 512 });
        try {
          const base = promptOf(900, 0).tokens;
          await ctx.complete({ prompt: base, maxTokens: 1, temperature: 0 });
          const tail = promptOf(suffix, suffix % 7);
          const r = await ctx.complete({ prompt: Int32Array.from([...base, ...tail.tokens]), maxTokens: GEN, temperature: 0, emitTokenIds: true });
          expect(r.prefilledTokens).toBe(suffix);
          expect([...r.tokens!]).toEqual(tail.expected);
        } finally {
          await ctx.dispose();
        }
      });
    }

    it('continues 8 concurrent sequences of different lengths with their scripts', async () => {
      const ctx = await model.createContext({ contextSize: 4096, sequences: 8, batchSize: 512, microBatchSize: 512, prefixCache: false });
      try {
        const lengths = [1, 2, 5, 63, 64, 65, 130, 300];
        const cases = lengths.map((n, i) => promptOf(n, i));
        const results = await Promise.all(cases.map((c) => ctx.complete({ prompt: c.tokens, maxTokens: GEN, temperature: 0, emitTokenIds: true })));
        results.forEach((r, i) => expect([...r.tokens!], `prompt of ${lengths[i]} tokens`).toEqual(cases[i]!.expected));
      } finally {
        await ctx.dispose();
      }
    });
  });
}

describe('systemInfo()', () => {
  it('names the CPU, its features and the CPU backend variant in use', () => {
    const info = systemInfo();
    expect(info.cpuModel.length).toBeGreaterThan(0);
    expect(info.cpuCount).toBeGreaterThan(0);
    if (info.buildKind === 'variants') {
      const chosen = info.cpuVariants.find((v) => v.name === info.cpuVariant);
      expect(chosen?.score).toBeGreaterThan(0);
      const forced = process.env.LLAMUX_CPU_VARIANT;
      if (forced) {
        // LLAMUX_CPU_VARIANT picks the variant (the suite runs under each shipped one)
        expect(info.cpuVariant).toBe(forced);
      } else {
        // the chosen variant scores highest among those this CPU runs
        expect(Math.max(...info.cpuVariants.map((v) => v.score))).toBe(chosen!.score);
      }
      expect(info.loadedBackends).toContain(`libggml-cpu-${info.cpuVariant}.so`);
    } else {
      expect(info.cpuVariant).toBe('native');
    }
    expect(info.devices.some((d) => d.type === 'cpu')).toBe(true);
  });
});
