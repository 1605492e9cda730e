import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type GenerateEvent, type Model, type ProgressEvent } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

describe('generate({ progress: true }): prefill progress events (tiny Llama 2 model)', () => {
  let model: Model;
  let noEos: Record<string, number>;

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  });
  afterAll(async () => {
    await model.dispose();
  });

  async function events(ctx: Awaited<ReturnType<Model['createContext']>>, prompt: Int32Array, progress: boolean): Promise<GenerateEvent[]> {
    const out: GenerateEvent[] = [];
    for await (const ev of ctx.generate({ prompt, maxTokens: 3, temperature: 0, logitBias: noEos, progress })) out.push(ev);
    return out;
  }

  it('reports each prefill chunk, in order, before the first token; none unless asked', async () => {
    const ctx = await model.createContext({ contextSize: 2048, prefillChunk: 64 });
    try {
      const prompt = model.tokenize('alpha beta gamma delta '.repeat(60));
      const evs = await events(ctx, prompt, true);
      const progress = evs.filter((e): e is ProgressEvent => e.type === 'progress');
      const chunks = Math.ceil(prompt.length / 64);
      expect(progress).toHaveLength(chunks);
      expect(progress.map((p) => p.processed)).toEqual(Array.from({ length: chunks }, (_, i) => Math.min(prompt.length, (i + 1) * 64)));
      expect(progress.every((p) => p.total === prompt.length && p.cached === 0 && p.ms >= 0)).toBe(true);
      const firstText = evs.findIndex((e) => e.type === 'text');
      const lastProgress = evs.findLastIndex((e) => e.type === 'progress');
      expect(lastProgress).toBeLessThan(firstText);
      const final = evs.at(-1)!;
      expect(final.type === 'final' && final.promptTokens).toBe(prompt.length);
      expect((await events(ctx, model.tokenize('another prompt entirely'), false)).some((e) => e.type === 'progress')).toBe(false);
    } finally {
      await ctx.dispose();
    }
  });

  it('counts reused tokens as cached and starts from them', async () => {
    const ctx = await model.createContext({ contextSize: 2048, prefillChunk: 64 });
    try {
      const prompt = model.tokenize('one two three four five six '.repeat(30));
      await events(ctx, prompt, false);
      const longer = Int32Array.from([...prompt, ...model.tokenize(' seven eight nine', { addSpecial: false })]);
      const progress = (await events(ctx, longer, true)).filter((e): e is ProgressEvent => e.type === 'progress');
      expect(progress.length).toBeGreaterThanOrEqual(1);
      const cached = progress[0]!.cached;
      expect(cached).toBeGreaterThanOrEqual(prompt.length - 1);
      expect(progress.every((p) => p.cached === cached && p.processed > cached)).toBe(true);
      expect(progress.at(-1)!.processed).toBe(longer.length);
    } finally {
      await ctx.dispose();
    }
  });
});
