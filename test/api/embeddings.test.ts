// ctx.embed / ctx.rerank on generated embedding models (src/gguf/zoo/embedding.ts): a BERT
// encoder compared with a float64 forward pass of its weights (test/helpers/embedding.ts), a
// BERT reranker compared with the same pass through its classification head, and a decoder
// with last-token pooling checked against identities that follow from causal attention.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { zooGreedyChain } from '../../src/gguf/index.js';
import { BERT_DIMS, type EmbeddingModelDescription, type EmbeddingModelName } from '../../src/gguf/zoo/embedding.js';
import { LlamuxError, loadModel, type Context, type Model } from '../../src/index.js';
import { bertReference, embeddingModels, maxAbsDiff, norm, unit, type BertReference } from '../helpers/embedding.js';
import { ONE_THREAD } from '../helpers/models.js';
import { expectWithin, unitLengthTolerance } from '../helpers/tolerance.js';
import { zooModels } from '../helpers/zoo.js';

const TEXTS = [
  'hello world',
  'The quick brown fox jumps over the lazy dog.',
  'embeddings are vectors',
  'x',
  'Naïve café: déjà vu, 42 times!',
];

let models: Record<EmbeddingModelName, EmbeddingModelDescription>;
beforeAll(async () => {
  models = await embeddingModels();
});

async function expectCode(p: Promise<unknown>, code: string): Promise<LlamuxError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(LlamuxError);
  expect((e as LlamuxError).code).toBe(code);
  return e as LlamuxError;
}

