// Scripted models (issue 2): real llama.cpp decoding of GGUFs whose greedy output is a known
// token script, and whose only randomness at temperature 1 is their near-tie branches.
import { describe, expect, it } from 'vitest';
import { loadModel, type GenerateResult, type Model } from '../../src/index.js';
import { TEST_MODEL_NAMES } from '../../src/gguf/fixtures.js';
import { markersOf, ONE_THREAD, script, testModel, type TestModelName } from '../helpers/models.js';

/** Exact temperature-1 probabilities: no top-k / top-p / min-p truncation. */
const EXACT = { temperature: 1, topK: 0, topP: 1, minP: 0 } as const;
const SEEDS = Array.from({ length: 20 }, (_, i) => 1000 + i * 7919);

const CASES: Array<[TestModelName, string]> = TEST_MODEL_NAMES.flatMap((name) =>
  Object.keys(testModel(name).description.scripts).map((s): [TestModelName, string] => [name, s]),
);

async function withModel<T>(name: TestModelName, fn: (model: Model) => Promise<T>): Promise<T> {
  const model = await loadModel(testModel(name).path);
  try {
    return await fn(model);
  } finally {
    await model.dispose();
  }
}

const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);

describe('Context#generate() on scripted models', () => {
  it.each(CASES)('%s (%s): greedy output is the script, token for token, and ends with eog', async (name, scriptName) => {
    const s = script(name, scriptName);
    await withModel(name, async (model) => {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, toolCallMarkers: false });
      const r = await ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, renderSpecial: true });
      expect(ids(r)).toEqual(s.greedy);
      expect(r.text).toBe(s.greedyText);
      expect(r.finishReason).toBe('eog');
      expect(r.generatedTokens).toBe(s.greedy.length);
      expect(r.promptTokens).toBe(s.promptTokens.length);
      expect(r.toolCalls).toEqual([]);
    });
  });

  it.each(CASES)('%s (%s): at temperature 1, 20 seeds give only scripted outcomes and take both choices of every near tie', async (name, scriptName) => {
    const s = script(name, scriptName);
    await withModel(name, async (model) => {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 8192, sequences: SEEDS.length, toolCallMarkers: false });
      const runs = await Promise.all(
        SEEDS.map((seed) => ctx.complete({ prompt: [...s.promptTokens], ...EXACT, seed, emitTokenIds: true, renderSpecial: true })),
      );
      const outcomes = new Map(s.outcomes.map((o) => [o.tokens.join(','), o]));
      for (const r of runs) {
        const key = ids(r).join(',');
        // Nothing but a near-tie branch ever varies: every sample is a scripted outcome.
        expect(outcomes.has(key), `unexpected sample ${JSON.stringify(r.text)}`).toBe(true);
        expect(r.text).toBe(outcomes.get(key)!.text);
        expect(r.finishReason).toBe('eog');
      }
      if (s.branches.length === 0) {
        for (const r of runs) expect(ids(r)).toEqual(s.greedy);
        return;
      }
      for (const b of s.branches) {
        const seen = new Set(runs.map((r) => ids(r)[b.index]));
        expect([...seen].sort()).toEqual(b.choices.map((c) => c.token).sort());
      }
      // A branch whose alternative is several tokens (grammar-text) shifts what follows it.
      if (!s.outcomes.every((o) => o.tokens.length === s.greedy.length)) return;
      // Positions outside the branches never vary.
      const branchAt = new Set(s.branches.map((b) => b.index));
      for (const r of runs) {
        ids(r).forEach((t, i) => {
          if (!branchAt.has(i)) expect(t).toBe(s.greedy[i]);
        });
      }
    });
  });

  it('near-tie: takes the 55 % branch about 55 % of the time over 200 seeds', async () => {
    const s = script('near-tie');
    const [branch] = s.branches;
    expect(branch).toBeDefined();
    const [first, second] = branch!.choices;
    await withModel('near-tie', async (model) => {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 8, toolCallMarkers: false });
      const runs = await Promise.all(
        Array.from({ length: 200 }, (_, seed) => ctx.complete({ prompt: [...s.promptTokens], ...EXACT, seed, emitTokenIds: true })),
      );
      const counts = new Map<number, number>();
      for (const r of runs) counts.set(ids(r)[branch!.index]!, (counts.get(ids(r)[branch!.index]!) ?? 0) + 1);
      expect([...counts.keys()].sort()).toEqual([first!.token, second!.token].sort());
      // 200 draws of p = 0.55: mean 110, sd ≈ 7; ± 4 sd.
      const share = counts.get(first!.token)! / runs.length;
      expect(share).toBeGreaterThan(0.41);
      expect(share).toBeLessThan(0.69);
    });
  });

  it('near-tie: the default sampler chain (top-k 40, top-p 0.95, min-p 0.05) keeps both choices of the tie', async () => {
    const s = script('near-tie');
    const b = s.branches[0]!;
    await withModel('near-tie', async (model) => {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 4, toolCallMarkers: false });
      const runs = await Promise.all(SEEDS.map((seed) => ctx.complete({ prompt: [...s.promptTokens], temperature: 1, seed, emitTokenIds: true })));
      const seen = new Set(runs.map((r) => ids(r)[b.index]));
      expect([...seen].sort()).toEqual(b.choices.map((c) => c.token).sort());
      for (const r of runs) expect(s.outcomes.map((o) => o.tokens.join(','))).toContain(ids(r).join(','));
    });
  });

  it('two-turn: turn 1 calls the tool, and turn 2, with the tool result in the prompt, answers', async () => {
    const d = testModel('two-turn').description;
    const t1 = d.scripts.turn1!;
    const t2 = d.scripts.turn2!;
    await withModel('two-turn', async (model) => {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, toolCallMarkers: markersOf('two-turn') });
      const r1 = await ctx.complete({ prompt: [...t1.promptTokens], temperature: 0 });
      expect(r1.finishReason).toBe('eog');
      expect(r1.text).toBe('');
      expect(r1.toolCalls).toHaveLength(1);
      expect(Array.from(r1.toolCalls[0]!.tokens)).toEqual(t1.greedy);
      expect(JSON.parse(r1.toolCalls[0]!.text)).toEqual({ name: 'get_weather', arguments: { city: 'Paris' } });

      // The turn-2 prompt continues the turn-1 prompt and the call, so its KV is reused.
      expect(t2.promptTokens.slice(0, t1.promptTokens.length + t1.greedy.length)).toEqual([...t1.promptTokens, ...t1.greedy]);
      const r2 = await ctx.complete({ prompt: [...t2.promptTokens], temperature: 0, emitTokenIds: true });
      expect(r2.finishReason).toBe('eog');
      expect(r2.toolCalls).toEqual([]);
      expect(r2.text).toBe('The weather in Paris is sunny and 18°C.');
      expect(ids(r2)).toEqual(t2.greedy);
      expect(r2.reusedTokens).toBeGreaterThanOrEqual(t1.promptTokens.length + t1.greedy.length - 1);
      expect(r2.prefilledTokens).toBe(r2.promptTokens - r2.reusedTokens);
    });
  });

  it('two-turn: text prompts with special tokens parsed give the same two turns as the token prompts', async () => {
    const d = testModel('two-turn').description;
    await withModel('two-turn', async (model) => {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, toolCallMarkers: false });
      for (const s of [d.scripts.turn1!, d.scripts.turn2!]) {
        const r = await ctx.complete({ prompt: s.prompt, parseSpecial: true, temperature: 0, emitTokenIds: true, renderSpecial: true });
        expect(r.promptTokens).toBe(s.promptTokens.length);
        expect(ids(r)).toEqual(s.greedy);
        expect(r.text).toBe(s.greedyText);
      }
    });
  });
});
