// Exact tool-call replay. The server renders with Qwen 2.5's real template, which writes a call as
// `<tool_call>\n{...}\n</tool_call>` while the scripted model generated `<tool_call>{...}</tool_call>`:
// only the stored exact tokens make the generated turn a KV hit.
import { join } from 'node:path';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, ToolCallStore, type LlamuxServer } from '../../src/server/index.js';
import { tempDir } from '../helpers/paths.js';
import { anthropicFor, openaiFor } from './clients.js';
import { ANSWER, ANTHROPIC_TOOLS, OPENAI_TOOLS, QUESTION, WEATHER_RESULT, ensureChatModels, readTemplate } from './fixtures.js';

type Completion = OpenAI.Chat.Completions.ChatCompletion;

function replayCount(metrics: string, outcome: string): number {
  const m = new RegExp(`^llamux_tool_call_replay_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(metrics);
  return m ? Number(m[1]) : 0;
}

describe('exact tool-call replay', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  let storePath: string;
  const chatTemplate = readTemplate('Qwen-Qwen2.5-7B-Instruct');

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    storePath = join(tempDir('replay-store'), 'tool-calls.sqlite');
    server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1, chatTemplate, storePath });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  async function turn1(client = openai): Promise<Completion> {
    return client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS });
  }

  function turn2Messages(first: Completion, override?: { id?: string; args?: string }): OpenAI.Chat.Completions.ChatCompletionMessageParam[] {
    const call = first.choices[0]!.message.tool_calls![0]!;
    if (call.type !== 'function') throw new Error('expected a function call');
    const id = override?.id ?? call.id;
    return [
      { role: 'user', content: QUESTION },
      { role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: override?.args ?? call.function.arguments } }] },
      { role: 'tool', tool_call_id: id, content: WEATHER_RESULT },
    ];
  }

  const metrics = async (s = server): Promise<string> => (await fetch(`${s.url}/metrics`)).text();

  it('reuses the previous prompt and the whole generated call for a known id', async () => {
    const first = await turn1();
    const before = replayCount(await metrics(), 'replayed');
    const r = await openai.chat.completions.create({ model: 'x', messages: turn2Messages(first), tools: OPENAI_TOOLS });
    expect(r.choices[0]!.message.content).toBe(ANSWER);
    expect(r.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(first.usage!.prompt_tokens + first.usage!.completion_tokens);
    expect(replayCount(await metrics(), 'replayed')).toBe(before + 1);
  });

  it('still hits when the client re-serialised the arguments JSON', async () => {
    const first = await turn1();
    const r = await openai.chat.completions.create({ model: 'x', messages: turn2Messages(first, { args: '{ "city" :  "Paris" }' }), tools: OPENAI_TOOLS });
    expect(r.choices[0]!.message.content).toBe(ANSWER);
    expect(r.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(first.usage!.prompt_tokens + first.usage!.completion_tokens);
  });

  it('falls back to the template for an unknown id (only the previous prompt and the start marker hit)', async () => {
    const first = await turn1();
    const before = replayCount(await metrics(), 'unknown');
    const r = await openai.chat.completions.create({ model: 'x', messages: turn2Messages(first, { id: 'call_from_elsewhere' }), tools: OPENAI_TOOLS });
    expect(r.choices[0]!.message.content).toBe(ANSWER);
    expect(r.usage!.prompt_tokens_details!.cached_tokens).toBe(first.usage!.prompt_tokens + 1);
    expect(replayCount(await metrics(), 'unknown')).toBe(before + 1);
  });

  it('renders a known id through the template when the client changed the arguments', async () => {
    const first = await turn1();
    const r = await openai.chat.completions.create({ model: 'x', messages: turn2Messages(first, { args: '{"city": "Lyon"}' }), tools: OPENAI_TOOLS });
    expect(r.usage!.prompt_tokens_details!.cached_tokens).toBe(first.usage!.prompt_tokens + 1);
  });

  it('replays Anthropic tool_use blocks whose input keys were reordered', async () => {
    const anthropic = anthropicFor(server);
    const first = await anthropic.messages.create({ model: 'x', max_tokens: 64, messages: [{ role: 'user', content: QUESTION }], tools: ANTHROPIC_TOOLS });
    const use = first.content[0]!;
    if (use.type !== 'tool_use') throw new Error('expected tool_use');
    const m = await anthropic.messages.create({
      model: 'x',
      max_tokens: 64,
      tools: ANTHROPIC_TOOLS,
      messages: [
        { role: 'user', content: QUESTION },
        { role: 'assistant', content: [{ type: 'tool_use', id: use.id, name: use.name, input: JSON.parse('{"city":"Paris"}') }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: WEATHER_RESULT }] },
      ],
    });
    expect(m.content).toEqual([{ type: 'text', text: ANSWER }]);
    const prev = first.usage.input_tokens + (first.usage.cache_read_input_tokens ?? 0);
    expect(m.usage.cache_read_input_tokens).toBeGreaterThanOrEqual(prev + first.usage.output_tokens);
  });

  it('after a restart with the same store, replays the stored exact tokens and keeps the conversation', async () => {
    const first = await turn1().then(async (c) => c);
    const withConv = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: QUESTION }], tools: OPENAI_TOOLS }).withResponse();
    const conversation = withConv.response.headers.get('x-llamux-conversation');
    await server.close();

    server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1, chatTemplate, storePath });
    openai = openaiFor(server);
    // The new server has an empty KV: warm the turn-1 prompt (the model regenerates the same call).
    const warm = await turn1();
    expect(warm.choices[0]!.message.tool_calls![0]!.id).not.toBe(first.choices[0]!.message.tool_calls![0]!.id);
    const r = await openai.chat.completions.create({ model: 'x', messages: turn2Messages(withConv.data), tools: OPENAI_TOOLS }).withResponse();
    expect(r.data.choices[0]!.message.content).toBe(ANSWER);
    expect(r.data.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(first.usage!.prompt_tokens + first.usage!.completion_tokens);
    expect(replayCount(await metrics(), 'replayed')).toBe(1);
    expect(r.response.headers.get('x-llamux-conversation')).toBe(conversation);
  });
});

describe('ToolCallStore', () => {
  const call = (id: string, createdAt = Date.now(), tokens = 8) => ({
    id,
    model: 'fp',
    conversation: 'conv_1',
    name: 'get_weather',
    arguments: '{"city":"Paris"}',
    spanText: '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    spanTokens: Int32Array.from({ length: tokens }, (_, i) => 261 + i),
    callsInSpan: 1,
    createdAt,
  });

  it('keeps the exact tokens and text in SQLite (WAL) across reopen', () => {
    const path = join(tempDir('store'), 's.sqlite');
    const a = new ToolCallStore(path);
    a.put({ ...call('call_a'), preludeText: 'Hi.', preludeTokens: Int32Array.of(5, 6) });
    a.close();
    const b = new ToolCallStore(path);
    const got = b.get('call_a')!;
    expect(Array.from(got.spanTokens)).toEqual([261, 262, 263, 264, 265, 266, 267, 268]);
    expect(got.spanText).toBe('{"name": "get_weather", "arguments": {"city": "Paris"}}');
    expect(got.preludeText).toBe('Hi.');
    expect(Array.from(got.preludeTokens!)).toEqual([5, 6]);
    expect(b.get('call_missing')).toBeUndefined();
    b.close();
  });

  it('drops the oldest rows beyond maxRows and maxBytes, and rows older than maxAgeMs', () => {
    const s = new ToolCallStore(':memory:', { maxRows: 3 });
    for (let i = 0; i < 5; i++) s.put(call(`c${i}`, 1000 + i));
    expect(s.get('c4')).toBeUndefined(); // created long ago: older than the 7-day default age
    const t = Date.now();
    for (let i = 0; i < 5; i++) s.put(call(`d${i}`, t + i));
    expect(s.size.rows).toBe(3);
    expect(s.get('d0')).toBeUndefined();
    expect(s.get('d4')).toBeDefined();
    s.close();
    const bytes = new ToolCallStore(':memory:', { maxBytes: 1000 });
    for (let i = 0; i < 10; i++) bytes.put(call(`e${i}`, t + i, 40));
    expect(bytes.size.bytes).toBeLessThanOrEqual(1000);
    expect(bytes.get('e9')).toBeDefined();
    expect(bytes.get('e0')).toBeUndefined();
    bytes.close();
    const aged = new ToolCallStore(':memory:', { maxAgeMs: 50 });
    aged.put(call('old', t - 1000));
    expect(aged.get('old')).toBeUndefined();
    aged.close();
  });
});
