import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { openaiFor } from './clients.js';
import { ANSWER, OPENAI_TOOLS, QUESTION, WEATHER_RESULT, ensureChatModels } from './fixtures.js';

type Msg = OpenAI.Chat.Completions.ChatCompletionMessageParam;

describe('POST /v1/chat/completions with the official openai client', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  async function firstTurn(): Promise<{ messages: Msg[]; completion: OpenAI.Chat.Completions.ChatCompletion }> {
    const messages: Msg[] = [{ role: 'user', content: QUESTION }];
    const completion = await openai.chat.completions.create({ model: 'any-name', messages, tools: OPENAI_TOOLS, temperature: 0 });
    return { messages, completion };
  }

  function withResult(messages: Msg[], completion: OpenAI.Chat.Completions.ChatCompletion): Msg[] {
    const call = completion.choices[0]!.message.tool_calls![0]!;
    return [...messages, completion.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: WEATHER_RESULT }];
  }

  it('tool_choice "required" forces a call where the model would answer in text; a named function likewise', async () => {
    const { messages, completion } = await firstTurn();
    const follow = withResult(messages, completion);
    for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }] as const) {
      const r = await openai.chat.completions.create({ model: 'x', messages: follow, tools: OPENAI_TOOLS, temperature: 0, tool_choice });
      expect(r.choices[0]!.finish_reason).toBe('tool_calls');
      const call = r.choices[0]!.message.tool_calls![0]!;
      expect(call.type === 'function' && [call.function.name, JSON.parse(call.function.arguments)]).toEqual(['get_weather', { city: 'Paris' }]);
    }
  });

  it('answers 400 for a tool schema no value can satisfy, before generating', async () => {
    const bad = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', enum: [1] } }, required: ['a'] } } }];
    await expect(openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: bad })).rejects.toMatchObject({ status: 400 });
  });

  it('returns a tool call in the SDK shape', async () => {
    const { completion } = await firstTurn();
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('any-name');
    const choice = completion.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0]!;
    expect(call.type).toBe('function');
    expect(call.id).toMatch(/^call_[0-9a-z]+[0-9A-Za-z]{14}$/);
    if (call.type !== 'function') return;
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris' });
    expect(completion.usage).toMatchObject({ completion_tokens: 8, total_tokens: completion.usage!.prompt_tokens + 8 });
  });

  it('answers the follow-up with the tool result as a KV hit of the previous prompt and completion', async () => {
    const { messages, completion } = await firstTurn();
    const r = await openai.chat.completions.create({ model: 'x', messages: withResult(messages, completion), tools: OPENAI_TOOLS, temperature: 0 });
    expect(r.choices[0]!.message.content).toBe(ANSWER);
    expect(r.choices[0]!.finish_reason).toBe('stop');
    const prev = completion.usage!;
    expect(r.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(prev.prompt_tokens + prev.completion_tokens);
  });

  it('streams text chunks and reports usage with cached tokens', async () => {
    const { messages, completion } = await firstTurn();
    const stream = await openai.chat.completions.create({
      model: 'x',
      messages: withResult(messages, completion),
      tools: OPENAI_TOOLS,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    const parts: string[] = [];
    let finish: string | null = null;
    let usage: OpenAI.Completions.CompletionUsage | undefined;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      const c = chunk.choices[0];
      if (c?.delta.content) parts.push(c.delta.content);
      if (c?.finish_reason) finish = c.finish_reason;
    }
    expect(parts.join('')).toBe(ANSWER);
    expect(parts.length).toBeGreaterThan(1);
    expect(chunks).toBeGreaterThan(parts.length);
    expect(finish).toBe('stop');
    expect(usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(completion.usage!.prompt_tokens + completion.usage!.completion_tokens);
  });

  it('streams a tool call that the SDK stream helper assembles', async () => {
    const stream = openai.chat.completions.stream({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS, temperature: 0 });
    const final = await stream.finalChatCompletion();
    const msg = final.choices[0]!.message;
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
    expect(msg.tool_calls).toHaveLength(1);
    const call = msg.tool_calls![0]!;
    if (call.type !== 'function') throw new Error('expected a function call');
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris' });
    // The streamed id replays like any other.
    const r = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }, msg, { role: 'tool', tool_call_id: call.id, content: WEATHER_RESULT }], tools: OPENAI_TOOLS });
    expect(r.choices[0]!.message.content).toBe(ANSWER);
  });

  it('ends at a stop sequence and at max_tokens', async () => {
    const { messages, completion } = await firstTurn();
    const msgs = withResult(messages, completion);
    const stopped = await openai.chat.completions.create({ model: 'x', messages: msgs, tools: OPENAI_TOOLS, stop: [' sunny'] });
    expect(stopped.choices[0]!.message.content).toBe('The weather in Paris is');
    expect(stopped.choices[0]!.finish_reason).toBe('stop');
    const cut = await openai.chat.completions.create({ model: 'x', messages: msgs, tools: OPENAI_TOOLS, max_tokens: 3 });
    expect(cut.choices[0]!.message.content).toBe('The weather in');
    expect(cut.choices[0]!.finish_reason).toBe('length');
    expect(cut.usage!.completion_tokens).toBe(3);
  });

  it('returns a call cut short by max_tokens as text with its start marker, streamed and not', async () => {
    const messages: Msg[] = [{ role: 'user', content: QUESTION }];
    // the whole span as text (span detection off): what the cut reply must be a prefix of
    const whole = (await openai.chat.completions.create({ model: 'x', messages, tools: OPENAI_TOOLS, tool_choice: 'none' })).choices[0]!.message.content!;
    expect(whole.startsWith('<tool_call>')).toBe(true);
    const cut = await openai.chat.completions.create({ model: 'x', messages, tools: OPENAI_TOOLS, max_tokens: 4 });
    const choice = cut.choices[0]!;
    expect(choice.finish_reason).toBe('length');
    expect(choice.message.tool_calls).toBeUndefined();
    expect(choice.message.content!.startsWith('<tool_call>')).toBe(true);
    expect(choice.message.content!.length).toBeGreaterThan('<tool_call>'.length);
    expect(whole.startsWith(choice.message.content!)).toBe(true);
    expect(whole.length).toBeGreaterThan(choice.message.content!.length);
    const stream = await openai.chat.completions.create({ model: 'x', messages, tools: OPENAI_TOOLS, max_tokens: 4, stream: true });
    let text = '';
    let reason: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      expect(chunk.choices[0]?.delta.tool_calls).toBeUndefined();
      reason = chunk.choices[0]?.finish_reason ?? reason;
    }
    expect(text).toBe(choice.message.content);
    expect(reason).toBe('length');
  });

  it('returns no tool calls with tool_choice "none"', async () => {
    const r = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS, tool_choice: 'none' });
    expect(r.choices[0]!.message.tool_calls).toBeUndefined();
    expect(r.choices[0]!.finish_reason).toBe('stop');
    expect(r.choices[0]!.message.content).toContain('"get_weather"');
  });

  it('lists the loaded model, and serves any model name', async () => {
    const list = await openai.models.list();
    expect(list.data.map((m) => m.id)).toEqual(['llamux-scripted-demo']);
    const one = await openai.models.retrieve('gpt-4o');
    expect(one.id).toBe('gpt-4o');
  });

  it('reports a conversation id header, derived from known tool ids on later turns', async () => {
    const first = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS }).withResponse();
    const conv = first.response.headers.get('x-llamux-conversation');
    expect(conv).toMatch(/^conv_/);
    const next = await openai.chat.completions
      .create({ model: 'x', messages: withResult([{ role: 'user', content: QUESTION }], first.data), tools: OPENAI_TOOLS })
      .withResponse();
    expect(next.response.headers.get('x-llamux-conversation')).toBe(conv);
    const pinned = await openai.chat.completions
      .create({ model: 'x', messages: [{ role: 'user', content: QUESTION }] }, { headers: { 'x-llamux-conversation': 'my-conv.1' } })
      .withResponse();
    expect(pinned.response.headers.get('x-llamux-conversation')).toBe('my-conv.1');
  });

  it('exposes Prometheus metrics for requests, tokens, cache outcomes, reuse and TTFT', async () => {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    expect(text).toMatch(/^llamux_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} \d+$/m);
    expect(text).toMatch(/^llamux_reused_tokens_total [1-9]\d*$/m);
    expect(text).toMatch(/^llamux_prompt_tokens_total [1-9]\d*$/m);
    expect(text).toMatch(/^llamux_cache_outcomes_total\{outcome="sticky",tier="live"\} [1-9]\d*$/m);
    expect(text).toMatch(/^llamux_cache_outcomes_total\{outcome="cold",tier="none"\} [1-9]\d*$/m);
    expect(text).toMatch(/^llamux_tool_call_replay_total\{outcome="replayed"\} [1-9]\d*$/m);
    expect(text).toMatch(/^llamux_time_to_first_token_seconds_count [1-9]\d*$/m);
    expect(text).toContain('# TYPE llamux_time_to_first_token_seconds histogram');
    expect(text).toMatch(/^llamux_sessions [1-9]\d*$/m);
    expect(text).toMatch(/^llamux_pinned_sequences [1-2]$/m);
    const health = (await (await fetch(`${server.url}/health`)).json()) as Record<string, unknown>;
    expect(health).toMatchObject({ status: 'ok', model: 'llamux-scripted-demo', parallel: 2 });
  });
});

