import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  UnknownToolError,
  askUser,
  defineTool,
  halt,
  runToolCalls,
  streamToolCalls,
  toolError,
  type ToolEvent,
} from '../../src/tools/index.js';
import { call, collect, delay, expectInvalidArgument, thrownBy } from './helpers.js';

const slow = defineTool({
  name: 'slow',
  parameters: z.object({ ms: z.number() }),
  handler: async ({ ms }) => {
    await delay(ms);
    return ms;
  },
});
const echo = defineTool({ name: 'echo', handler: (args) => args });

const terminal = new Set(['tool_result_encoded', 'ask_user_requested', 'tool_halt']);

describe('streamToolCalls()', () => {
  it('yields started, completed and encoded for a single call', async () => {
    const events = await collect(streamToolCalls([call('c0', 'echo', { x: 1 })], [echo]));
    expect(events).toEqual([
      { type: 'tool_execution_started', index: 0, toolCallId: 'c0', toolName: 'echo', arguments: { x: 1 } },
      { type: 'tool_execution_completed', index: 0, toolCallId: 'c0', toolName: 'echo', result: { '~toolResult': 'ok', value: { x: 1 } } },
      {
        type: 'tool_result_encoded',
        index: 0,
        toolCallId: 'c0',
        toolName: 'echo',
        content: '{"x":1}',
        isError: false,
        status: 'success',
        message: { role: 'tool', toolCallId: 'c0', name: 'echo', content: '{"x":1}', isError: false },
      },
    ]);
  });

  it('interleaves calls in completion order, keeping start order per call', async () => {
    const events = await collect(
      streamToolCalls([call('a', 'slow', { ms: 50 }), call('b', 'slow', { ms: 0 }), call('c', 'slow', { ms: 25 })], [slow], { maxConcurrency: 3 }),
    );
    const finished = events.filter((e) => e.type === 'tool_result_encoded').map((e) => (e as { toolCallId: string }).toolCallId);
    expect(finished).toEqual(['b', 'c', 'a']);
    for (const id of ['a', 'b', 'c']) {
      const types = events.filter((e) => 'toolCallId' in e && e.toolCallId === id).map((e) => e.type);
      expect(types).toEqual(['tool_execution_started', 'tool_execution_completed', 'tool_result_encoded']);
    }
    expect(events.slice(0, 3).map((e) => e.type)).toEqual(Array(3).fill('tool_execution_started'));
  });

  it('ends each call with ask_user_requested or tool_halt when the handler asks or halts', async () => {
    const ask = defineTool({ name: 'ask', handler: (_a) => askUser('Why?', { hint: 'be brief' }) });
    const stop = defineTool({ name: 'stop', handler: async (_a) => (await delay(10), halt('enough', { n: 1 })) });
    const events = await collect(streamToolCalls([call('a', 'ask'), call('b', 'stop')], [ask, stop]));
    expect(events.filter((e) => terminal.has(e.type))).toEqual([
      { type: 'ask_user_requested', index: 0, toolCallId: 'a', toolName: 'ask', question: 'Why?', options: { hint: 'be brief' } },
      { type: 'tool_halt', index: 1, toolCallId: 'b', toolName: 'stop', reason: 'enough', result: { n: 1 } },
    ]);
  });

  it('marks the encoded event of a call whose failure halted the batch', async () => {
    const fails = defineTool({ name: 'fails', handler: (_a) => toolError('nope') });
    const events = await collect(streamToolCalls([call('a', 'fails')], [fails], { onToolError: 'halt' }));
    expect(events[2]).toMatchObject({
      type: 'tool_result_encoded',
      isError: true,
      status: 'error',
      content: 'nope',
      halt: { haltedReason: 'tool_error', toolCallId: 'a', toolName: 'fails', error: 'nope' },
    });
  });

  it('yields a single error event and ends under preflight when a name is unknown', async () => {
    const handler = vi.fn((_a: unknown) => 1);
    const events = await collect(
      streamToolCalls([call('a', 'known'), call('b', 'ghost')], [defineTool({ name: 'known', handler })], { unknownTool: 'preflight' }),
    );
    expect(events).toHaveLength(1);
    expect(events[0]!.type).toBe('error');
    expect((events[0] as { error: unknown }).error).toBeInstanceOf(UnknownToolError);
    expect(handler).not.toHaveBeenCalled();
  });

  it('yields nothing for an empty batch', async () => {
    expect(await collect(streamToolCalls([], [echo]))).toEqual([]);
  });

  it('does no work until it is iterated', async () => {
    const handler = vi.fn((_a: unknown) => 1);
    const stream = streamToolCalls([call('a', 't')], [defineTool({ name: 't', handler })]);
    await delay(10);
    expect(handler).not.toHaveBeenCalled();
    await collect(stream);
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('throws the entry checks synchronously', () => {
    expectInvalidArgument(
      thrownBy(() => streamToolCalls([call('a', 'echo')], [echo], { onToolError: ((_c: unknown) => 'halt') as never })),
      /"onToolError" function to take \(call, error\)/,
    );
    expectInvalidArgument(thrownBy(() => streamToolCalls('nope' as never, [echo])), 'Expected the tool calls to be an array but received "nope" of type string');
  });

  it('cancels the running calls when the consumer stops early', async () => {
    const aborted: string[] = [];
    const waiter = defineTool({
      name: 'wait',
      handler: (_a, ctx) =>
        new Promise((resolve) => {
          ctx.signal.addEventListener('abort', () => {
            aborted.push(ctx.call.id);
            resolve('stopped');
          });
        }),
    });
    const seen: ToolEvent[] = [];
    for await (const event of streamToolCalls([call('a', 'echo'), call('b', 'wait')], [echo, waiter], { maxConcurrency: 2 })) {
      seen.push(event);
      if (event.type === 'tool_result_encoded') break;
    }
    expect(aborted).toEqual(['b']);
    expect(seen.at(-1)).toMatchObject({ type: 'tool_result_encoded', toolCallId: 'a' });
  });

  it('produces the same set of messages as runToolCalls', async () => {
    const calls = [call('a', 'slow', { ms: 20 }), call('b', 'echo', { y: 2 }), call('c', 'ghost'), call('d', 'slow', { ms: 5 })];
    const run = await runToolCalls(calls, [slow, echo]);
    const events = await collect(streamToolCalls(calls, [slow, echo]));
    const streamed = events.flatMap((e) => (e.type === 'tool_result_encoded' ? [e.message] : []));
    const byId = (m: { toolCallId: string }, n: { toolCallId: string }) => m.toolCallId.localeCompare(n.toolCallId);
    expect([...streamed].sort(byId)).toEqual([...run.messages].sort(byId));
  });

  it('gives every call exactly one result and matches runToolCalls for random batches', async () => {
    type Behaviour = { kind: 'value' | 'throw' | 'report' | 'ask' | 'halt' | 'reserved' | 'bigint' | 'undefined' | 'unknown'; ms: number };
    const behaviour = fc.record({
      kind: fc.constantFrom('value', 'throw', 'report', 'ask', 'halt', 'reserved', 'bigint', 'undefined', 'unknown'),
      ms: fc.integer({ min: 0, max: 3 }),
    }) as fc.Arbitrary<Behaviour>;
    const tool = defineTool({
      name: 'b',
      handler: async (args: Record<string, unknown>) => {
        const b = args as unknown as Behaviour;
        await delay(b.ms);
        switch (b.kind) {
          case 'value':
            return { ms: b.ms };
          case 'throw':
            throw new Error('x');
          case 'report':
            return toolError('reported');
          case 'ask':
            return askUser('q');
          case 'halt':
            return halt('stop_now', 1);
          case 'reserved':
            return halt('completed', 1);
          case 'bigint':
            return 1n;
          default:
            return undefined;
        }
      },
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(behaviour, { maxLength: 8 }),
        fc.constantFrom('continue', 'halt') as fc.Arbitrary<'continue' | 'halt'>,
        fc.integer({ min: 1, max: 4 }),
        async (behaviours, onToolError, maxConcurrency) => {
          const calls = behaviours.map((b, i) => call(`c${i}`, b.kind === 'unknown' ? 'missing' : 'b', b));
          const run = await runToolCalls(calls, [tool], { onToolError, maxConcurrency });
          expect(run.outcomes.map((o) => o.call.id)).toEqual(calls.map((c) => c.id));
          const events = await collect(streamToolCalls(calls, [tool], { onToolError, maxConcurrency }));
          const ends = events.filter((e) => terminal.has(e.type)).map((e) => (e as { toolCallId: string }).toolCallId);
          expect([...ends].sort()).toEqual(calls.map((c) => c.id).sort());
          const streamedMessages = events.flatMap((e) => (e.type === 'tool_result_encoded' ? [e.message] : []));
          expect(streamedMessages.sort((x, y) => x.toolCallId.localeCompare(y.toolCallId))).toEqual(
            [...run.messages].sort((x, y) => x.toolCallId.localeCompare(y.toolCallId)),
          );
          expect(run.halt === undefined).toBe(!behaviours.some((b) => ['ask', 'halt'].includes(b.kind)) && !(onToolError === 'halt' && behaviours.some((b) => !['value', 'ask', 'halt'].includes(b.kind))));
        },
      ),
      { numRuns: 40 },
    );
  });
});
