// Audio through the HTTP API (issue 37): OpenAI `input_audio` parts ({ data: base64, format })
// on the zoo's qwen3 model with a generated qwen2a projector. The reference is the library's
// chat prompt with the same clip (buildChatPromptWithMedia).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildChatPromptWithMedia, ChatTemplate, loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { encodeWav, testSignal } from '../helpers/audio.js';
import { patternPng } from '../helpers/images.js';
import { ensureAudioProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

const post = async (server: LlamuxServer, path: string, body: unknown, headers: Record<string, string> = {}) => {
  const r = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: r.status, conversation: r.headers.get('x-llamux-conversation') ?? '', json: (await r.json()) as Record<string, any> };
};

describe('audio through the server (zoo qwen3 + a generated qwen2a projector)', () => {
  let model: Model;
  let server: LlamuxServer;
  const clip = encodeWav(testSignal(1, 6));
  const request = (data: string, format = 'wav', text = 'What is said?') => ({
    model: 'm',
    max_tokens: 3,
    temperature: 0,
    messages: [{ role: 'user', content: [{ type: 'text', text }, { type: 'input_audio', input_audio: { data, format } }] }],
  });

  beforeAll(async () => {
    const text = (await zooModels(['qwen3']))['qwen3'];
    const projector = await ensureAudioProjector({ projectionDim: text.nEmbd });
    model = await loadModel(text.path, { projector: projector.path });
    server = await createServer({ model, port: 0, ctx: 2048, parallel: 1, threads: 2 });
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  it('/v1/models lists the audio capability', async () => {
    const m = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ capabilities: unknown }> };
    expect(m.data[0]!.capabilities).toEqual({ vision: false, audio: true });
  });

  it('input_audio: the prompt is the library\'s, and the next turn reuses the clip\'s KV', async () => {
    const want = await buildChatPromptWithMedia(model, [{ role: 'user', content: [{ type: 'text', text: 'What is said?' }, { type: 'audio', audio: clip }] }], { template: ChatTemplate.fromModel(model) });
    const first = request(clip.toString('base64'));
    const a = await post(server, '/v1/chat/completions', first);
    expect(a.status).toBe(200);
    expect(a.json.usage.prompt_tokens).toBe(want.tokens.length);
    const next = { ...first, messages: [...first.messages, { role: 'assistant', content: a.json.choices[0].message.content }, { role: 'user', content: 'And now?' }] };
    const b = await post(server, '/v1/chat/completions', next, { 'x-llamux-conversation': a.conversation });
    expect(b.status).toBe(200);
    expect(b.json.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(want.tokens.length);
  });

  it('bad audio is a 400 naming the part; images to an audio-only projector are refused; the server goes on', async () => {
    const truncated = await post(server, '/v1/chat/completions', request(clip.subarray(0, clip.length - 64).toString('base64')));
    expect(truncated.status).toBe(400);
    expect(truncated.json.error.message).toMatch(/messages\[0\]\.content\[1\] \(audio\): truncated/);
    const corrupt = await post(server, '/v1/chat/completions', request(Buffer.concat([Buffer.from('ID3'), Buffer.alloc(300, 7)]).toString('base64'), 'mp3'));
    expect(corrupt.status).toBe(400);
    expect(corrupt.json.error.message).toMatch(/messages\[0\]\.content\[1\] \(audio\): could not be decoded/);
    const notBase64 = await post(server, '/v1/chat/completions', request('@@not base64@@'));
    expect(notBase64.status).toBe(400);
    expect(notBase64.json.error.message).toContain('messages[0].content[1] (audio)');
    const image = await post(server, '/v1/chat/completions', {
      model: 'm',
      max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${patternPng(8, 8, 1).toString('base64')}` } }] }],
    });
    expect(image.status).toBe(400);
    expect(image.json.error.message).toContain('reads no images');
    const ok = await post(server, '/v1/chat/completions', request(clip.toString('base64'), 'wav', 'Again?'));
    expect(ok.status).toBe(200);
  });
});
