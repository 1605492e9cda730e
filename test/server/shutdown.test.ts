import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer } from '../../src/server/index.js';
import { tinyModelPath } from '../helpers/paths.js';

// A shutdown must not look like a complete answer: a stream cut by server.close() (SIGTERM)
// ends with an error event, and a request still waiting for its answer gets a 503.
describe('server.close() with requests in flight (tiny Llama 2 model)', () => {
  let model: Model;

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
  });
  afterAll(async () => {
    await model.dispose();
  });

  // End of generation banned: a long answer that is still running when the server closes.
  const body = (stream: boolean) => JSON.stringify({ model: 'm', prompt: 'Once upon a time', max_tokens: 3500, temperature: 0, logit_bias: { '2': -100 }, stream });

  it('ends an open stream with an error event saying the server is shutting down, and answers a waiting request 503', async () => {
    const server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1 });
    const streamed = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(true) });
    expect(streamed.status).toBe(200);
    const reader = streamed.body!.getReader();
    const first = await reader.read(); // the stream is running
    expect(first.done).toBe(false);
    const waiting = fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(false) });
    await new Promise((r) => setTimeout(r, 100));
    const closed = server.close();
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const r = await waiting;
    await closed;
    expect(text).toMatch(/data: \{"error":\{[^\n]*"message":"The server is shutting down"/);
    expect(text).not.toContain('[DONE]');
    expect(text).not.toMatch(/"finish_reason":"(stop|length)"/);
    expect(r.status).toBe(503);
    expect(((await r.json()) as { error: { message: string } }).error.message).toBe('The server is shutting down');
  });
});
