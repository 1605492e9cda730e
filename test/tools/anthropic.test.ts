import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  UnknownToolError,
  anthropicToolCalls,
  askUser,
  defineTool,
  runAnthropicToolUse,
  toAnthropicToolResults,
} from '../../src/tools/index.js';
import { expectInvalidArgument, rejectionOf } from './helpers.js';

const getWeather = defineTool({
  name: 'get_weather',
  parameters: z.object({ city: z.string() }),
  handler: ({ city }) => `Sunny in ${city}`,
});
const add = defineTool({ name: 'add', parameters: z.object({ a: z.number(), b: z.number() }), handler: ({ a, b }) => a + b });
const explode = defineTool({
  name: 'explode',
  handler: (_a) => {
    throw new Error('kaboom');
  },
});

const response = {
  content: [
    { type: 'text', text: 'Let me look both up.' },
    { type: 'tool_use', id: 't1', name: 'get_weather', input: { city: 'Paris' } },
    { type: 'tool_use', id: 't2', name: 'add', input: { a: 2, b: 5 } },
  ],
  stop_reason: 'tool_use',
};

describe('runAnthropicToolUse()', () => {
  it('answers a two-call turn with one user message of tool_result blocks in order', async () => {
    const { message, halt } = await runAnthropicToolUse(response, [getWeather, add]);
    expect(halt).toBeUndefined();
    expect(message).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 't1', content: 'Sunny in Paris' },
        { type: 'tool_result', tool_use_id: 't2', content: '7' },
      ],
    });
    expect(Object.keys(message.content[0]!)).toEqual(['type', 'tool_use_id', 'content']);
  });

  it('marks a failing tool and an unregistered name with is_error and still runs the others', async () => {
    const handler = vi.fn(({ a, b }: { a: number; b: number }) => a * b);
    const mul = defineTool({ name: 'mul', parameters: z.object({ a: z.number(), b: z.number() }), handler });
    const { message } = await runAnthropicToolUse(
      [
        { type: 'tool_use', id: 'u1', name: 'explode', input: {} },
        { type: 'tool_use', id: 'u2', name: 'launch_missiles', input: { target: 'moon' } },
        { type: 'tool_use', id: 'u3', name: 'mul', input: { a: 3, b: 4 } },
      ],
      [explode, mul],
    );
    expect(message).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'u1', content: 'handler_raised: tool "explode" raised: kaboom', is_error: true },
        { type: 'tool_result', tool_use_id: 'u2', content: 'unknown_tool: there is no tool named "launch_missiles"', is_error: true },
        { type: 'tool_result', tool_use_id: 'u3', content: '12' },
      ],
    });
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('reports invalid input as an is_error result without calling the handler', async () => {
    const handler = vi.fn(({ city }: { city: string }) => city);
    const tool = defineTool({ name: 'get_weather', parameters: z.object({ city: z.string() }), handler });
    const { message } = await runAnthropicToolUse([{ type: 'tool_use', id: 'x', name: 'get_weather', input: { town: 'Rome' } }], [tool]);
    expect(message.content[0]).toEqual({
      type: 'tool_result',
      tool_use_id: 'x',
      content: 'invalid_arguments: invalid arguments for tool "get_weather": city: Invalid input: expected string, received undefined',
      is_error: true,
    });
    expect(handler).not.toHaveBeenCalled();
  });

  it('ignores non-tool blocks and returns an empty message for a turn without tool_use', async () => {
    const { message } = await runAnthropicToolUse({ content: [{ type: 'text', text: 'hi' }, { type: 'thinking', thinking: '…' }] }, [add]);
    expect(message).toEqual({ role: 'user', content: [] });
  });

  it('leaves an ask-user call out of the message and reports it as the halt', async () => {
    const ask = defineTool({ name: 'ask', handler: (_a) => askUser('Which city?') });
    const { message, halt } = await runAnthropicToolUse(
      [
        { type: 'tool_use', id: 'a', name: 'ask', input: {} },
        { type: 'tool_use', id: 'b', name: 'add', input: { a: 1, b: 1 } },
      ],
      [ask, add],
    );
    expect(message).toEqual({ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'b', content: '2' }] });
    expect(halt).toEqual({ haltedReason: 'ask_user', toolCallId: 'a', toolName: 'ask', question: 'Which city?' });
  });

  it('passes runner options through, such as preflight', async () => {
    await expect(runAnthropicToolUse(response, [add], { unknownTool: 'preflight' })).rejects.toBeInstanceOf(UnknownToolError);
  });

  it('refuses input that is neither a response nor a block list', async () => {
    expectInvalidArgument(
      await rejectionOf(runAnthropicToolUse({ content: 'text' } as never, [add])),
      'Expected the input to be an Anthropic response or a content block array but received an object of type Object',
    );
  });
});

describe('anthropicToolCalls()', () => {
  it('reads tool_use blocks as tool calls', () => {
    expect(anthropicToolCalls(response)).toEqual([
      { id: 't1', name: 'get_weather', arguments: { city: 'Paris' } },
      { id: 't2', name: 'add', arguments: { a: 2, b: 5 } },
    ]);
  });
});

describe('toAnthropicToolResults()', () => {
  it('builds blocks from outcomes', () => {
    expect(toAnthropicToolResults([])).toEqual({ role: 'user', content: [] });
  });
});
