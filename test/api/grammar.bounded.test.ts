// Issue 30: grammar work per token is bounded. An ambiguous grammar (alternatives that match the
// same text, nested) multiplies llama.cpp's parse stacks with every character; the engine caps
// them (llama.cpp patch grammar-stack-cap, 1,024 stacks checked per character), so such a
// request fails alone with GRAMMAR_FAILED and the others on the context go on.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Context, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

// Three ways to read every "[": its parses triple with each bracket.
const AMBIGUOUS = `root ::= a
a ::= "[" a "]" | "[" b "]" | "[" c "]" | "x"
b ::= a | "[" a "]"
c ::= a | b
`;

describe('grammar stack cap', () => {
  let model: Model;
  let ctx: Context;
  let noClose: Map<number, number>;
  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    ctx = await model.createContext({ contextSize: 4096, sequences: 5, threads: 1 });
    // Keep the model nesting: no token that closes a bracket or ends with "x".
    noClose = new Map();
    for (let t = 0; t < model.vocab.size; t++) if (/[x\]]/.test(model.tokenInfo(t).text)) noClose.set(t, -100);
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('fails an ambiguous grammar alone with GRAMMAR_FAILED within a few tokens; other requests finish', async () => {
    const t0 = performance.now();
    const hostile = Array.from({ length: 4 }, () =>
      ctx.generate({ prompt: 'Hello', maxTokens: 256, temperature: 1, seed: 1, grammar: AMBIGUOUS, logitBias: noClose }).result.then(
        () => undefined,
        (e: unknown) => e,
      ),
    );
    const normal = ctx.generate({ prompt: 'Hello', maxTokens: 32, temperature: 0 }).result;
    const errors = await Promise.all(hostile);
    const ms = performance.now() - t0;
    for (const e of errors) {
      expect(e).toMatchObject({ code: 'GRAMMAR_FAILED' });
      expect((e as Error).message).toMatch(/too ambiguous/);
    }
    const r = await normal;
    console.log(`4 ambiguous-grammar requests failed after ${ms.toFixed(0)} ms; the normal request generated ${r.generatedTokens} tokens`);
    expect(r.generatedTokens).toBeGreaterThan(0);
    expect(ms).toBeLessThan(10_000);
    // An unambiguous grammar of the same language is served.
    const ok = await ctx.generate({ prompt: 'Hello', maxTokens: 8, temperature: 0, grammar: 'root ::= "[" root "]" | "x"' }).result;
    expect(ok.text).toMatch(/^\[*x?\]*$/);
  });
});
