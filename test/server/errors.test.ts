import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { anthropicFor, openaiFor } from './clients.js';
import { ANTHROPIC_TOOLS, OPENAI_TOOLS, QUESTION, ensureChatModels } from './fixtures.js';

const KEY = 'sk-test-123';

async function caught(p: Promise<unknown>): Promise<Error & { status?: number; error?: unknown }> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(Error);
  return e as Error & { status?: number; error?: unknown };
}

/** The message inside an Anthropic error body. */
function apiMessage(e: { error?: unknown }): string {
  return (e.error as { error: { message: string } }).error.message;
}

describe('request validation, API keys and limits', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  let anthropic: Anthropic;
  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${server.url}${path}`, { method: 'POST', body, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers } });

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    server = await createServer({ model, port: 0, ctx: 8192, parallel: 1, threads: 1, apiKey: KEY, maxBodyBytes: 4096 });
    openai = openaiFor(server, KEY);
    anthropic = anthropicFor(server, KEY);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  it('answers 400 in the OpenAI shape, naming the bad field', async () => {
    const missing = await caught(openai.chat.completions.create({ model: 'x' } as never));
    expect(missing).toBeInstanceOf(OpenAI.BadRequestError);
    expect(missing.message).toBe('400 Invalid request body: "messages" is required');
    const wrongType = await caught(openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 42 as never }] }));
    expect(wrongType.status).toBe(400);
    expect(wrongType.message).toMatch(/"messages.0.content" but received 42 of type number/);
    const unknown = await caught(openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], foo: 1 } as never));
    expect(unknown.message).toMatch(/unknown field "foo"/);
    const choice = await caught(openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], tools: OPENAI_TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }));
    expect(choice.message).toMatch(/tool_choice names the function "nope", which is not in "tools"/);
    const image = await caught(openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'file:///etc/passwd' } }] }] }));
    expect(image.message).toMatch(/content parts of type "image_url" are not supported/);
  });

  it('answers 400 for bodies that are not JSON, with the OpenAI error object', async () => {
    const res = await post('/v1/chat/completions', '{"model": ');
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe('invalid_request_error');
    expect(body.error.message).toMatch(/^The request body is not valid JSON/);
    const empty = await post('/v1/chat/completions', '');
    expect(empty.status).toBe(400);
  });

  it('answers 400 in the Anthropic shape', async () => {
    const e = await caught(anthropic.messages.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] } as never));
    expect(e).toBeInstanceOf(Anthropic.BadRequestError);
    expect(e.error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(apiMessage(e)).toBe('Invalid request body: "max_tokens" is required');
    const block = await caught(anthropic.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'file:///etc/passwd' } }] }] }));
    expect(apiMessage(block)).toMatch(/content blocks of type "image" are not supported/);
    const server_tool = await caught(anthropic.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'bash_20250124', name: 'bash' }] }));
    expect(apiMessage(server_tool)).toMatch(/server tools \("bash_20250124"\) are not supported/);
    const choice = await caught(anthropic.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], tools: ANTHROPIC_TOOLS, tool_choice: { type: 'tool', name: 'nope' } }));
    expect(apiMessage(choice)).toMatch(/tool_choice names the tool "nope"/);
  });

  it('rejects a bad conversation header', async () => {
    const e = await caught(openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }, { headers: { 'x-llamux-conversation': '../../etc/passwd' } }));
    expect(e.status).toBe(400);
    expect(e.message).toMatch(/x-llamux-conversation header must be/);
  });

  it('enforces the API key (Bearer or x-api-key) everywhere but /health', async () => {
    const wrong = await caught(openaiFor(server, 'sk-wrong').chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }));
    expect(wrong).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(wrong.message).toMatch(/^401 Invalid or missing API key/);
    const wrongAnthropic = await caught(anthropicFor(server, 'sk-wrong').messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }));
    expect(wrongAnthropic).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(wrongAnthropic.error).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
    // The right key works through both headers.
    const viaXKey = await anthropic.messages.create({ model: 'x', max_tokens: 2, messages: [{ role: 'user', content: QUESTION }] });
    expect(viaXKey.type).toBe('message');
    expect((await openai.models.list()).data).toHaveLength(1);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect((await fetch(`${server.url}/metrics`)).status).toBe(401);
    expect((await fetch(`${server.url}/v1/models`)).status).toBe(401);
    expect((await fetch(`${server.url}/metrics`, { headers: { 'x-api-key': KEY } })).status).toBe(200);
  });

  it('answers 413 for a body over the limit, declared or streamed', async () => {
    const big = 'x'.repeat(8000);
    const e = await caught(openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: big }] }));
    expect(e.status).toBe(413);
    expect(e.message).toMatch(/exceeds the limit of 4096 bytes/);
    const a = await caught(anthropic.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: big }] }));
    expect(a.status).toBe(413);
    expect(a.error).toMatchObject({ error: { type: 'request_too_large' } });
    const chunks = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < 4; i++) c.enqueue(new TextEncoder().encode('x'.repeat(2000)));
        c.close();
      },
    });
    const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', body: chunks, duplex: 'half', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' } } as RequestInit);
    expect(res.status).toBe(413);
    // The server still serves after that.
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('answers 404 for unknown paths and 405 for wrong methods', async () => {
    const h = { authorization: `Bearer ${KEY}` };
    const nf = await fetch(`${server.url}/v1/edits`, { method: 'POST', headers: h, body: '{}' });
    expect(nf.status).toBe(404);
    expect(((await nf.json()) as { error: { message: string } }).error.message).toBe('There is no endpoint POST /v1/edits');
    expect((await fetch(`${server.url}/v1/chat/completions`, { headers: h })).status).toBe(405);
    expect((await fetch(`${server.url}/v1/messages`, { headers: h })).status).toBe(405);
  });

  it('answers 400 when the prompt does not fit the context', async () => {
    const small = await createServer({ model, port: 0, ctx: 128, parallel: 1, threads: 1 });
    try {
      const e = await caught(openaiFor(small).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS }));
      expect(e.status).toBe(400);
      expect(e.error).toMatchObject({ code: 'context_length_exceeded' });
      expect(e.message).toContain(`holds ${small.context.settings.sequenceContextSize};`);
    } finally {
      await small.close();
    }
  });

  it('validates its own options', async () => {
    await expect(createServer({ port: 0 })).rejects.toThrow(/give exactly one of "model", "modelPath" and "models"/);
    await expect(createServer({ model, modelPath: 'x.gguf' })).rejects.toThrow(/give exactly one/);
    await expect(createServer({ model, port: 70000 })).rejects.toThrow(/"port"/);
    await expect(createServer({ model, bogus: 1 } as never)).rejects.toThrow(/unknown option "bogus"/);
    await expect(createServer({ modelPath: '/nonexistent/model.gguf' })).rejects.toMatchObject({ code: 'MODEL_NOT_FOUND' });
  });
});
