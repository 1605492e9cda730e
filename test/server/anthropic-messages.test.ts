import type Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { anthropicFor } from './clients.js';
import { ANSWER, ANTHROPIC_TOOLS, QUESTION, WEATHER_RESULT, ensureChatModels } from './fixtures.js';

describe('POST /v1/messages with the official @anthropic-ai/sdk client', () => {
  let model: Model;
  let server: LlamuxServer;
  let anthropic: Anthropic;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    server = await createServer({ model, port: 0, ctx: 8192, parallel: 2, threads: 1 });
    anthropic = anthropicFor(server);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  const ask = (): Promise<Anthropic.Message> =>
    anthropic.messages.create({ model: 'claude-any', max_tokens: 64, messages: [{ role: 'user', content: QUESTION }], tools: ANTHROPIC_TOOLS });

  function followUp(first: Anthropic.Message): Anthropic.MessageParam[] {
    const use = first.content.find((b) => b.type === 'tool_use')!;
    return [
      { role: 'user', content: QUESTION },
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: WEATHER_RESULT }] },
    ];
  }

  it('returns a tool_use block', async () => {
    const m = await ask();
    expect(m.type).toBe('message');
    expect(m.model).toBe('claude-any');
    expect(m.stop_reason).toBe('tool_use');
    expect(m.content).toHaveLength(1);
    const block = m.content[0]!;
    if (block.type !== 'tool_use') throw new Error(`expected tool_use, got ${block.type}`);
    expect(block.id).toMatch(/^toolu_/);
    expect(block.name).toBe('get_weather');
    expect(block.input).toEqual({ city: 'Paris' });
    expect(m.usage.output_tokens).toBe(8);
    expect(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0)).toBeGreaterThan(100);
  });

  it('returns a call cut short by max_tokens as a text block with its start marker, streamed and not', async () => {
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: QUESTION }];
    const whole = await anthropic.messages.create({ model: 'claude-any', max_tokens: 64, messages, tools: ANTHROPIC_TOOLS, tool_choice: { type: 'none' } });
    const wholeText = whole.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    expect(wholeText.startsWith('<tool_call>')).toBe(true);
    const cut = await anthropic.messages.create({ model: 'claude-any', max_tokens: 4, messages, tools: ANTHROPIC_TOOLS });
    expect(cut.stop_reason).toBe('max_tokens');
    expect(cut.content.some((b) => b.type === 'tool_use')).toBe(false);
    const cutText = cut.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    expect(cutText.startsWith('<tool_call>')).toBe(true);
    expect(cutText.length).toBeGreaterThan('<tool_call>'.length);
    expect(wholeText.startsWith(cutText)).toBe(true);
    const stream = anthropic.messages.stream({ model: 'claude-any', max_tokens: 4, messages, tools: ANTHROPIC_TOOLS });
    let streamed = '';
    stream.on('text', (t) => (streamed += t));
    const final = await stream.finalMessage();
    expect(final.stop_reason).toBe('max_tokens');
    expect(streamed).toBe(cutText);
  });

  it('tool_choice any / tool forces a tool_use where the model would answer in text', async () => {
    const first = await ask();
    for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }] as const) {
      const m = await anthropic.messages.create({ model: 'claude-any', max_tokens: 64, messages: followUp(first), tools: ANTHROPIC_TOOLS, tool_choice });
      expect(m.stop_reason).toBe('tool_use');
      const block = m.content.find((b) => b.type === 'tool_use');
      expect(block?.type === 'tool_use' && [block.name, block.input]).toEqual(['get_weather', { city: 'Paris' }]);
    }
  });

  it('answers a tool_result with the earlier turn read from the cache', async () => {
    const first = await ask();
    const m = await anthropic.messages.create({ model: 'claude-any', max_tokens: 64, messages: followUp(first), tools: ANTHROPIC_TOOLS });
    expect(m.stop_reason).toBe('end_turn');
    expect(m.content).toEqual([{ type: 'text', text: ANSWER }]);
    const prevPrompt = first.usage.input_tokens + (first.usage.cache_read_input_tokens ?? 0);
    expect(m.usage.cache_read_input_tokens).toBeGreaterThanOrEqual(prevPrompt + first.usage.output_tokens);
    expect(m.usage.cache_creation_input_tokens).toBe(0);
  });

  it('streams text deltas, and the final usage carries the cache numbers', async () => {
    const first = await ask();
    const stream = anthropic.messages.stream({ model: 'claude-any', max_tokens: 64, messages: followUp(first), tools: ANTHROPIC_TOOLS });
    const deltas: string[] = [];
    stream.on('text', (t) => deltas.push(t));
    const m = await stream.finalMessage();
    expect(deltas.join('')).toBe(ANSWER);
    expect(deltas.length).toBeGreaterThan(1);
    expect(m.content).toMatchObject([{ type: 'text', text: ANSWER }]);
    expect(m.stop_reason).toBe('end_turn');
    expect(m.usage.cache_read_input_tokens).toBeGreaterThan(0);
    expect(m.usage.input_tokens + m.usage.cache_read_input_tokens!).toBe(
      (await anthropic.messages.countTokens({ model: 'x', messages: followUp(first), tools: ANTHROPIC_TOOLS })).input_tokens,
    );
  });

  it('streams a tool_use block with its input JSON', async () => {
    const events: string[] = [];
    const stream = anthropic.messages.stream({ model: 'claude-any', max_tokens: 64, messages: [{ role: 'user', content: QUESTION }], tools: ANTHROPIC_TOOLS });
    stream.on('streamEvent', (e) => events.push(e.type));
    const m = await stream.finalMessage();
    expect(m.stop_reason).toBe('tool_use');
    const block = m.content[0]!;
    expect(block.type === 'tool_use' && block.input).toEqual({ city: 'Paris' });
    expect(events).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  });

  it('ends at a stop sequence and at max_tokens', async () => {
    const first = await ask();
    const stopped = await anthropic.messages.create({ model: 'x', max_tokens: 64, messages: followUp(first), tools: ANTHROPIC_TOOLS, stop_sequences: [' sunny'] });
    expect(stopped.stop_reason).toBe('stop_sequence');
    expect(stopped.stop_sequence).toBe(' sunny');
    expect(stopped.content).toEqual([{ type: 'text', text: 'The weather in Paris is' }]);
    const cut = await anthropic.messages.create({ model: 'x', max_tokens: 2, messages: followUp(first), tools: ANTHROPIC_TOOLS });
    expect(cut.stop_reason).toBe('max_tokens');
    expect(cut.content).toEqual([{ type: 'text', text: 'The weather' }]);
  });

  it('lists the model in the Anthropic shape', async () => {
    const page = await anthropic.models.list();
    expect(page.data.map((m) => m.id)).toEqual(['llamux-scripted-demo']);
    expect(page.data[0]!.type).toBe('model');
  });
});
