// LoRA adapters (issue 38, item 3) on a scripted model with two scripts:
//   A: "Fruit ?" -> " apple pie crust"      B: "Colour !" -> " deep blue sea"
// The adapter is rank 1 on the output head: A = the output row of " apple" (the token that
// follows "?"), B = 1 at " deep", alpha 2. llama.cpp adds scale * alpha / rank * B (A h), so
// " deep" gains scale * 2 * logit(" apple" | h). The scripted model gives every predecessor an
// orthonormal direction, so that logit is 40 after "?" and exactly 0 after any other token:
// after "?" the logits are " apple" 40, EOS 20 and " deep" 80 * scale (+ 0 of its own).
//   scale 1:    " deep" (80) wins, and B's script follows: " deep blue sea"
//   scale 0.25: " deep" at 20 loses to " apple" (40): the base output
//   scale 0:    the base model
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeGguf } from '../../src/gguf/writer.js';
import { writeBytesAtomic } from '../../src/gguf/scripted.js';
import { A, adapterGguf, B, built, V } from '../helpers/lora.js';
import { loadModel, LlamuxError, type Adapter, type Context, type Model } from '../../src/index.js';

let dir: string;
let model: Model;
let other: Model;
let adapter: Adapter;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llamux-lora-'));
  await writeBytesAtomic(join(dir, 'model.gguf'), encodeGguf(built.gguf));
  writeFileSync(join(dir, 'deep.gguf'), adapterGguf());
  model = await loadModel(join(dir, 'model.gguf'));
  other = await loadModel(join(dir, 'model.gguf'));
  adapter = await model.loadAdapter(join(dir, 'deep.gguf'));
});
afterAll(async () => {
  await model?.dispose();
  await other?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function tokensOf(ctx: Context, options: Parameters<Context['complete']>[0]): Promise<{ tokens: number[]; reused: number }> {
  const r = await ctx.complete({ maxTokens: 8, temperature: 0, emitTokenIds: true, ...options });
  return { tokens: [...r.tokens!], reused: r.reusedTokens };
}

describe('a LoRA adapter on the output head', () => {
  it('loads with its metadata and changes the greedy output by the scripted arithmetic', async () => {
    expect(adapter.metadata['adapter.type']).toBe('lora');
    expect(adapter.fingerprint).toMatch(/^[0-9a-f]{32}$/);
    expect(A.greedy).not.toEqual(B.greedy);
    const ctx = await model.createContext({ contextSize: 256, sequences: 1, prefixCache: false });
    try {
      expect((await tokensOf(ctx, { prompt: A.prompt })).tokens).toEqual(A.greedy);
      expect((await tokensOf(ctx, { prompt: A.prompt, adapters: [{ adapter }] })).tokens).toEqual(B.greedy);
      expect((await tokensOf(ctx, { prompt: A.prompt, adapters: [{ adapter, scale: 1 }] })).tokens).toEqual(B.greedy);
      expect((await tokensOf(ctx, { prompt: A.prompt, adapters: [{ adapter, scale: 0.25 }] })).tokens).toEqual(A.greedy);
      expect((await tokensOf(ctx, { prompt: A.prompt, adapters: [{ adapter, scale: 0 }] })).tokens).toEqual(A.greedy);
      // a delta of 0 everywhere else: script B is unchanged by it
      expect((await tokensOf(ctx, { prompt: B.prompt, adapters: [{ adapter }] })).tokens).toEqual(B.greedy);
    } finally {
      await ctx.dispose();
    }
  });

  it('decodes concurrent requests with different adapter sets in their own batches', async () => {
    const ctx = await model.createContext({ contextSize: 512, sequences: 4, prefixCache: false });
    try {
      const runs = await Promise.all([
        tokensOf(ctx, { prompt: A.prompt, adapters: [{ adapter }] }),
        tokensOf(ctx, { prompt: A.prompt }),
        tokensOf(ctx, { prompt: A.prompt, adapters: [{ adapter, scale: 0.25 }] }),
        tokensOf(ctx, { prompt: A.prompt, adapters: [{ adapter, scale: 3 }] }),
      ]);
      expect(runs.map((r) => r.tokens)).toEqual([B.greedy, A.greedy, A.greedy, B.greedy]);
    } finally {
      await ctx.dispose();
    }
  });

  it("never reuses KV across adapter sets or scales, and reuses it within one", async () => {
    const ctx = await model.createContext({ contextSize: 512, sequences: 1 });
    // a longer prompt ending in "?" (the scripted model's next token depends on the last one only)
    const prompt = new Int32Array([...Array.from({ length: 30 }, (_, i) => A.promptTokens[i % A.promptTokens.length]!), ...A.promptTokens]);
    try {
      const base = await tokensOf(ctx, { prompt });
      expect(base.tokens).toEqual(A.greedy);
      const withAdapter = await tokensOf(ctx, { prompt, adapters: [{ adapter }] });
      expect(withAdapter).toEqual({ tokens: B.greedy, reused: 0 });
      const again = await tokensOf(ctx, { prompt, adapters: [{ adapter }] });
      expect(again.tokens).toEqual(B.greedy);
      expect(again.reused).toBeGreaterThan(0);
      const otherScale = await tokensOf(ctx, { prompt, adapters: [{ adapter, scale: 2 }] });
      expect(otherScale).toEqual({ tokens: B.greedy, reused: 0 });
      const baseAgain = await tokensOf(ctx, { prompt, adapters: [] });
      expect(baseAgain.tokens).toEqual(A.greedy);
      // the base KV may come back from the RAM tier (saved when the adapter's request replaced it), never the adapter's
      const last = await tokensOf(ctx, { prompt, adapters: [{ adapter, scale: 2 }] });
      expect(last).toEqual({ tokens: B.greedy, reused: 0 });
    } finally {
      await ctx.dispose();
    }
  });

  it('verifies speculative drafts with the adapted model', async () => {
    // "? deep blue sea" earlier in the prompt: after the last "?" the ngram drafter proposes
    // " deep blue sea", which the adapted model accepts and the base model rejects
    const ctx = await model.createContext({ contextSize: 512, sequences: 2, speculative: 'ngram', prefixCache: false });
    const prompt = new Int32Array([...A.promptTokens, ...B.greedy, ...A.promptTokens.slice(1)]);
    try {
      const adapted = await ctx.complete({ prompt, maxTokens: 8, temperature: 0, emitTokenIds: true, adapters: [{ adapter }] });
      expect([...adapted.tokens!]).toEqual(B.greedy);
      expect(adapted.timings.acceptedTokens).toBeGreaterThan(0);
      const base = await ctx.complete({ prompt, maxTokens: 8, temperature: 0, emitTokenIds: true });
      expect([...base.tokens!]).toEqual(A.greedy);
      const both = await Promise.all([tokensOf(ctx, { prompt, adapters: [{ adapter }] }), tokensOf(ctx, { prompt })]);
      expect(both.map((r) => r.tokens)).toEqual([B.greedy, A.greedy]);
    } finally {
      await ctx.dispose();
    }
  });

  it("keeps a session's KV to its adapter set", async () => {
    const ctx = await model.createContext({ contextSize: 512, sequences: 2 });
    try {
      const s = ctx.createSession();
      const first = await s.generate({ prompt: A.prompt, maxTokens: 8, temperature: 0, emitTokenIds: true }).result;
      expect([...first.tokens!]).toEqual(A.greedy);
      const again = await s.generate({ prompt: A.prompt, maxTokens: 8, temperature: 0, emitTokenIds: true, adapters: [{ adapter }] }).result;
      expect([...again.tokens!]).toEqual(B.greedy);
      expect(again.reusedTokens).toBe(0);
      await s.end();
    } finally {
      await ctx.dispose();
    }
  });

  it('uses the context default set unless a request names its own', async () => {
    const ctx = await model.createContext({ contextSize: 512, sequences: 3, adapters: [{ adapter }] });
    try {
      expect((await tokensOf(ctx, { prompt: A.prompt })).tokens).toEqual(B.greedy);
      expect((await tokensOf(ctx, { prompt: A.prompt, adapters: [] })).tokens).toEqual(A.greedy);
      // prefillOnly keys carry the set: the same prompt under another set is another key
      const k1 = await ctx.prefillOnly(A.prompt);
      const k2 = await ctx.prefillOnly(A.prompt, { adapters: [] });
      expect(k1.key).not.toBe(k2.key);
      const child = await ctx.complete({ parentKey: k1.key, prompt: new Int32Array(0), maxTokens: 8, temperature: 0, emitTokenIds: true });
      expect([...child.tokens!]).toEqual(B.greedy);
      // n choices prefill under the same set
      const gens = await ctx.generateChoices({ n: 2, prompt: A.prompt, maxTokens: 8, temperature: 0, emitTokenIds: true });
      for (const g of gens) expect([...(await g.result).tokens!]).toEqual(B.greedy);
    } finally {
      await ctx.dispose();
    }
  });
});

describe('bad adapters', () => {
  async function refused(path: string): Promise<LlamuxError> {
    const e = await model.loadAdapter(path).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(LlamuxError);
    return e as LlamuxError;
  }

  it('refuses files that are not an adapter of this model with typed errors, and the model keeps working', async () => {
    expect((await refused(join(dir, 'missing.gguf'))).code).toBe('MODEL_NOT_FOUND');
    writeFileSync(join(dir, 'qwen.gguf'), adapterGguf({ architecture: 'qwen2' }));
    expect(await refused(join(dir, 'qwen.gguf'))).toMatchObject({ code: 'MODEL_INVALID', message: expect.stringContaining('arch') });
    writeFileSync(join(dir, 'vocab.gguf'), adapterGguf({ vocab: V + 7 }));
    expect(await refused(join(dir, 'vocab.gguf'))).toMatchObject({ code: 'MODEL_INVALID', message: expect.stringContaining('shape') });
    writeFileSync(join(dir, 'declared.gguf'), adapterGguf({ declaredVocab: V + 1 }));
    expect(await refused(join(dir, 'declared.gguf'))).toMatchObject({ code: 'MODEL_INVALID', message: expect.stringContaining('another vocabulary') });
    writeFileSync(join(dir, 'same.gguf'), adapterGguf({ declaredVocab: V }));
    expect((await model.loadAdapter(join(dir, 'same.gguf'))).metadata['llama.vocab_size']).toBe(String(V));
    const whole = readFileSync(join(dir, 'deep.gguf'));
    writeFileSync(join(dir, 'truncated.gguf'), whole.subarray(0, whole.length - 64));
    expect((await refused(join(dir, 'truncated.gguf'))).code).toBe('MODEL_INVALID');
    writeFileSync(join(dir, 'garbage.gguf'), Buffer.from('not a gguf file at all'));
    expect((await refused(join(dir, 'garbage.gguf'))).code).toBe('MODEL_INVALID');
    expect(await refused(join(dir, 'model.gguf'))).toMatchObject({ code: 'MODEL_INVALID', message: expect.stringContaining('general.type') });
    const ctx = await model.createContext({ contextSize: 256, sequences: 1 });
    try {
      expect((await tokensOf(ctx, { prompt: A.prompt, adapters: [{ adapter }] })).tokens).toEqual(B.greedy);
    } finally {
      await ctx.dispose();
    }
  });

  it('refuses an adapter of another model, a repeated one and a bad scale', async () => {
    const ctx = await other.createContext({ contextSize: 256, sequences: 1 });
    try {
      expect(() => ctx.generate({ prompt: A.prompt, adapters: [{ adapter }] })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('another model') }));
      expect(() => ctx.generate({ prompt: A.prompt, adapters: [{ adapter }, { adapter, scale: 2 }] })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      expect(() => ctx.generate({ prompt: A.prompt, adapters: [{ adapter, scale: Number.NaN }] })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      expect(() => ctx.generate({ prompt: A.prompt, adapters: [{ adapter: { id: adapter.id } as unknown as Adapter }] })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      await expect(other.createContext({ adapters: [{ adapter }] })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    } finally {
      await ctx.dispose();
    }
  });
});
