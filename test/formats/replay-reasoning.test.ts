// Replay across reasoning: the next turn is rendered the way the template renders history;
// llamux reuses the KV up to the first token where that rendering differs from what was generated.
// Keep vs strip `reasoning_content`, measured as prefilled tokens per turn.
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { openaiFor } from '../server/clients.js';
import { WEATHER_QUESTION, XML_TOOLS, ensureFormatModel, qwenXmlReplaySpec } from './fixtures.js';

type Msg = OpenAI.Chat.Completions.ChatCompletionMessageParam;

describe('replay across reasoning (Qwen3.5 template, XML calls)', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  const tools = XML_TOOLS.map((t) => ({ type: 'function' as const, function: t }));

  beforeAll(async () => {
    model = await loadModel(await ensureFormatModel(qwenXmlReplaySpec()));
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1 });
    openai = openaiFor(server);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  async function twoTurns(keep: boolean) {
    const messages: Msg[] = [{ role: 'user', content: WEATHER_QUESTION }];
    const t1 = await openai.chat.completions.create({ model: 'q', messages, tools, temperature: 0, max_tokens: 64 });
    const msg = t1.choices[0]!.message as OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string };
    expect(msg.reasoning_content).toBe('Need the forecast.\n');
    const call = msg.tool_calls![0]!;
    const assistant: Record<string, unknown> = { role: 'assistant', content: msg.content, tool_calls: msg.tool_calls };
    if (keep) assistant.reasoning_content = msg.reasoning_content;
    const follow = [...messages, assistant as unknown as Msg, { role: 'tool' as const, tool_call_id: call.id, content: '{"temp": 18}' }];
    const t2 = await openai.chat.completions.create({ model: 'q', messages: follow, tools, temperature: 0, max_tokens: 4 });
    const u1 = t1.usage!;
    const u2 = t2.usage!;
    return { turn1: u1.prompt_tokens, generated: u1.completion_tokens, prompt2: u2.prompt_tokens, cached2: u2.prompt_tokens_details!.cached_tokens!, prefilled2: u2.prompt_tokens - u2.prompt_tokens_details!.cached_tokens! };
  }

  it('keeping reasoning_content reuses the reasoning tokens too; stripping it reuses up to the reasoning', async () => {
    const keep = await twoTurns(true);
    const strip = await twoTurns(false);
    // Both reuse at least the first turn's prompt (the template's `<think>\n` included).
    expect(strip.cached2).toBeGreaterThanOrEqual(strip.turn1);
    // Kept reasoning renders as generated ("Need the forecast.\n</think>"): those tokens are reused too.
    expect(keep.cached2).toBeGreaterThan(strip.cached2);
    console.log(`prefilled tokens in turn 2: keep reasoning ${keep.prefilled2} of ${keep.prompt2} (cached ${keep.cached2}); strip ${strip.prefilled2} of ${strip.prompt2} (cached ${strip.cached2}); turn 1 prompt ${keep.turn1}, generated ${keep.generated}`);
  });
});
