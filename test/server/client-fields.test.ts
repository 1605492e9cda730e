import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { openaiFor } from './clients.js';
import { OPENAI_TOOLS, QUESTION, ensureChatModels } from './fixtures.js';

// Fields the current official clients and agents send: each is accepted with a documented
// meaning (prompt_cache_key: the conversation, when nothing else names it) or as a documented
// no-op, never a 400 that makes the client fail outright.
describe('POST /v1/chat/completions: fields of current clients', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  const messages = [{ role: 'user' as const, content: QUESTION }];

  it('accepts safety_identifier, verbosity, prediction, modalities ["text"] and service_tier; the answer is the one without them', async () => {
    const plain = await openai.chat.completions.create({ model: 'x', messages, tools: OPENAI_TOOLS, temperature: 0 });
    const withFields = await openai.chat.completions.create({
      model: 'x',
      messages,
      tools: OPENAI_TOOLS,
      temperature: 0,
      safety_identifier: 'user-hash-1',
      verbosity: 'low',
      prediction: { type: 'content', content: 'The weather in Paris is' },
      modalities: ['text'],
      service_tier: 'auto',
    });
    const call = (r: OpenAI.Chat.Completions.ChatCompletion) => {
      const c = r.choices[0]!.message.tool_calls?.[0];
      return c?.type === 'function' ? c.function : undefined;
    };
    expect(call(plain)).toBeDefined();
    expect(call(withFields)).toEqual(call(plain));
    expect(withFields.choices[0]!.finish_reason).toBe(plain.choices[0]!.finish_reason);
  });

  it('refuses modalities ["audio"] with a 400 that names the field', async () => {
    const e = await openai.chat.completions.create({ model: 'x', messages, modalities: ['text', 'audio'] } as never).then(() => undefined, (err: unknown) => err);
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect((e as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(/modalities/);
  });

  it('uses prompt_cache_key as the conversation when nothing else names one: the same key, the same conversation', async () => {
    const send = (key: string) =>
      openai.chat.completions.create({ model: 'x', messages, max_tokens: 2, temperature: 0, prompt_cache_key: key }).withResponse();
    const a1 = await send('codex-session-7');
    const a2 = await send('codex-session-7');
    const b = await send('another key / with spaces');
    const conv = (r: Awaited<ReturnType<typeof send>>) => r.response.headers.get('x-llamux-conversation');
    expect(conv(a1)).toMatch(/^pck_[0-9a-f]{32}$/);
    expect(conv(a2)).toBe(conv(a1));
    expect(conv(b)).toMatch(/^pck_[0-9a-f]{32}$/);
    expect(conv(b)).not.toBe(conv(a1));
    // the second request of the conversation reuses the first one's KV (the same session)
    expect(a2.data.usage!.prompt_tokens_details?.cached_tokens).toBeGreaterThan(0);
    // an explicit conversation header wins over the key
    const named = await openai.chat.completions.create({ model: 'x', messages, max_tokens: 2, prompt_cache_key: 'codex-session-7' }, { headers: { 'x-llamux-conversation': 'mine' } }).withResponse();
    expect(named.response.headers.get('x-llamux-conversation')).toBe('mine');
  });

  it('return_progress (llama-server\'s field): streamed chunks carry prompt_progress before the answer, the last one complete', async () => {
    const read = async (returnProgress: boolean) => {
      const r = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'x', messages, tools: OPENAI_TOOLS, stream: true, ...(returnProgress ? { return_progress: true } : {}) }),
      });
      const text = await r.text();
      return text.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)) as { choices: unknown[]; prompt_progress?: { total: number; cache: number; processed: number; time_ms: number } });
    };
    const chunks = await read(true);
    const progress = chunks.filter((c) => c.prompt_progress !== undefined);
    expect(progress.length).toBeGreaterThanOrEqual(1);
    expect(progress.every((c) => c.choices.length === 0)).toBe(true);
    const last = progress.at(-1)!.prompt_progress!;
    expect(last.processed).toBe(last.total);
    expect(last.total).toBeGreaterThan(0);
    const firstAnswer = chunks.findIndex((c) => c.prompt_progress === undefined && (c.choices as Array<{ delta?: { tool_calls?: unknown } }>)[0]?.delta?.tool_calls !== undefined);
    expect(firstAnswer).toBeGreaterThan(chunks.indexOf(progress.at(-1)!));
    expect((await read(false)).some((c) => c.prompt_progress !== undefined)).toBe(false);
  });
});