describe('BERT encoder (mean pooling, real WordPiece vocabulary)', () => {
  let model: Model;
  let ctx: Context;
  let ref: BertReference;
  beforeAll(async () => {
    model = await loadModel(models.bert.path);
    ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, batchSize: 1024 });
    ref = await bertReference(models.bert.path, BERT_DIMS);
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('pooled vectors equal a float64 forward pass of the weights (mean and cls pooling)', async () => {
    const tokens = await Promise.all(TEXTS.map((t) => model.tokenizeAsync(t)));
    expect(tokens[0]![0]).toBe(model.vocab.bos); // [CLS]
    expect(tokens[0]!.at(-1)).toBe(model.vocab.sep); // [SEP]
    const mean = await ctx.embed(TEXTS, { normalize: false });
    expect(mean.dimensions).toBe(BERT_DIMS.nEmbd);
    expect(mean.promptTokens).toBe(tokens.reduce((n, t) => n + t.length, 0));
    const cls = await ctx.embed(TEXTS, { normalize: false, pooling: 'cls' });
    tokens.forEach((t, i) => {
      expect(mean.embeddings[i]).toHaveLength(BERT_DIMS.nEmbd);
      expect(maxAbsDiff(mean.embeddings[i]!, ref.mean(t))).toBeLessThan(1e-3);
      expect(maxAbsDiff(cls.embeddings[i]!, ref.cls(t))).toBeLessThan(1e-3);
      // the two poolings are different functions of the hidden states
      expect(maxAbsDiff(mean.embeddings[i]!, cls.embeddings[i]!)).toBeGreaterThan(1e-2);
    });
    // 'model' pooling is the GGUF's (mean)
    const byModel = await ctx.embed(TEXTS[1]!, { normalize: false });
    expect(maxAbsDiff(byModel.embeddings[0]!, mean.embeddings[1]!)).toBeLessThan(1e-4); // batch shape changes ggml's reduction order
  });

  it('normalizes to unit length by default; identical texts give identical vectors', async () => {
    const r = await ctx.embed([TEXTS[0]!, TEXTS[1]!, TEXTS[0]!]);
    for (const v of r.embeddings) expectWithin(norm(v), 1, unitLengthTolerance(v.length));
    expect(Array.from(r.embeddings[2]!)).toEqual(Array.from(r.embeddings[0]!));
    // the same batch unscaled: the scaling is all that differs (a batch of another shape may
    // pool differently in the last bits: ggml's reduction order)
    const raw = await ctx.embed([TEXTS[0]!, TEXTS[1]!, TEXTS[0]!], { normalize: false });
    expect(norm(raw.embeddings[0]!)).toBeGreaterThan(1.5); // layer-normed states: far from unit length
    raw.embeddings.forEach((v, i) => expect(maxAbsDiff(unit(v), r.embeddings[i]!)).toBeLessThanOrEqual(unitLengthTolerance(v.length)));
  });

  it('a batch of N gives the N single results; inputs may be token arrays', async () => {
    const many = Array.from({ length: 40 }, (_, i) => `${TEXTS[i % TEXTS.length]} #${i}`);
    const batched = await ctx.embed(many);
    const singles = await Promise.all(many.map((t) => ctx.embed(t)));
    singles.forEach((s, i) => expect(maxAbsDiff(s.embeddings[0]!, batched.embeddings[i]!)).toBeLessThan(1e-4));
    const tokens = await model.tokenizeAsync(many[3]!);
    const fromTokens = await ctx.embed([tokens, Array.from(tokens)]);
    expect(maxAbsDiff(fromTokens.embeddings[0]!, batched.embeddings[3]!)).toBeLessThan(1e-4);
    expect(maxAbsDiff(fromTokens.embeddings[1]!, batched.embeddings[3]!)).toBeLessThan(1e-4);
  });

  it('more inputs than fit one batch are split over several, with the same vectors', async () => {
    // 300 inputs > 256 sequences per batch; ~12 tokens each > 1024 tokens per batch
    const many = Array.from({ length: 300 }, (_, i) => `item ${i} of a long list of texts`);
    const r = await ctx.embed(many);
    expect(r.embeddings).toHaveLength(300);
    for (const i of [0, 150, 299]) {
      const t = await model.tokenizeAsync(many[i]!);
      expect(maxAbsDiff(r.embeddings[i]!, unit(ref.mean(t)))).toBeLessThan(1e-3);
    }
  });

  it('refuses generation with UNSUPPORTED (an encoder has no KV cache)', async () => {
    const e = await expectCode(ctx.complete({ prompt: 'hello', maxTokens: 2 }), 'UNSUPPORTED');
    expect(e.message).toMatch(/embed/);
  });

  it('answers bad input with typed errors, and keeps working', async () => {
    await expectCode(ctx.embed([]), 'INVALID_ARGUMENT');
    await expectCode(ctx.embed([new Int32Array(0)]), 'INVALID_ARGUMENT');
    await expectCode(ctx.embed([[model.vocab.size]]), 'INVALID_ARGUMENT');
    await expectCode(ctx.embed([[-1]]), 'INVALID_ARGUMENT');
    await expectCode(ctx.embed(['a'], { pooling: 'max' as 'mean' }), 'INVALID_ARGUMENT');
    await expectCode(ctx.embed(['a'], { normalise: true } as object), 'INVALID_ARGUMENT');
    await expectCode(ctx.embed(42 as unknown as string), 'INVALID_ARGUMENT');
    // BERT has 512 learned positions
    const long = await expectCode(ctx.embed([Array.from({ length: 600 }, () => 1000)]), 'CONTEXT_OVERFLOW');
    expect(long.message).toMatch(/512/);
    await expectCode(ctx.rerank('q', ['d']), 'UNSUPPORTED');
    const ok = await ctx.embed('still fine');
    expect(ok.embeddings).toHaveLength(1);
  });

  it('an aborted signal rejects with ABORTED', async () => {
    const ac = new AbortController();
    ac.abort();
    await expectCode(ctx.embed(['a'], { signal: ac.signal }), 'ABORTED');
    // token arrays reach the engine at once: the abort lands while the job runs there
    const ac2 = new AbortController();
    const many = Array.from({ length: 1000 }, (_, i) => Array.from({ length: 500 }, (_, k) => 1000 + ((i * 7 + k) % 20000)));
    const p = ctx.embed(many, { signal: ac2.signal });
    setTimeout(() => ac2.abort(), 50);
    await expectCode(p, 'ABORTED');
    expect((await ctx.embed('after the abort')).embeddings).toHaveLength(1);
  });

  it('a disposed context rejects with DISPOSED', async () => {
    const c = await model.createContext({ ...ONE_THREAD, contextSize: 512 });
    await c.dispose();
    await expectCode(c.embed('a'), 'DISPOSED');
  });
});

