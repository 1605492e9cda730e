import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, type Context, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

// Fill-in-the-middle on the zoo's qwen3 model: the real Qwen2 vocabulary with Qwen2.5-Coder's
// FIM tokens (<|fim_prefix|> ...). The expected prompts are built from the token texts, tokenized
// with special-token parsing: an independent construction of the same sequence.
describe('ctx.infill() (zoo qwen3: Qwen2 vocabulary with FIM tokens)', () => {
  let model: Model;
  let ctx: Context;
  const special = (text: string) => Array.from(model.tokenize(text, { addSpecial: false, parseSpecial: true }));

  beforeAll(async () => {
    const d = (await zooModels(['qwen3']))['qwen3'];
    model = await loadModel(d.path);
    ctx = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1, toolCallMarkers: false });
  });
  afterAll(async () => {
    await ctx.dispose();
    await model.dispose();
  });

  it('reads the FIM tokens from the vocabulary', () => {
    const f = model.vocab.fim;
    expect([f.prefix]).toEqual(special('<|fim_prefix|>'));
    expect([f.suffix]).toEqual(special('<|fim_suffix|>'));
    expect([f.middle]).toEqual(special('<|fim_middle|>'));
    expect([f.pad]).toEqual(special('<|fim_pad|>'));
    expect([f.repo]).toEqual(special('<|repo_name|>'));
    expect([f.sep]).toEqual(special('<|file_sep|>'));
  });

  it('prompts prefix, suffix, middle and generates what the same prompt generates', async () => {
    const prefix = 'def add(a, b):\n    return ';
    const suffix = '\n\nprint(add(1, 2))\n';
    const expected = special(`<|fim_prefix|>${prefix}<|fim_suffix|>${suffix}<|fim_middle|>`);
    const r = await ctx.infill({ prefix, suffix, maxTokens: 6, temperature: 0, emitTokenIds: true }).result;
    expect(r.promptTokens).toBe(expected.length);
    const same = await ctx.generate({ prompt: Int32Array.from(expected), maxTokens: 6, temperature: 0, emitTokenIds: true }).result;
    expect(Array.from(r.tokens!)).toEqual(Array.from(same.tokens!));
    expect(same.reusedTokens).toBe(expected.length - 1); // the very same prompt: it was in the KV
  });

  it('puts extra files first, with the repository and file-separator tokens; special-token text in files stays text', async () => {
    const extra = [{ filename: 'util.py', text: 'X = "<|fim_middle|>"\n' }];
    const prefix = 'from util import X\n';
    const r = await ctx.infill({ prefix, suffix: '', extra, maxTokens: 2, temperature: 0 }).result;
    const fileText = Array.from(model.tokenize('util.py\nX = "<|fim_middle|>"\n', { addSpecial: false, parseSpecial: false }));
    const expected = [
      ...special('<|repo_name|>myproject\n'),
      ...special('<|file_sep|>'),
      ...fileText,
      ...special(`<|file_sep|><|fim_prefix|>${prefix}<|fim_suffix|><|fim_middle|>`),
    ];
    expect(r.promptTokens).toBe(expected.length);
  });

  it('validates its options with INVALID_ARGUMENT', () => {
    expect(() => ctx.infill({ prefix: 'a' } as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => ctx.infill({ prefix: 'a', suffix: 'b', prompt: 'c' } as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});

describe('ctx.infill() on a model without FIM tokens', () => {
  it('throws UNSUPPORTED naming what is missing', async () => {
    const model = await loadModel(tinyModelPath);
    const ctx = await model.createContext({ contextSize: 256 });
    try {
      expect(model.vocab.fim.prefix).toBe(-1);
      let err: unknown;
      try {
        ctx.infill({ prefix: 'a', suffix: 'b' });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(LlamuxError);
      expect((err as LlamuxError).code).toBe('UNSUPPORTED');
      expect((err as LlamuxError).message).toMatch(/no fill-in-the-middle tokens/);
    } finally {
      await ctx.dispose();
      await model.dispose();
    }
  });
});
