import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  ToolCallAccumulator,
  defineTool,
  halt,
  openAIToolCalls,
  runOpenAIToolCalls,
  runToolCalls,
  toOpenAIToolMessages,
} from '../../src/tools/index.js';

const search = defineTool({
  name: 'search',
  parameters: z.object({ query: z.string() }),
  handler: ({ query }) => ({ hits: [`${query}-1`] }),
});

describe('runOpenAIToolCalls()', () => {
  it('answers each tool call with a tool-role message of exactly role, tool_call_id and content', async () => {
    const { messages, halt: h } = await runOpenAIToolCalls(
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'search', arguments: '{"query":"llama"}' } },
          { id: 'call_2', type: 'function', function: { name: 'search', arguments: '{"query":"cpp"}' } },
        ],
      },
      [search],
    );
    expect(h).toBeUndefined();
    expect(messages).toEqual([
      { role: 'tool', tool_call_id: 'call_1', content: '{"hits":["llama-1"]}' },
      { role: 'tool', tool_call_id: 'call_2', content: '{"hits":["cpp-1"]}' },
    ]);
  });

  it('answers malformed JSON arguments with an error message and does not call the handler', async () => {
    const handler = vi.fn(({ query }: { query: string }) => query);
    const tool = defineTool({ name: 'search', parameters: z.object({ query: z.string() }), handler });
    const { messages, outcomes } = await runOpenAIToolCalls(
      {
        role: 'assistant',
        tool_calls: [
          { id: 'a', type: 'function', function: { name: 'search', arguments: '{"query": "unterminated' } },
          { id: 'b', type: 'function', function: { name: 'search', arguments: '"just a string"' } },
        ],
      },
      [tool],
    );
    expect(handler).not.toHaveBeenCalled();
    expect(messages).toEqual([
      { role: 'tool', tool_call_id: 'a', content: 'invalid_arguments: invalid arguments for tool "search": the arguments are not a JSON object' },
      { role: 'tool', tool_call_id: 'b', content: 'invalid_arguments: invalid arguments for tool "search": the arguments are not a JSON object' },
    ]);
    expect(outcomes.every((o) => o.kind === 'message' && o.status === 'error')).toBe(true);
  });

  it('treats empty arguments as {} and accepts a whole chat completion', async () => {
    const ping = defineTool({ name: 'ping', handler: (_a) => 'pong' });
    const { messages } = await runOpenAIToolCalls(
      { choices: [{ message: { role: 'assistant', tool_calls: [{ id: 'p', type: 'function', function: { name: 'ping', arguments: '' } }] } }] },
      [ping],
    );
    expect(messages).toEqual([{ role: 'tool', tool_call_id: 'p', content: 'pong' }]);
  });

  it('answers an unknown function name with an error message and runs the others', async () => {
    const { messages } = await runOpenAIToolCalls(
      {
        role: 'assistant',
        tool_calls: [
          { id: 'x', type: 'function', function: { name: 'nope', arguments: '{}' } },
          { id: 'y', type: 'function', function: { name: 'search', arguments: '{"query":"q"}' } },
        ],
      },
      [search],
    );
    expect(messages).toEqual([
      { role: 'tool', tool_call_id: 'x', content: 'unknown_tool: there is no tool named "nope"' },
      { role: 'tool', tool_call_id: 'y', content: '{"hits":["q-1"]}' },
    ]);
  });

  it('returns no messages for an assistant message without tool calls', async () => {
    expect(await runOpenAIToolCalls({ role: 'assistant', content: 'hello' }, [search])).toEqual({ messages: [], outcomes: [] });
  });

  it('reports a halt and leaves the halted call without a message', async () => {
    const stop = defineTool({ name: 'stop', handler: (_a) => halt('handoff', 'to a human') });
    const result = await runOpenAIToolCalls(
      { role: 'assistant', tool_calls: [{ id: 's', type: 'function', function: { name: 'stop', arguments: '{}' } }] },
      [stop],
    );
    expect(result.messages).toEqual([]);
    expect(result.halt).toEqual({ haltedReason: 'tool_halt', toolCallId: 's', toolName: 'stop', reason: 'handoff', result: 'to a human' });
  });
});

describe('openAIToolCalls()', () => {
  it('decodes arguments and tags malformed ones', () => {
    expect(
      openAIToolCalls({
        role: 'assistant',
        tool_calls: [
          { id: 'a', type: 'function', function: { name: 's', arguments: '{"q":1}' } },
          { id: 'b', type: 'function', function: { name: 's', arguments: '{' } },
        ],
      }),
    ).toEqual([
      { id: 'a', name: 's', arguments: { q: 1 } },
      { id: 'b', name: 's', arguments: {}, _invalid_arguments: '{' },
    ]);
  });
});

describe('toOpenAIToolMessages()', () => {
  it('is what runOpenAIToolCalls builds from the runner outcomes', async () => {
    const { outcomes } = await runToolCalls([{ id: 'a', name: 'search', arguments: { query: 'z' } }], [search]);
    expect(toOpenAIToolMessages(outcomes)).toEqual([{ role: 'tool', tool_call_id: 'a', content: '{"hits":["z-1"]}' }]);
  });
});

describe('accumulator to runner', () => {
  it('runs calls reassembled from streamed OpenAI fragments', async () => {
    const acc = new ToolCallAccumulator();
    acc.feed([{ index: 0, id: 'call_a', type: 'function', function: { name: 'search', arguments: '{"qu' } }]);
    acc.feed([{ index: 0, function: { arguments: 'ery":"x"}' } }]);
    acc.feed([{ index: 1, id: 'call_b', type: 'function', function: { name: 'search', arguments: '{"query":' } }]);
    const calls = acc.finalize().map((c) => ({ ...c, id: c.id ?? 'missing' }));
    const { messages } = await runToolCalls(calls, [search]);
    expect(messages.map((m) => [m.toolCallId, m.isError])).toEqual([
      ['call_a', false],
      ['call_b', true],
    ]);
  });
});