describe('BERT reranker (rank pooling: classification head)', () => {
  let model: Model;
  let ctx: Context;
  let ref: BertReference;
  beforeAll(async () => {
    model = await loadModel(models['bert-rank'].path);
    ctx = await model.createContext({ ...ONE_THREAD, contextSize: 512 });
    ref = await bertReference(models['bert-rank'].path, BERT_DIMS);
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('scores [CLS] query [SEP] document [SEP] as the float64 pass does, best first', async () => {
    const query = 'what does the fox do';
    const docs = TEXTS;
    const r = await ctx.rerank(query, docs);
    expect(r.results.map((x) => x.index).sort()).toEqual(docs.map((_, i) => i));
    const q = model.tokenize(query, { addSpecial: false });
    const want = docs.map((d) => ref.rank([model.vocab.bos, ...q, model.vocab.sep, ...model.tokenize(d, { addSpecial: false }), model.vocab.sep]));
    for (const x of r.results) expect(Math.abs(x.score - want[x.index]!)).toBeLessThan(1e-3);
    for (let i = 1; i < r.results.length; i++) expect(r.results[i - 1]!.score).toBeGreaterThanOrEqual(r.results[i]!.score);
    const order = want.map((s, i) => ({ s, i })).sort((a, b) => b.s - a.s).map((x) => x.i);
    expect(r.results.map((x) => x.index)).toEqual(order);
    const top = await ctx.rerank(query, docs, { topN: 2 });
    expect(top.results).toEqual(r.results.slice(0, 2).map((x) => ({ index: x.index, score: expect.closeTo(x.score, 5) as unknown as number })));
  });

  it('embed() on a reranker needs an explicit pooling; bad rerank input is INVALID_ARGUMENT', async () => {
    await expectCode(ctx.embed('a'), 'UNSUPPORTED');
    const r = await ctx.embed('a', { pooling: 'cls', normalize: false });
    expect(maxAbsDiff(r.embeddings[0]!, ref.cls(await model.tokenizeAsync('a')))).toBeLessThan(1e-3);
    await expectCode(ctx.rerank('q', []), 'INVALID_ARGUMENT');
    await expectCode(ctx.rerank(3 as unknown as string, ['d']), 'INVALID_ARGUMENT');
    await expectCode(ctx.rerank('q', ['d'], { topN: 0 }), 'INVALID_ARGUMENT');
  });
});

describe('decoder with last-token pooling (qwen3 layout, KV cache)', () => {
  let model: Model;
  let ctx: Context;
  beforeAll(async () => {
    model = await loadModel(models['qwen3-embed'].path);
    ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 2 });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('causal attention: mean pooling is the average of the last-token vectors of every prefix', async () => {
    const tokens = Array.from(model.tokenize('one two three four five six', { addSpecial: false }));
    expect(tokens.length).toBeGreaterThan(4);
    const prefixes = tokens.map((_, i) => tokens.slice(0, i + 1));
    const last = await ctx.embed(prefixes, { normalize: false });
    expect(last.dimensions).toBe(models['qwen3-embed'].nEmbd);
    const mean = await ctx.embed([tokens], { pooling: 'mean', normalize: false });
    const avg = new Float64Array(last.dimensions);
    for (const v of last.embeddings) for (let i = 0; i < avg.length; i++) avg[i]! += v[i]! / tokens.length;
    expect(maxAbsDiff(mean.embeddings[0]!, avg)).toBeLessThan(1e-4);
    // cls pooling on a causal model sees only the first token: the same for every prefix
    const cls = await ctx.embed(prefixes.slice(1), { pooling: 'cls', normalize: false });
    for (const v of cls.embeddings) expect(maxAbsDiff(v, last.embeddings[0]!)).toBeLessThan(1e-4);
  });

  it('embeddings run beside a generation: the generation keeps its greedy chain, the vectors match', async () => {
    const d = models['qwen3-embed'];
    const prompt = d.successors!.set.slice(0, 6);
    const want = zooGreedyChain(d.successors!, prompt.at(-1)!, 48);
    const texts = Array.from({ length: 64 }, (_, i) => `beside generation ${i}`);
    const alone = await ctx.embed(texts);
    const gen = ctx.complete({ prompt: Int32Array.from(prompt), temperature: 0, maxTokens: 48, emitTokenIds: true });
    const beside = await Promise.all([ctx.embed(texts), ctx.embed(texts.slice(0, 8))]);
    const r = await gen;
    expect(Array.from(r.tokens ?? [])).toEqual(want);
    beside[0].embeddings.forEach((v, i) => expect(maxAbsDiff(v, alone.embeddings[i]!)).toBeLessThan(1e-4));
    beside[1].embeddings.forEach((v, i) => expect(maxAbsDiff(v, alone.embeddings[i]!)).toBeLessThan(1e-4));
  });

  it('aborting a generation does not stop the embedding batches running beside it', async () => {
    // several embedding batches (512 tokens each) pending while the generation is cancelled mid-decode
    const texts = Array.from({ length: 150 }, (_, i) => `abort beside ${i} with a few more words`);
    for (let round = 0; round < 3; round++) {
      const ac = new AbortController();
      const gen = ctx.generate({ prompt: 'one two three', maxTokens: 400, temperature: 0, signal: ac.signal });
      const emb = ctx.embed(texts);
      const aborted = (async () => {
        for await (const ev of gen) if (ev.type === 'text') ac.abort();
      })();
      await expect(aborted).rejects.toMatchObject({ code: 'ABORTED' });
      const r = await emb;
      expect(r.embeddings).toHaveLength(150);
    }
  }, 180_000);
});

describe('a generative model without a pooling type', () => {
  it('embed() is UNSUPPORTED unless a pooling is given', async () => {
    const zoo = await zooModels(['llama']);
    const model = await loadModel(zoo.llama.path);
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 512 });
    try {
      const e = await expectCode(ctx.embed('hello'), 'UNSUPPORTED');
      expect(e.message).toMatch(/pooling/);
      const r = await ctx.embed(['hello', 'hello'], { pooling: 'mean' });
      expect(r.dimensions).toBe(zoo.llama.nEmbd);
      expect(Array.from(r.embeddings[1]!)).toEqual(Array.from(r.embeddings[0]!));
      expectWithin(norm(r.embeddings[0]!), 1, unitLengthTolerance(r.embeddings[0]!.length));
      // generation still works on the same context
      const g = await ctx.complete({ prompt: 'hello', maxTokens: 3, temperature: 0 });
      expect(g.generatedTokens).toBeGreaterThan(0);
    } finally {
      await ctx.dispose();
      await model.dispose();
    }
  });
});