describe('parallel tool calls', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.parallel);
    server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  const tools = [
    ...OPENAI_TOOLS,
    { type: 'function' as const, function: { name: 'get_time', description: 'Time in a zone', parameters: { type: 'object', properties: { tz: { type: 'string' } } } } },
  ];

  it('returns both calls in order, with distinct ids, and answers once both results are in', async () => {
    const r = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools });
    const calls = r.choices[0]!.message.tool_calls!;
    expect(r.choices[0]!.finish_reason).toBe('tool_calls');
    expect(calls.map((c) => (c.type === 'function' ? [c.function.name, JSON.parse(c.function.arguments)] : null))).toEqual([
      ['get_weather', { city: 'Paris' }],
      ['get_time', { tz: 'CET' }],
    ]);
    expect(new Set(calls.map((c) => c.id)).size).toBe(2);
    expect(r.choices[0]!.message.content).toBe('\n Done.');
    const follow = await openai.chat.completions.create({
      model: 'x',
      messages: [
        { role: 'user', content: QUESTION },
        r.choices[0]!.message,
        { role: 'tool', tool_call_id: calls[0]!.id, content: WEATHER_RESULT },
        { role: 'tool', tool_call_id: calls[1]!.id, content: '12:00' },
      ],
      tools,
    });
    expect(follow.choices[0]!.message.content).toBe(ANSWER);
    expect(follow.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(r.usage!.prompt_tokens);
  });

  it('streams both calls with their indices', async () => {
    const stream = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools, stream: true });
    const seen: Array<[number, string | undefined]> = [];
    for await (const chunk of stream) for (const tc of chunk.choices[0]?.delta.tool_calls ?? []) seen.push([tc.index, tc.function?.name]);
    expect(seen).toEqual([
      [0, 'get_weather'],
      [1, 'get_time'],
    ]);
  });

  it('returns only the first call with parallel_tool_calls false, and generates nothing after it', async () => {
    const r = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools, parallel_tool_calls: false });
    const calls = r.choices[0]!.message.tool_calls!;
    expect(calls).toHaveLength(1);
    expect(calls[0]!.type === 'function' && calls[0]!.function.name).toBe('get_weather');
    expect(r.choices[0]!.finish_reason).toBe('tool_calls');
    expect(r.choices[0]!.message.content).toBeNull();
    // <tool_call> + six body tokens + </tool_call>: the second call is never sampled.
    expect(r.usage!.completion_tokens).toBe(8);
  });
});
