// Reasoning through the server, read by the official openai and @anthropic-ai/sdk clients.
import type Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { anthropicFor, openaiFor } from '../server/clients.js';
import { QWEN_CONTENT, QWEN_QUESTION, QWEN_REASONING, ensureFormatModel, qwenThinkSpec } from './fixtures.js';

describe('reasoning_content (OpenAI) and thinking blocks (Anthropic)', () => {
  let model: Model;
  let server: LlamuxServer;
  let openai: OpenAI;
  let anthropic: Anthropic;

  beforeAll(async () => {
    model = await loadModel(await ensureFormatModel(qwenThinkSpec()));
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1 });
    openai = openaiFor(server);
    anthropic = anthropicFor(server);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  const messages = [{ role: 'user' as const, content: QWEN_QUESTION }];
  // The SDK's types here do not list the sampling fields the server reads.
  const GREEDY = { temperature: 0 } as unknown as Record<string, never>;

  it('non-streamed: message.reasoning_content apart from content', async () => {
    const r = await openai.chat.completions.create({ model: 'qwen', messages, temperature: 0 });
    const msg = r.choices[0]!.message as OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string };
    expect(msg.reasoning_content).toBe(QWEN_REASONING);
    expect(msg.content).toBe(QWEN_CONTENT);
    expect(r.choices[0]!.finish_reason).toBe('stop');
  });

  it('streamed: delta.reasoning_content chunks, then content chunks', async () => {
    const stream = await openai.chat.completions.create({ model: 'qwen', messages, temperature: 0, stream: true });
    let reasoning = '';
    let content = '';
    let contentBeforeReasoning = false;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      if (d?.reasoning_content) {
        if (content) contentBeforeReasoning = true;
        reasoning += d.reasoning_content;
      }
      if (d?.content) content += d.content;
    }
    expect(reasoning).toBe(QWEN_REASONING);
    expect(content).toBe(QWEN_CONTENT);
    expect(contentBeforeReasoning).toBe(false);
  });

  it('reasoning_budget and chat_template_kwargs.enable_thinking', async () => {
    const budget = await openai.chat.completions.create({ model: 'q', messages, temperature: 0, reasoning_budget: 2 } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
    const bm = budget.choices[0]!.message as { content: string | null; reasoning_content?: string };
    expect(bm.reasoning_content).toBe(' Two plus');
    expect(bm.content).toBe(QWEN_CONTENT);
    // enable_thinking false: the template closes the span in the prompt, nothing is reasoning
    const off = await openai.chat.completions.create({
      model: 'q',
      messages,
      temperature: 0,
      max_tokens: 4,
      chat_template_kwargs: { enable_thinking: false },
    } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
    expect((off.choices[0]!.message as { reasoning_content?: string }).reasoning_content).toBeUndefined();
    const on = await openai.chat.completions.create({ model: 'q', messages, temperature: 0, max_tokens: 4 });
    expect(off.usage!.prompt_tokens).toBeGreaterThan(on.usage!.prompt_tokens);
  });

  it('Anthropic non-streamed: a thinking block, then the text block; budget_tokens', async () => {
    const r = await anthropic.messages.create({ model: 'qwen', max_tokens: 64, messages, ...GREEDY });
    expect(r.content.map((b) => b.type)).toEqual(['thinking', 'text']);
    const [thinking, text] = r.content as [Anthropic.ThinkingBlock, Anthropic.TextBlock];
    expect(thinking.thinking).toBe(QWEN_REASONING);
    expect(text.text).toBe(QWEN_CONTENT);
    const b = await anthropic.messages.create({ model: 'qwen', max_tokens: 64, messages, ...GREEDY, thinking: { type: 'enabled', budget_tokens: 2 } });
    expect((b.content[0] as Anthropic.ThinkingBlock).thinking).toBe(' Two plus');
    expect((b.content[1] as Anthropic.TextBlock).text).toBe(QWEN_CONTENT);
  });

  it('Anthropic streamed: the SDK assembles the thinking block and the text block', async () => {
    const stream = anthropic.messages.stream({ model: 'qwen', max_tokens: 64, messages, ...GREEDY, thinking: { type: 'enabled', budget_tokens: 1024 } });
    let thinkingDeltas = '';
    stream.on('thinking', (delta) => {
      thinkingDeltas += delta;
    });
    const final = await stream.finalMessage();
    expect(thinkingDeltas).toBe(QWEN_REASONING);
    expect(final.content.map((b) => b.type)).toEqual(['thinking', 'text']);
    expect((final.content[0] as Anthropic.ThinkingBlock).thinking).toBe(QWEN_REASONING);
    expect((final.content[1] as Anthropic.TextBlock).text).toBe(QWEN_CONTENT);
    expect(final.stop_reason).toBe('end_turn');
  });
});
