import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { anthropicFor, openaiFor } from './clients.js';
import { ANSWER, ANTHROPIC_TOOLS, OPENAI_TOOLS, QUESTION, ensureChatModels } from './fixtures.js';

type Msg = OpenAI.Chat.Completions.ChatCompletionMessageParam;

describe('concurrent conversations', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    server = await createServer({ model, port: 0, ctx: 8192, parallel: 4, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  async function turn1(k: number) {
    const messages: Msg[] = [
      { role: 'system', content: `You are agent number ${k}.` },
      { role: 'user', content: QUESTION },
    ];
    const r = await openai.chat.completions.create({ model: 'x', messages, tools: OPENAI_TOOLS }).withResponse();
    return { k, messages, completion: r.data, conversation: r.response.headers.get('x-llamux-conversation')! };
  }

  async function turn2(t: Awaited<ReturnType<typeof turn1>>) {
    const msg = t.completion.choices[0]!.message;
    const messages: Msg[] = [...t.messages, msg, { role: 'tool', tool_call_id: msg.tool_calls![0]!.id, content: `{"temperature": ${t.k}}` }];
    const r = await openai.chat.completions.create({ model: 'x', messages, tools: OPENAI_TOOLS }).withResponse();
    return { completion: r.data, conversation: r.response.headers.get('x-llamux-conversation')! };
  }

  it('keeps 20 concurrent conversations on 4 sequences apart: own ids, own KV, each answered', async () => {
    const N = 20;
    const firsts = await Promise.all(Array.from({ length: N }, (_, k) => turn1(k)));
    const ids = firsts.map((f) => f.completion.choices[0]!.message.tool_calls![0]!.id);
    expect(new Set(ids).size).toBe(N);
    expect(new Set(firsts.map((f) => f.conversation)).size).toBe(N);
    for (const f of firsts) {
      const call = f.completion.choices[0]!.message.tool_calls![0]!;
      expect(call.type === 'function' && JSON.parse(call.function.arguments)).toEqual({ city: 'Paris' });
    }
    const seconds = await Promise.all(firsts.map((f) => turn2(f)));
    seconds.forEach((s, k) => {
      expect(s.completion.choices[0]!.message.content).toBe(ANSWER);
      // The conversation is found again from the tool id the client sent back (no header needed).
      expect(s.conversation).toBe(firsts[k]!.conversation);
      // Its own KV: the previous prompt and the generated call (pinned session, or restored from RAM).
      const prev = firsts[k]!.completion.usage!;
      expect(s.completion.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(prev.prompt_tokens + prev.completion_tokens);
    });
  });

  it('lands each of as many conversations as sequences on the sequence holding its KV', async () => {
    const firsts = await Promise.all(Array.from({ length: 4 }, (_, k) => turn1(100 + k)));
    const seconds = await Promise.all(firsts.map((f) => turn2(f)));
    seconds.forEach((s, k) => {
      const prev = firsts[k]!.completion.usage!;
      expect(s.completion.choices[0]!.message.content).toBe(ANSWER);
      expect(s.completion.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(prev.prompt_tokens + prev.completion_tokens);
    });
  });

  it('serves OpenAI and Anthropic streams at the same time', async () => {
    const anthropic = anthropicFor(server);
    const runs = Array.from({ length: 6 }, async (_, k) => {
      if (k % 2 === 0) {
        const s = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS, stream: true });
        let name = '';
        for await (const c of s) name += c.choices[0]?.delta.tool_calls?.[0]?.function?.name ?? '';
        return name;
      }
      const m = await anthropic.messages.stream({ model: 'x', max_tokens: 32, messages: [{ role: 'user', content: QUESTION }], tools: ANTHROPIC_TOOLS }).finalMessage();
      return m.content[0]!.type === 'tool_use' ? m.content[0]!.name : '';
    });
    expect(await Promise.all(runs)).toEqual(Array(6).fill('get_weather'));
  });

  it('ends the generation when a streaming client disconnects', async () => {
    const ac = new AbortController();
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      signal: ac.signal,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', stream: true, messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS }),
    });
    expect(res.status).toBe(200);
    ac.abort();
    await new Promise((r) => setTimeout(r, 100));
    expect(server.context.pendingRequests).toBe(0);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });
});
