import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { tinyModelPath } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

const post = async (server: LlamuxServer, path: string, body: unknown) => {
  const r = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, text: await r.text() };
};

// Editors' fill-in-the-middle: POST /infill (llama-server's shape) and /v1/completions with
// `suffix`, on the zoo's qwen3 model (Qwen2 vocabulary with Qwen2.5-Coder's FIM tokens). The
// reference is the library's ctx.infill() on the same context, greedy.
describe('fill-in-the-middle endpoints (zoo qwen3)', () => {
  let model: Model;
  let server: LlamuxServer;
  const prefix = 'def add(a, b):\n    return ';
  const suffix = '\n\nprint(add(1, 2))\n';

  beforeAll(async () => {
    model = await loadModel((await zooModels(['qwen3']))['qwen3'].path);
    server = await createServer({ model, port: 0, ctx: 2048, parallel: 1, threads: 1 });
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  const reference = () => server.context.infill({ prefix, suffix, maxTokens: 8, temperature: 0 }).result;

  it('/v1/completions with suffix completes between prompt and suffix', async () => {
    const want = await reference();
    const r = await post(server, '/v1/completions', { model: 'm', prompt: prefix, suffix, max_tokens: 8, temperature: 0 });
    expect(r.status).toBe(200);
    const body = JSON.parse(r.text) as { choices: Array<{ text: string }>; usage: { prompt_tokens: number } };
    expect(body.choices[0]!.text).toBe(want.text);
    expect(body.usage.prompt_tokens).toBe(want.promptTokens);
    const ids = await post(server, '/v1/completions', { model: 'm', prompt: [1, 2, 3], suffix, max_tokens: 2 });
    expect(ids.status).toBe(400);
    expect(ids.text).toMatch(/suffix/);
  });

  it('POST /infill answers llama-server\'s shape, streamed and not', async () => {
    const want = await reference();
    const r = await post(server, '/infill', { input_prefix: prefix.slice(0, 10), prompt: prefix.slice(10), input_suffix: suffix, n_predict: 8, temperature: 0 });
    expect(r.status).toBe(200);
    const body = JSON.parse(r.text) as Record<string, unknown>;
    expect(body).toMatchObject({ content: want.text, stop: true, tokens_predicted: want.generatedTokens, tokens_evaluated: want.promptTokens });
    expect(body.stop_type).toBe(want.finishReason === 'length' ? 'limit' : 'eos');
    const s = await post(server, '/infill', { input_prefix: prefix, input_suffix: suffix, n_predict: 8, temperature: 0, stream: true });
    const chunks = s.text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)) as { content: string; stop: boolean });
    expect(chunks.map((c) => c.content).join('')).toBe(want.text);
    expect(chunks.at(-1)!.stop).toBe(true);
    expect(chunks.slice(0, -1).every((c) => !c.stop)).toBe(true);
  });

  it('answers 400 to a malformed /infill body', async () => {
    const r = await post(server, '/infill', { input_prefix: 'x' });
    expect(r.status).toBe(400);
    expect(r.text).toMatch(/input_suffix/);
  });
});

describe('POST /infill on a model without FIM tokens', () => {
  it('answers 400 saying so', async () => {
    const model = await loadModel(tinyModelPath);
    const server = await createServer({ model, port: 0, ctx: 512, parallel: 1, threads: 1 });
    try {
      const r = await post(server, '/infill', { input_prefix: 'a', input_suffix: 'b' });
      expect(r.status).toBe(400);
      expect(r.text).toMatch(/no fill-in-the-middle tokens/);
    } finally {
      await server.close();
      await model.dispose();
    }
  });
});
