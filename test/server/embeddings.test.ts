// POST /v1/embeddings with the official OpenAI client (float and base64, which the client asks
// for by default and decodes itself), POST /v1/rerank in the Jina/Cohere shape, and bad input
// answered 400 in the OpenAI error shape. Vectors are checked against the float64 reference of
// the generated BERT (test/helpers/embedding.ts), not against the library's own output.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BERT_DIMS } from '../../src/gguf/zoo/embedding.js';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { bertReference, embeddingModels, maxAbsDiff, norm, unit, type BertReference } from '../helpers/embedding.js';
import { expectWithin, unitLengthTolerance } from '../helpers/tolerance.js';
import { zooModels } from '../helpers/zoo.js';
import { openaiFor } from './clients.js';

async function caught(p: Promise<unknown>): Promise<Error & { status?: number; error?: unknown }> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(Error);
  return e as Error & { status?: number; error?: unknown };
}

const TEXTS = ['hello world', 'The quick brown fox jumps over the lazy dog.', 'vectors'];

describe('/v1/embeddings on a BERT encoder', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  let ref: BertReference;
  beforeAll(async () => {
    const m = await embeddingModels();
    model = await loadModel(m.bert.path);
    ref = await bertReference(m.bert.path, BERT_DIMS);
    server = await createServer({ model, port: 0, ctx: 512, parallel: 1, threads: 1, log: () => {} });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  const want = (t: string) => unit(ref.mean(model.tokenize(t)));

  it('embeddings.create: float, base64 and the client default give the reference vectors', async () => {
    const float = await openai.embeddings.create({ model: 'bge-test', input: TEXTS, encoding_format: 'float' });
    expect(float.object).toBe('list');
    expect(float.model).toBe('bge-test');
    expect(float.data.map((d) => d.index)).toEqual([0, 1, 2]);
    const tokens = TEXTS.reduce((n, t) => n + model.tokenize(t).length, 0);
    expect(float.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    float.data.forEach((d, i) => {
      expect(d.object).toBe('embedding');
      expect(d.embedding).toHaveLength(BERT_DIMS.nEmbd);
      expectWithin(norm(d.embedding), 1, unitLengthTolerance(d.embedding.length));
      expect(maxAbsDiff(d.embedding, want(TEXTS[i]!))).toBeLessThan(1e-3);
    });
    // base64 asked for explicitly: the raw little-endian float32 bytes
    const b64 = await openai.embeddings.create({ model: 'bge-test', input: TEXTS, encoding_format: 'base64' });
    b64.data.forEach((d, i) => {
      expect(typeof d.embedding).toBe('string');
      const buf = Buffer.from(d.embedding as unknown as string, 'base64');
      const v = Array.from({ length: buf.length / 4 }, (_, k) => buf.readFloatLE(k * 4));
      expect(v).toEqual(Array.from(Float32Array.from(float.data[i]!.embedding)));
    });
    // no encoding_format: the client requests base64 and decodes it into numbers
    const dflt = await openai.embeddings.create({ model: 'bge-test', input: 'hello world' });
    expect(Array.isArray(dflt.data[0]!.embedding)).toBe(true);
    expect(Array.from(Float32Array.from(dflt.data[0]!.embedding))).toEqual(Array.from(Float32Array.from(float.data[0]!.embedding)));
  });

  it('takes token arrays and a dimensions cut (renormalized)', async () => {
    const ids = Array.from(model.tokenize('hello world'));
    const one = await openai.embeddings.create({ model: 'm', input: ids, encoding_format: 'float' });
    const two = await openai.embeddings.create({ model: 'm', input: [ids, ids], encoding_format: 'float' });
    expect(two.data).toHaveLength(2);
    expect(maxAbsDiff(one.data[0]!.embedding, want('hello world'))).toBeLessThan(1e-3);
    expect(maxAbsDiff(two.data[1]!.embedding, one.data[0]!.embedding)).toBeLessThan(1e-4);
    const cut = await openai.embeddings.create({ model: 'm', input: 'hello world', dimensions: 16, encoding_format: 'float' });
    expect(cut.data[0]!.embedding).toHaveLength(16);
    expect(maxAbsDiff(cut.data[0]!.embedding, unit(want('hello world').slice(0, 16)))).toBeLessThan(1e-3);
  });

  it('answers bad input 400 in the OpenAI error shape', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ model: 'm' }, /"input" but received nothing/],
      [{ model: 'm', input: [] }, /non-empty string.*for "input" but received an array/],
      [{ model: 'm', input: '' }, /for "input" but received ""/],
      [{ model: 'm', input: [[]] }, /for "input"/],
      [{ model: 'm', input: ['a', 3] }, /for "input"/],
      [{ model: 'm', input: 42 }, /for "input" but received 42/],
      [{ model: 'm', input: 'a', encoding_format: 'int8' }, /encoding_format/],
      [{ model: 'm', input: 'a', dimensions: 1000 }, /dimensions must be at most 64/],
      [{ model: 'm', input: 'a', foo: 1 }, /unknown field "foo"/],
      [{ model: 'm', input: [[10_000_000]] }, /outside the vocabulary/],
      [{ model: 'm', input: 'word '.repeat(700) }, /512/],
    ];
    for (const [body, message] of cases) {
      const e = await caught(openai.embeddings.create(body as never));
      expect(e, JSON.stringify(body).slice(0, 80)).toBeInstanceOf(OpenAI.BadRequestError);
      expect(e.status).toBe(400);
      expect(e.message).toMatch(message);
      expect((e.error as { type: string }).type).toBe('invalid_request_error');
    }
    // a reranker endpoint on an embedding model: 400 naming the model
    const res = await fetch(`${server.url}/v1/rerank`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query: 'q', documents: ['d'] }) });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; param: string } };
    expect(body.error.message).toMatch(/not a reranker/);
    expect(body.error.param).toBe('model');
    // generation on an encoder is refused, typed
    const chat = await caught(openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }));
    expect(chat).toBeInstanceOf(OpenAI.BadRequestError);
    expect(chat.message).toMatch(/cannot generate/);
  });
});

