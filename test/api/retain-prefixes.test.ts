// generate({ retainPrefixes }): prompt-cache breakpoints at the engine level (what the server's
// Anthropic cache_control uses). The prefix up to each is written to the RAM tier as its own
// state when the request prefills it; a later prompt sharing only that prefix restores it from
// the tier; bad breakpoints are INVALID_ARGUMENT before anything runs.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

describe('generate({ retainPrefixes }) (tiny Llama 2 model)', () => {
  let model: Model;
  let noEos: Record<string, number>;
  const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => ['alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta'][(i * 7 + seed) % 6]).join(' ');

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('writes each breakpoint prefix it prefills, and a prompt sharing only that prefix restores it from the RAM tier', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 1 });
    try {
      const head = model.tokenize(words(40, 1));
      const prompt = Int32Array.from([...head, ...model.tokenize('gamma gamma gamma', { addSpecial: false })]);
      const a = await ctx.complete({ prompt, maxTokens: 2, temperature: 0, logitBias: noEos, retainPrefixes: [{ tokens: 20, ttlMs: 60_000 }, { tokens: head.length, ttlMs: 60_000 }] });
      expect(a.cache.retainedTokens).toBe(head.length);
      expect(a.cache.retainRefused).toBe(0);
      expect(ctx.cacheStats().ramEntries).toBe(2); // two prefix states
      // Another prompt with the same head: the one sequence's KV is replaced first (a different
      // start), so the head can only come from the tier.
      await ctx.complete({ prompt: model.tokenize(words(30, 4)), maxTokens: 1, temperature: 0, logitBias: noEos });
      const other = Int32Array.from([...head, ...model.tokenize('zeta zeta zeta', { addSpecial: false })]);
      let common = 0;
      while (prompt[common] === other[common]) common++;
      expect(common).toBe(head.length); // the two prompts share exactly the head
      const b = await ctx.complete({ prompt: other, maxTokens: 2, temperature: 0, logitBias: noEos, retainPrefixes: [{ tokens: head.length, ttlMs: 60_000 }] });
      expect(b.reusedTokens).toBe(head.length);
      expect(b.cache.tier).toBe('ram');
      expect(b.cache.retainedTokens).toBe(0); // read, not written again
      expect(b.cache.retainRefused).toBe(0);
    } finally {
      await ctx.dispose();
    }
  });

  it('reports a refusal when there is no tier', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 1, cacheRamMb: 0 });
    try {
      const prompt = model.tokenize(words(40, 2));
      const r = await ctx.complete({ prompt, maxTokens: 1, temperature: 0, logitBias: noEos, retainPrefixes: [{ tokens: 32, ttlMs: 1000 }] });
      expect(r.cache.retainedTokens).toBe(0);
      expect(r.cache.retainRefused).toBe(1);
    } finally {
      await ctx.dispose();
    }
  });

  it('refuses bad breakpoints with INVALID_ARGUMENT', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 1 });
    try {
      const prompt = model.tokenize(words(20, 3));
      const bad = async (retainPrefixes: Array<{ tokens: number; ttlMs: number }>, message: RegExp) => {
        const e = await Promise.resolve()
          .then(() => ctx.complete({ prompt, maxTokens: 1, retainPrefixes }))
          .then(() => undefined, (err: unknown) => err);
        expect(e).toBeInstanceOf(LlamuxError);
        expect((e as LlamuxError).code).toBe('INVALID_ARGUMENT');
        expect((e as LlamuxError).message).toMatch(message);
      };
      await bad([1, 2, 3, 4, 5].map((t) => ({ tokens: t, ttlMs: 1 })), /retainPrefixes/);
      await bad([{ tokens: 8, ttlMs: 1 }, { tokens: 4, ttlMs: 1 }], /ascend/);
      await bad([{ tokens: 0, ttlMs: 1 }], /retainPrefixes/);
      await bad([{ tokens: 4, ttlMs: 0 }], /retainPrefixes/);
      await bad([{ tokens: prompt.length + 1, ttlMs: 1000 }], /within the prompt/);
      // the context is still fine
      const ok = await ctx.complete({ prompt, maxTokens: 1, retainPrefixes: [{ tokens: prompt.length, ttlMs: 1000 }] });
      expect(ok.cache.retainedTokens).toBe(prompt.length);
    } finally {
      await ctx.dispose();
    }
  });
});
