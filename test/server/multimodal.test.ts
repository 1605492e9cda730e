// Images through the HTTP APIs (issue 37): OpenAI `image_url` parts with data: URLs and
// Anthropic base64 `image` blocks, on the zoo's qwen3 model with a generated gemma3 projector.
// The reference is the library's chat prompt with the same image (buildChatPromptWithMedia).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildChatPromptWithMedia, ChatTemplate, loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { patternPng } from '../helpers/images.js';
import { ensureProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

const post = async (server: LlamuxServer, path: string, body: unknown, headers: Record<string, string> = {}) => {
  const r = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: r.status, conversation: r.headers.get('x-llamux-conversation') ?? '', json: (await r.json()) as Record<string, any> };
};

describe('images through the server (zoo qwen3 + a generated gemma3 projector)', () => {
  let model: Model;
  let plainModel: Model;
  let server: LlamuxServer;
  let plain: LlamuxServer;
  const image = patternPng(40, 40, 7);
  const dataUrl = `data:image/png;base64,${image.toString('base64')}`;
  const openai = (url: string, text = 'What is this?') => ({
    model: 'm',
    max_tokens: 3,
    temperature: 0,
    messages: [{ role: 'user', content: [{ type: 'text', text }, { type: 'image_url', image_url: { url } }] }],
  });

  beforeAll(async () => {
    const text = (await zooModels(['qwen3']))['qwen3'];
    const projector = await ensureProjector({ projectionDim: text.nEmbd });
    model = await loadModel(text.path, { projector: projector.path });
    plainModel = await loadModel(text.path);
    server = await createServer({ model, port: 0, ctx: 1024, parallel: 1, threads: 2 });
    plain = await createServer({ model: plainModel, port: 0, ctx: 512, parallel: 1, threads: 1 });
  });
  afterAll(async () => {
    await server?.close();
    await plain?.close();
    await model?.dispose();
    await plainModel?.dispose();
  });

  it('/v1/models lists the capability', async () => {
    const m = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ capabilities: unknown }> };
    expect(m.data[0]!.capabilities).toEqual({ vision: true, audio: false });
    const p = (await (await fetch(`${plain.url}/v1/models`)).json()) as { data: Array<{ capabilities: unknown }> };
    expect(p.data[0]!.capabilities).toEqual({ vision: false, audio: false });
  });

  it('OpenAI image_url (data: URL): the prompt is the library\'s, and the next turn reuses the image\'s KV', async () => {
    const want = await buildChatPromptWithMedia(model, [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image', image }] }], { template: ChatTemplate.fromModel(model) });
    const first = openai(dataUrl);
    const a = await post(server, '/v1/chat/completions', first);
    expect(a.status).toBe(200);
    expect(a.json.usage.prompt_tokens).toBe(want.tokens.length);
    const next = { ...first, messages: [...first.messages, { role: 'assistant', content: a.json.choices[0].message.content }, { role: 'user', content: 'And now?' }] };
    const b = await post(server, '/v1/chat/completions', next, { 'x-llamux-conversation': a.conversation });
    expect(b.status).toBe(200);
    // the whole first turn, image included, comes from the conversation's KV
    expect(b.json.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(want.tokens.length);
  });

  it('Anthropic base64 image blocks', async () => {
    const r = await post(server, '/v1/messages', {
      model: 'm',
      max_tokens: 3,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: image.toString('base64') } }] }],
    });
    expect(r.status).toBe(200);
    expect(r.json.usage.input_tokens + r.json.usage.cache_read_input_tokens).toBeGreaterThan(16);
  });

  it('bad media is a 400 naming the part; remote URLs are not fetched; a text-only model refuses images', async () => {
    const corrupt = await post(server, '/v1/chat/completions', openai(`data:image/png;base64,${image.subarray(0, 40).toString('base64')}`));
    expect(corrupt.status).toBe(400);
    expect(corrupt.json.error.message).toContain('messages[0].content[1] (image)');
    const unsupported = await post(server, '/v1/chat/completions', openai(`data:image/webp;base64,${Buffer.from('RIFF0000WEBPVP8 ').toString('base64')}`));
    expect(unsupported.status).toBe(400);
    expect(unsupported.json.error.message).toMatch(/content\[1\] \(image\).*unsupported format/);
    const remote = await post(server, '/v1/chat/completions', openai('https://example.com/cat.png'));
    expect(remote.status).toBe(400);
    expect(remote.json.error.message).toContain('not fetched');
    const noProjector = await post(plain, '/v1/chat/completions', openai(dataUrl));
    expect(noProjector.status).toBe(400);
    expect(noProjector.json.error.message).toContain('--mmproj');
    const url = await post(server, '/v1/messages', { model: 'm', max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } }, { type: 'text', text: 'x' }] }] });
    expect(url.status).toBe(400);
    // the server goes on
    const ok = await post(server, '/v1/chat/completions', openai(dataUrl, 'Again?'));
    expect(ok.status).toBe(200);
  });
});