describe('/v1/rerank on a BERT reranker', () => {
  let model: Model;
  let server: LlamuxServer;
  let ref: BertReference;
  beforeAll(async () => {
    const m = await embeddingModels();
    model = await loadModel(m['bert-rank'].path);
    ref = await bertReference(m['bert-rank'].path, BERT_DIMS);
    server = await createServer({ model, port: 0, ctx: 512, parallel: 1, threads: 1, log: () => {} });
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  const rerank = (body: unknown) => fetch(`${server.url}/v1/rerank`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('answers {results: [{index, relevance_score}]}, best first, top_n and documents as objects', async () => {
    const query = 'what does the fox do';
    const documents = ['hello world', 'The quick brown fox jumps over the lazy dog.', 'vectors', 'x'];
    const res = await rerank({ model: 'reranker', query, documents, top_n: 3, return_documents: true });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model: string; results: Array<{ index: number; relevance_score: number; document: { text: string } }>; usage: { prompt_tokens: number } };
    expect(body.model).toBe('reranker');
    expect(body.results).toHaveLength(3);
    const q = Array.from(model.tokenize(query, { addSpecial: false }));
    const scores = documents.map((d) => ref.rank([model.vocab.bos, ...q, model.vocab.sep, ...model.tokenize(d, { addSpecial: false }), model.vocab.sep]));
    const order = scores.map((s, i) => ({ s, i })).sort((a, b) => b.s - a.s).map((x) => x.i);
    expect(body.results.map((r) => r.index)).toEqual(order.slice(0, 3));
    for (const r of body.results) {
      expect(Math.abs(r.relevance_score - scores[r.index]!)).toBeLessThan(1e-3);
      expect(r.document.text).toBe(documents[r.index]);
    }
    expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    const objects = await rerank({ query, documents: documents.map((text) => ({ text })) });
    const all = (await objects.json()) as { results: Array<{ index: number; document?: unknown }> };
    expect(all.results.map((r) => r.index)).toEqual(order);
    expect(all.results[0]!.document).toBeUndefined();
  });

  it('answers bad input 400', async () => {
    for (const body of [{ query: 'q' }, { query: 'q', documents: [] }, { query: 1, documents: ['d'] }, { query: 'q', documents: ['d'], top_n: 0 }, { query: 'q', documents: [3] }]) {
      const res = await rerank(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const e = (await res.json()) as { error: { type: string } };
      expect(e.error.type).toBe('invalid_request_error');
    }
    // an embedding request to a reranker: 400, it needs an explicit pooling
    const openai = openaiFor(server);
    const e = await caught(openai.embeddings.create({ model: 'm', input: 'a' }));
    expect(e.status).toBe(400);
    expect(e.message).toMatch(/reranker/);
  });
});

describe('/v1/embeddings on a chat model (no pooling declared)', () => {
  it('mean-pools, beside a chat completion on the same server', async () => {
    const zoo = await zooModels(['llama']);
    const model = await loadModel(zoo.llama.path);
    const server = await createServer({ model, port: 0, ctx: 2048, parallel: 2, threads: 1, log: () => {} });
    try {
      const openai = openaiFor(server);
      const [chat, emb] = await Promise.all([
        openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 8, temperature: 0 }),
        openai.embeddings.create({ model: 'm', input: ['hello there', 'hello there', 'general kenobi'] }),
      ]);
      expect(chat.choices[0]!.message.content?.length).toBeGreaterThan(0);
      expect(emb.data).toHaveLength(3);
      expect(emb.data[0]!.embedding).toHaveLength(zoo.llama.nEmbd);
      expectWithin(norm(emb.data[0]!.embedding), 1, unitLengthTolerance(emb.data[0]!.embedding.length));
      expect(emb.data[1]!.embedding).toEqual(emb.data[0]!.embedding);
      expect(maxAbsDiff(emb.data[2]!.embedding, emb.data[0]!.embedding)).toBeGreaterThan(1e-3);
      // the same vector as the library's explicit mean pooling
      const lib = await server.context.embed('general kenobi', { pooling: 'mean' });
      expect(maxAbsDiff(emb.data[2]!.embedding, lib.embeddings[0]!)).toBeLessThan(1e-4);
    } finally {
      await server.close();
      await model.dispose();
    }
  });
});
