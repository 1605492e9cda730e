// Harmony (gpt-oss) through the server with the official clients: the zoo's gpt-oss model (its
// real o200k vocabulary and chat template, random weights). tool_choice 'required' makes the
// grammar force a Harmony call, which comes back as tool_calls / tool_use; the next turn sends it
// back by id and the server replays its exact tokens, so only the new messages are prefilled.
import type Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { anthropicFor, openaiFor } from '../server/clients.js';
import { zooModels } from '../helpers/zoo.js';

const TOOL: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Lyon'] } }, required: ['city'], additionalProperties: false },
  },
};

async function replayedCount(server: LlamuxServer): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const m = /^llamux_tool_call_replay_total\{outcome="replayed"\} (\d+)$/m.exec(text);
  return m ? Number(m[1]) : 0;
}

describe('Harmony (gpt-oss) through the server', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  beforeAll(async () => {
    model = await loadModel((await zooModels(['gpt-oss']))['gpt-oss'].path);
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 1, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  it('OpenAI: a forced call comes back as tool_calls; sent back by id, its exact tokens are replayed', async () => {
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await openai.chat.completions.create(
      { model: 'gpt-oss', messages, tools: [TOOL], tool_choice: 'required', temperature: 0, max_tokens: 200, reasoning_effort: 'low' },
      { headers: { 'x-llamux-conversation': 'harmony-1' } },
    );
    const choice = first.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0]! as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('get_weather');
    expect(['Paris', 'Lyon']).toContain(JSON.parse(call.function.arguments).city);
    // Harmony control tokens never leak into the answer text.
    expect(choice.message.content ?? '').not.toMatch(/<\|(channel|message|constrain|call)\|>/);

    const before = await replayedCount(server);
    messages.push({ role: 'assistant', content: null, tool_calls: [call] });
    messages.push({ role: 'tool', tool_call_id: call.id, content: '{"temperature": 18}' });
    const second = await openai.chat.completions.create(
      { model: 'gpt-oss', messages, tools: [TOOL], temperature: 0, max_tokens: 4, reasoning_effort: 'low' },
      { headers: { 'x-llamux-conversation': 'harmony-1' } },
    );
    expect(await replayedCount(server)).toBe(before + 1);
    const cached = second.usage!.prompt_tokens_details!.cached_tokens!;
    // Everything the first turn prompted and generated is reused (the call's exact tokens are
    // in the new prompt); only the tool message and the new generation prompt are prefilled.
    expect(cached).toBeGreaterThanOrEqual(first.usage!.prompt_tokens + first.usage!.completion_tokens - 1);
    expect(second.usage!.prompt_tokens).toBeGreaterThan(cached);
  });

  it('OpenAI streamed: the SDK assembles the call from tool_calls deltas', async () => {
    const stream = await openai.chat.completions.create({
      model: 'gpt-oss',
      messages: [{ role: 'user', content: 'Weather in Lyon?' }],
      tools: [TOOL],
      tool_choice: 'required',
      temperature: 0,
      max_tokens: 200,
      stream: true,
    });
    let name = '';
    let args = '';
    let finish: string | null = null;
    let content = '';
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      for (const tc of c.delta.tool_calls ?? []) {
        name += tc.function?.name ?? '';
        args += tc.function?.arguments ?? '';
      }
      content += c.delta.content ?? '';
      finish = c.finish_reason ?? finish;
    }
    expect(finish).toBe('tool_calls');
    expect(name).toBe('get_weather');
    expect(['Paris', 'Lyon']).toContain(JSON.parse(args).city);
    expect(content).not.toMatch(/<\|(channel|message|constrain|call)\|>/);
  });

  it('Anthropic: the forced call is a tool_use block', async () => {
    const anthropic = anthropicFor(server);
    const r = await anthropic.messages.create({
      model: 'gpt-oss',
      max_tokens: 200,
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ name: 'get_weather', description: 'Weather of a city', input_schema: TOOL.function.parameters as Anthropic.Tool.InputSchema }],
      tool_choice: { type: 'any' },
    });
    expect(r.stop_reason).toBe('tool_use');
    const use = r.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
    expect(use?.name).toBe('get_weather');
    expect(['Paris', 'Lyon']).toContain((use!.input as { city: string }).city);
  });
});