describe('recurrent, hybrid and sliding-window decoders (mean pooling)', () => {
  it.each(['qwen35', 'gemma4'] as const)('%s: a batch gives the single results, unit length', async (arch) => {
    const zoo = await zooModels([arch]);
    const model = await loadModel(zoo[arch].path);
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024 });
    try {
      const texts = ['hello world', 'a second, longer text with more words', 'hello world'];
      const batch = await ctx.embed(texts, { pooling: 'mean' });
      expect(batch.dimensions).toBe(zoo[arch].nEmbd);
      const singles = await Promise.all(texts.map((t) => ctx.embed(t, { pooling: 'mean' })));
      singles.forEach((s, i) => {
        expectWithin(norm(batch.embeddings[i]!), 1, unitLengthTolerance(batch.embeddings[i]!.length));
        expect(maxAbsDiff(s.embeddings[0]!, batch.embeddings[i]!)).toBeLessThan(1e-4);
      });
      expect(maxAbsDiff(batch.embeddings[0]!, batch.embeddings[1]!)).toBeGreaterThan(1e-3);
    } finally {
      await ctx.dispose();
      await model.dispose();
    }
  }, 180_000);
});

describe('a BERT file whose token_types tensor is F16', () => {
  it('is refused at load with UNSUPPORTED (llama.cpp would abort the process on its first batch)', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { writeBertModel } = await import('../../src/gguf/zoo/embedding.js');
    const { llamaCppModelsDir } = await import('../helpers/paths.js');
    const dir = mkdtempSync(join(tmpdir(), 'llamux-bert-f16-'));
    try {
      const path = join(dir, 'bert-f16-types.gguf');
      await writeBertModel(path, llamaCppModelsDir, { dims: BERT_DIMS, tokenTypes: 'F16' });
      const e = await expectCode(loadModel(path), 'UNSUPPORTED');
      expect(e.message).toMatch(/token_types\.weight as f16/);
      // the same shape with F32 token types loads and embeds
      const ok = join(dir, 'bert-f32-types.gguf');
      await writeBertModel(ok, llamaCppModelsDir, { dims: BERT_DIMS });
      const m = await loadModel(ok);
      try {
        const c = await m.createContext({ contextSize: 256, sequences: 1, threads: 1 });
        expect((await c.embed('hello')).embeddings[0]!.length).toBe(BERT_DIMS.nEmbd);
        await c.dispose();
      } finally {
        await m.dispose();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
