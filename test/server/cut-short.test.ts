// A tool call cut short by max_tokens, in every call syntax the zoo's real templates use: the
// response carries no tool call; the unfinished span comes back as text with its start marker
// (docs/server.md, "Malformed output"), on the OpenAI and Anthropic APIs, streamed and not.
// `tool_choice: required` makes the grammar open the span at once (random weights, so only
// grammar-forced output is known), so the cut falls inside the span.
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import type { ZooArchitecture } from '../../src/gguf/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { zooModels } from '../helpers/zoo.js';
import { anthropicFor, openaiFor } from './clients.js';

const TOOLS: OpenAI.ChatCompletionTool[] = [
  {
    type: 'function',
    function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  },
];
const QUESTION = 'Weather in Paris?';

// cut: max_tokens, a few tokens past the start marker (harmony's is several tokens of text)
const FAMILIES: Array<{ arch: ZooArchitecture; preset: string; cut: number }> = [
  { arch: 'qwen3', preset: 'hermes', cut: 4 },
  { arch: 'qwen35', preset: 'qwen-xml', cut: 4 },
  { arch: 'gemma4', preset: 'gemma4-native', cut: 4 },
  { arch: 'gpt-oss', preset: 'harmony', cut: 8 },
];

describe.each(FAMILIES)('a call cut short by max_tokens ($preset, zoo $arch)', ({ arch, preset, cut }) => {
  let model: Model;
  let server: LlamuxServer;
  let startText: string;

  beforeAll(async () => {
    model = await loadModel((await zooModels([arch]))[arch].path);
    server = await createServer({ model, port: 0, ctx: 1024, parallel: 1, threads: 1 });
    const markers = server.context.markers!;
    startText = model.detokenize(Int32Array.from(markers.start), { special: true });
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  const body = { model: 'm', messages: [{ role: 'user' as const, content: QUESTION }], tools: TOOLS, tool_choice: 'required' as const, temperature: 0, chat_template_kwargs: { enable_thinking: false } };

  it('uses the family\'s call syntax', () => {
    expect(server.context.markers?.preset).toBe(preset);
  });

  it('OpenAI: no tool_calls, the span as text from its start marker, finish_reason length; streamed the same', async () => {
    const openai = openaiFor(server);
    const reply = await openai.chat.completions.create({ ...body, max_tokens: cut } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const choice = reply.choices[0]!;
    expect(choice.finish_reason).toBe('length');
    expect(choice.message.tool_calls).toBeUndefined();
    const content = choice.message.content ?? '';
    expect(content.includes(startText)).toBe(true);
    expect(content.length).toBeGreaterThan(content.indexOf(startText) + startText.length);
    const stream = await openai.chat.completions.create({ ...body, max_tokens: cut, stream: true } as OpenAI.ChatCompletionCreateParamsStreaming);
    let text = '';
    let reason: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      expect(chunk.choices[0]?.delta.tool_calls).toBeUndefined();
      reason = chunk.choices[0]?.finish_reason ?? reason;
    }
    expect(text).toBe(content);
    expect(reason).toBe('length');
  });

  it('Anthropic: no tool_use, a text block with the span from its start marker, stop_reason max_tokens; streamed the same', async () => {
    const anthropic = anthropicFor(server);
    const tools = [{ name: 'get_weather', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] } }];
    const req = { model: 'm', max_tokens: cut, messages: [{ role: 'user' as const, content: QUESTION }], tools, tool_choice: { type: 'any' as const }, temperature: 0, thinking: { type: 'disabled' as const } };
    const msg = await anthropic.messages.create(req);
    expect(msg.stop_reason).toBe('max_tokens');
    expect(msg.content.some((b) => b.type === 'tool_use')).toBe(false);
    const text = msg.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    expect(text.includes(startText)).toBe(true);
    expect(text.length).toBeGreaterThan(text.indexOf(startText) + startText.length);
    let streamed = '';
    let stop: string | null = null;
    for await (const ev of anthropic.messages.stream(req)) {
      if (ev.type === 'content_block_start') expect(ev.content_block.type).not.toBe('tool_use');
      if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') streamed += ev.delta.text;
      if (ev.type === 'message_delta') stop = ev.delta.stop_reason;
    }
    expect(streamed).toBe(text);
    expect(stop).toBe('max_tokens');
  });
});
