import { availableParallelism } from 'node:os';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  DEFAULT_TOOL_TIMEOUT_MS,
  RESERVED_HALT_REASONS,
  ToolError,
  UnknownToolError,
  askUser,
  defineTool,
  halt,
  isToolError,
  ok,
  runToolCalls,
  toolError,
  type ToolContext,
  type ToolExecutor,
  type ToolResultEncoder,
} from '../../src/tools/index.js';
import { call, concurrencyProbe, delay, expectInvalidArgument, rejectionOf } from './helpers.js';

const echo = defineTool({ name: 'echo', handler: (args) => args });
const fail = defineTool({
  name: 'fail',
  handler: (_args) => {
    throw new Error('boom');
  },
});
const report = defineTool({ name: 'report', handler: (_args) => toolError('city not found') });
const slow = defineTool({
  name: 'slow',
  parameters: z.object({ ms: z.number(), value: z.unknown().optional() }),
  handler: async ({ ms, value }) => {
    await delay(ms);
    return value ?? ms;
  },
});

describe('runToolCalls()', () => {
  it('returns one tool message per call with the JSON-encoded result', async () => {
    const result = await runToolCalls([call('c0', 'echo', { x: 1 })], [echo]);
    expect(result).toEqual({
      messages: [{ role: 'tool', toolCallId: 'c0', name: 'echo', content: '{"x":1}', isError: false }],
      outcomes: [
        {
          kind: 'message',
          index: 0,
          call: call('c0', 'echo', { x: 1 }),
          status: 'success',
          message: { role: 'tool', toolCallId: 'c0', name: 'echo', content: '{"x":1}', isError: false },
        },
      ],
    });
    expect(JSON.parse(result.messages[0]!.content)).toEqual({ x: 1 });
  });

  it('returns messages in input order whatever order the handlers finish in', async () => {
    const calls = [60, 5, 30, 0, 15].map((ms, i) => call(`c${i}`, 'slow', { ms }));
    const { messages } = await runToolCalls(calls, [slow], { maxConcurrency: 5 });
    expect(messages.map((m) => m.toolCallId)).toEqual(['c0', 'c1', 'c2', 'c3', 'c4']);
    expect(messages.map((m) => m.content)).toEqual(['60', '5', '30', '0', '15']);
  });

  it('resolves an empty batch at once without touching any tool', async () => {
    const handler = vi.fn((_args: unknown) => 1);
    const executor: ToolExecutor = { execute: vi.fn() };
    const result = await runToolCalls([], [defineTool({ name: 't', handler })], { toolExecutor: executor });
    expect(result).toEqual({ messages: [], outcomes: [] });
    expect(handler).not.toHaveBeenCalled();
    expect(executor.execute).not.toHaveBeenCalled();
  });

  it('parses JSON-string arguments and validates them before the handler runs', async () => {
    const handler = vi.fn((args: { city: string }) => `weather in ${args.city}`);
    const weather = defineTool({ name: 'weather', parameters: z.object({ city: z.string() }), handler });
    const { messages } = await runToolCalls(
      [call('a', 'weather', '{"city":"Paris"}'), call('b', 'weather', { city: 7 }), call('c', 'weather', '{"city":')],
      [weather],
    );
    expect(messages[0]).toEqual({ role: 'tool', toolCallId: 'a', name: 'weather', content: 'weather in Paris', isError: false });
    expect(messages[1]!.isError).toBe(true);
    expect(messages[1]!.content).toMatch(/^invalid_arguments: .*city: Invalid input: expected string, received number/);
    expect(messages[2]!.isError).toBe(true);
    expect(messages[2]!.content).toMatch(/^invalid_arguments: .*malformed JSON/);
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('refuses calls tagged _invalid_arguments without calling the handler', async () => {
    const handler = vi.fn((_args: unknown) => 'ran');
    const { outcomes } = await runToolCalls(
      [{ id: 'x', name: 't', arguments: {}, _invalid_arguments: '{"a": tru' }],
      [defineTool({ name: 't', handler })],
    );
    expect(handler).not.toHaveBeenCalled();
    const outcome = outcomes[0]!;
    expect(outcome.kind === 'message' && isToolError(outcome.error, 'invalid_arguments')).toBe(true);
    expect(outcome.kind === 'message' && (outcome.error as ToolError).metadata).toEqual({ raw: '{"a": tru' });
  });

  it('passes defaults and transforms of a zod schema to the handler', async () => {
    const seen: unknown[] = [];
    const tool = defineTool({
      name: 't',
      parameters: z.object({ n: z.number().default(3), s: z.string().transform((v) => v.toUpperCase()) }),
      handler: (args) => {
        seen.push(args);
        return ok();
      },
    });
    const { messages } = await runToolCalls([call('a', 't', { s: 'hi' })], [tool]);
    expect(seen).toEqual([{ n: 3, s: 'HI' }]);
    expect(messages[0]!.content).toBe('null');
  });

  describe('options', () => {
    it('gives an arity-2 handler the context, session id, request id, call, signal and engine', async () => {
      let seen: ToolContext | undefined;
      const tool = defineTool({
        name: 'ctx',
        handler: (_args, ctx) => {
          seen = ctx;
          return 'ok';
        },
      });
      const engine = { kind: 'engine' };
      const c = call('c9', 'ctx', { a: 1 });
      await runToolCalls([c], [tool], { engine, context: { user: 'u1' }, sessionId: 's1', requestId: 'r1' });
      expect(seen).toMatchObject({ context: { user: 'u1' }, sessionId: 's1', requestId: 'r1', call: c, engine });
      expect(seen?.signal).toBeInstanceOf(AbortSignal);
      expect(seen?.signal.aborted).toBe(false);
    });

    it('calls an arity-1 handler with the arguments only', async () => {
      const handler = vi.fn(function (this: unknown, _args: unknown) {
        return arguments.length;
      });
      const { messages } = await runToolCalls([call('a', 't')], [defineTool({ name: 't', handler })]);
      expect(messages[0]!.content).toBe('1');
    });

    it('leaves missing session and request ids undefined', async () => {
      let seen: ToolContext | undefined;
      const tool = defineTool({ name: 't', handler: (_a, ctx) => ((seen = ctx), 1) });
      await runToolCalls([call('a', 't')], [tool]);
      expect(seen?.sessionId).toBeUndefined();
      expect(seen?.requestId).toBeUndefined();
      expect(seen?.context).toBeUndefined();
      expect(seen?.engine).toBeUndefined();
    });

    it('falls back to the engine for context, executor and encoder', async () => {
      const executor: ToolExecutor = { execute: (_tool, args) => ({ viaEngine: args }) };
      const encoder: ToolResultEncoder = { encode: (v) => `enc:${JSON.stringify(v)}` };
      const engine = { context: { from: 'engine' }, toolExecutor: executor, toolResultEncoder: encoder };
      const { messages } = await runToolCalls([call('a', 'echo', { q: 1 })], [echo], { engine });
      expect(messages[0]!.content).toBe('enc:{"viaEngine":{"q":1}}');

      let seen: unknown;
      const ctxTool = defineTool({ name: 'c', handler: (_a, ctx) => ((seen = ctx.context), 1) });
      await runToolCalls([call('b', 'c')], [ctxTool], { engine: { context: { from: 'engine' } } });
      expect(seen).toEqual({ from: 'engine' });
      await runToolCalls([call('b', 'c')], [ctxTool], { engine: { context: { from: 'engine' } }, context: { from: 'option' } });
      expect(seen).toEqual({ from: 'option' });
    });

    it('uses the toolExecutor option over the default executor', async () => {
      const execute = vi.fn((_tool, args: unknown, ctx: ToolContext) => ok({ custom: args, id: ctx.call.id }));
      const { messages } = await runToolCalls([call('a', 'echo', { v: 2 })], [echo], { toolExecutor: { execute } });
      expect(messages[0]!.content).toBe('{"custom":{"v":2},"id":"a"}');
      expect(execute).toHaveBeenCalledTimes(1);
    });

    it('treats a custom executor that throws as handler_raised', async () => {
      const toolExecutor: ToolExecutor = {
        execute: () => {
          throw new Error('executor broke');
        },
      };
      const { outcomes } = await runToolCalls([call('a', 'echo')], [echo], { toolExecutor });
      const o = outcomes[0]!;
      expect(o.kind === 'message' && isToolError(o.error, 'handler_raised')).toBe(true);
    });

    it('uses the toolResultEncoder option for success values and failures', async () => {
      const encoder: ToolResultEncoder = { encode: (v) => `<${String(v)}>`, encodeError: (e) => `!${(e as Error).message}` };
      const { messages } = await runToolCalls([call('a', 'slow', { ms: 0, value: 'v' }), call('b', 'fail')], [slow, fail], {
        toolResultEncoder: encoder,
      });
      expect(messages.map((m) => m.content)).toEqual(['<v>', '!tool "fail" raised: boom']);
    });

    it('defaults toolTimeoutMs to 30 seconds', async () => {
      expect(DEFAULT_TOOL_TIMEOUT_MS).toBe(30_000);
      vi.useFakeTimers();
      try {
        const waiter = defineTool({
          name: 'wait',
          handler: (_a, ctx) =>
            new Promise((resolve) => ctx.signal.addEventListener('abort', () => resolve('stopped'))),
        });
        const pending = runToolCalls([call('a', 'wait')], [waiter]);
        await vi.advanceTimersByTimeAsync(29_999);
        let settled = false;
        void pending.then(() => (settled = true));
        await vi.advanceTimersByTimeAsync(0);
        expect(settled).toBe(false);
        await vi.advanceTimersByTimeAsync(1);
        const { outcomes } = await pending;
        const o = outcomes[0]!;
        expect(o.kind === 'message' && isToolError(o.error, 'timeout')).toBe(true);
        expect(o.kind === 'message' && (o.error as ToolError).metadata).toEqual({ timeoutMs: 30_000, timeoutMode: 'cooperative' });
      } finally {
        vi.useRealTimers();
      }
    });

    it('lets a tool timeoutMs override the batch toolTimeoutMs', async () => {
      const quick = defineTool({ name: 'quick', timeoutMs: 20, handler: (_a) => delay(500).then(() => 'late') });
      const patient = defineTool({ name: 'patient', handler: (_a) => delay(60).then(() => 'done') });
      const { messages } = await runToolCalls([call('a', 'quick'), call('b', 'patient')], [quick, patient], {
        toolTimeoutMs: 5_000,
        timeoutMode: 'abandon',
      });
      expect(messages.map((m) => [m.content, m.isError])).toEqual([
        ['timeout: tool "quick" did not finish within 20 ms', true],
        ['done', false],
      ]);
    });

    it('caps concurrency at max(1, min(calls, cpus * 2)) by default', async () => {
      const probe = concurrencyProbe();
      const tool = defineTool({
        name: 'p',
        handler: async (_a) => {
          probe.enter();
          await delay(15);
          probe.leave();
          return 1;
        },
      });
      const cap = Math.max(1, availableParallelism() * 2);
      const calls = Array.from({ length: cap + 3 }, (_, i) => call(`c${i}`, 'p'));
      await runToolCalls(calls, [tool]);
      expect(probe.max).toBe(cap);

      const probe2 = concurrencyProbe();
      const tool2 = defineTool({ name: 'p', handler: async (_a) => (probe2.enter(), await delay(10), probe2.leave(), 1) });
      await runToolCalls([call('x', 'p'), call('y', 'p')], [tool2]);
      expect(probe2.max).toBe(2);
    });

    it('honours an explicit maxConcurrency', async () => {
      const probe = concurrencyProbe();
      const tool = defineTool({ name: 'p', handler: async (_a) => (probe.enter(), await delay(5), probe.leave(), 1) });
      await runToolCalls(Array.from({ length: 6 }, (_, i) => call(`c${i}`, 'p')), [tool], { maxConcurrency: 1 });
      expect(probe.max).toBe(1);
      const probe3 = concurrencyProbe();
      const tool3 = defineTool({ name: 'p', handler: async (_a) => (probe3.enter(), await delay(10), probe3.leave(), 1) });
      await runToolCalls(Array.from({ length: 9 }, (_, i) => call(`c${i}`, 'p')), [tool3], { maxConcurrency: 3 });
      expect(probe3.max).toBe(3);
    });

    it('rejects malformed options at entry with INVALID_ARGUMENT, naming the option', async () => {
      const cases: [Record<string, unknown>, string][] = [
        [{ maxConcurrency: 0 }, 'Expected the "maxConcurrency" option to be a positive integer or Infinity but received 0 of type number'],
        [{ maxConcurrency: 1.5 }, 'Expected the "maxConcurrency" option to be a positive integer or Infinity but received 1.5 of type number'],
        [{ toolTimeoutMs: -1 }, 'Expected the "toolTimeoutMs" option to be a positive number or Infinity but received -1 of type number'],
        [{ timeoutGraceMs: '5' }, 'Expected the "timeoutGraceMs" option to be a non-negative number but received "5" of type string'],
        [{ timeoutMode: 'kill' }, `Expected the "timeoutMode" option to be 'cooperative', 'abandon', 'isolate' but received "kill" of type string`],
        [{ onToolError: 'retry' }, `Expected the "onToolError" option to be 'continue', 'halt' or a function (call, error) but received "retry" of type string`],
        [{ unknownTool: 'skip' }, `Expected the "unknownTool" option to be 'error' or 'preflight' but received "skip" of type string`],
        [{ toolExecutor: {} }, 'Expected the "toolExecutor" option to be an object with an execute() method but received an object of type Object'],
        [{ toolResultEncoder: [] }, 'Expected the "toolResultEncoder" option to be an object with an encode() method but received an array of length 0'],
        [{ signal: {} }, 'Expected the "signal" option to be an AbortSignal but received an object of type Object'],
        [{ sessionId: 5 }, 'Expected the "sessionId" option to be a string but received 5 of type number'],
      ];
      for (const [options, message] of cases) {
        expectInvalidArgument(await rejectionOf(runToolCalls([], [], options as never)), message);
      }
      expectInvalidArgument(await rejectionOf(runToolCalls([], [], { maxConcurency: 2 } as never)), /^Unknown option "maxConcurency"; expected one of /);
      expectInvalidArgument(await rejectionOf(runToolCalls([], [], null as never)), 'Expected the options to be an object but received null');
    });

    it('rejects malformed calls and tools at entry with INVALID_ARGUMENT', async () => {
      expectInvalidArgument(
        await rejectionOf(runToolCalls([{ id: '', name: 'echo', arguments: {} }], [echo])),
        'Expected the id of tool call 0 to be a non-empty string but received "" of type string',
      );
      expectInvalidArgument(
        await rejectionOf(runToolCalls([call('a', 'echo'), call('a', 'echo')], [echo])),
        'Expected the tool calls to have distinct ids but received two with the id "a"',
      );
      expectInvalidArgument(
        await rejectionOf(runToolCalls([call('a', 'echo')], [echo, echo])),
        'Expected the tools to have distinct names but received two named "echo"',
      );
      expectInvalidArgument(
        await rejectionOf(runToolCalls([{ id: 'a', name: 3 } as never], [echo])),
        'Expected the name of tool call "a" to be a string but received 3 of type number',
      );
      expectInvalidArgument(await rejectionOf(runToolCalls('x' as never, [echo])), 'Expected the tool calls to be an array but received "x" of type string');
      expectInvalidArgument(await rejectionOf(runToolCalls([], {} as never)), 'Expected the tools to be an array but received an object of type Object');
      expectInvalidArgument(await rejectionOf(runToolCalls([], [null as never])), 'Expected tools[0] to be an object but received null');
    });
  });

  describe('onToolError', () => {
    it("encodes the error as content and goes on under 'continue' (the default)", async () => {
      const result = await runToolCalls([call('a', 'fail'), call('b', 'echo', { ok: true })], [fail, echo]);
      expect(result.halt).toBeUndefined();
      expect(result.messages).toEqual([
        { role: 'tool', toolCallId: 'a', name: 'fail', content: 'handler_raised: tool "fail" raised: boom', isError: true },
        { role: 'tool', toolCallId: 'b', name: 'echo', content: '{"ok":true}', isError: false },
      ]);
    });

    it('passes a handler-reported error through unchanged', async () => {
      const seen: unknown[] = [];
      const { messages } = await runToolCalls([call('a', 'report')], [report], {
        onToolError: (_call, error) => (seen.push(error), { continue: `sorry: ${String(error)}` }),
      });
      expect(seen).toEqual(['city not found']);
      expect(messages[0]).toEqual({ role: 'tool', toolCallId: 'a', name: 'report', content: 'sorry: city not found', isError: true });
      const plain = await runToolCalls([call('a', 'report')], [report]);
      expect(plain.messages[0]!.content).toBe('city not found');
    });

    it("drains the batch and reports a tool_error halt under 'halt'", async () => {
      const result = await runToolCalls([call('a', 'fail'), call('b', 'slow', { ms: 30 })], [fail, slow], { onToolError: 'halt' });
      expect(result.messages.map((m) => [m.toolCallId, m.isError])).toEqual([
        ['a', true],
        ['b', false],
      ]);
      expect(result.halt).toMatchObject({ haltedReason: 'tool_error', toolCallId: 'a', toolName: 'fail' });
      expect(isToolError((result.halt as { error: unknown }).error, 'handler_raised')).toBe(true);
      expect(result.halt).not.toHaveProperty('onToolErrorException');
    });

    it('encodes the replacement of a { continue } decision as the content', async () => {
      const { messages, halt: h } = await runToolCalls([call('a', 'fail')], [fail], {
        onToolError: (_c, _e) => ({ continue: { fallback: 42 } }),
      });
      expect(h).toBeUndefined();
      expect(messages).toEqual([{ role: 'tool', toolCallId: 'a', name: 'fail', content: '{"fallback":42}', isError: true }]);
      const quiet = await runToolCalls([call('a', 'fail')], [fail], { onToolError: (_c, _e) => ({ continue: 'cached', isError: false }) });
      expect(quiet.messages[0]).toEqual({ role: 'tool', toolCallId: 'a', name: 'fail', content: 'cached', isError: false });
    });

    it("halts like 'halt' when the function returns 'halt'", async () => {
      const { halt: h } = await runToolCalls([call('a', 'fail')], [fail], { onToolError: async (_c, _e) => 'halt' as const });
      expect(h).toMatchObject({ haltedReason: 'tool_error', toolCallId: 'a', toolName: 'fail' });
    });

    it('gets the failing call and the error, once per failed call', async () => {
      const policy = vi.fn((_call: unknown, _error: unknown) => ({ continue: 'x' }));
      const { messages } = await runToolCalls([call('a', 'fail'), call('b', 'echo'), call('c', 'report')], [fail, echo, report], {
        onToolError: policy,
      });
      expect(messages).toHaveLength(3);
      expect(policy).toHaveBeenCalledTimes(2);
      expect(policy.mock.calls[0]![0]).toEqual(call('a', 'fail'));
      expect(isToolError(policy.mock.calls[0]![1], 'handler_raised')).toBe(true);
      expect(policy.mock.calls[1]![1]).toBe('city not found');
    });

    it('routes a throwing function as an invalid_return halt, keeps the exception, and does not call it again', async () => {
      const exception = new Error('policy bug');
      const policy = vi.fn((_c: unknown, _e: unknown): 'halt' => {
        throw exception;
      });
      const result = await runToolCalls([call('a', 'fail')], [fail], { onToolError: policy });
      expect(policy).toHaveBeenCalledTimes(1);
      expect(result.messages[0]).toMatchObject({ toolCallId: 'a', isError: true, content: 'handler_raised: tool "fail" raised: boom' });
      const h = result.halt as { haltedReason: string; error: ToolError; onToolErrorException: unknown };
      expect(h.haltedReason).toBe('tool_error');
      expect(h.onToolErrorException).toBe(exception);
      expect(isToolError(h.error, 'invalid_return')).toBe(true);
      expect(h.error.cause).toBe(exception);
      expect(isToolError(h.error.metadata.originalError, 'handler_raised')).toBe(true);
    });

    it('routes a function returning another shape as an invalid_return halt without calling it again', async () => {
      for (const bad of [undefined, 'continue', { replace: 1 }, { continue: 1, isError: 'yes' }, 42]) {
        const policy = vi.fn((_c: unknown, _e: unknown) => bad as never);
        const result = await runToolCalls([call('a', 'fail')], [fail], { onToolError: policy });
        expect(policy).toHaveBeenCalledTimes(1);
        const h = result.halt as { haltedReason: string; error: ToolError };
        expect(h.haltedReason).toBe('tool_error');
        expect(isToolError(h.error, 'invalid_return')).toBe(true);
        expect(h.error.cause).toBe(bad);
        expect(result.halt).not.toHaveProperty('onToolErrorException');
      }
    });

    it('halts with encoding_failed when the replacement cannot be encoded, without calling the function again', async () => {
      const policy = vi.fn((_c: unknown, _e: unknown) => ({ continue: 10n }));
      const result = await runToolCalls([call('a', 'fail')], [fail], { onToolError: policy });
      expect(policy).toHaveBeenCalledTimes(1);
      expect(isToolError((result.halt as { error: unknown }).error, 'encoding_failed')).toBe(true);
    });

    it('rejects a function whose arity is not 2 at entry, before anything runs', async () => {
      const handler = vi.fn((_a: unknown) => 1);
      const tool = defineTool({ name: 't', handler });
      for (const bad of [() => 'halt' as const, (_c: unknown) => 'halt' as const, (_a: unknown, _b: unknown, _c: unknown) => 'halt' as const]) {
        expectInvalidArgument(
          await rejectionOf(runToolCalls([call('a', 't')], [tool], { onToolError: bad as never })),
          `Expected the "onToolError" function to take (call, error) but received a function that declares ${bad.length} parameters`,
        );
      }
      expect(handler).not.toHaveBeenCalled();
    });
  });

  describe('executor errors', () => {
    it('reports handler_raised with the thrown value normalised to an Error', async () => {
      const thrower = defineTool({
        name: 'throws',
        handler: (_a) => {
          throw 'a string';
        },
      });
      const { outcomes } = await runToolCalls([call('a', 'throws')], [thrower]);
      const error = (outcomes[0] as { error: ToolError }).error;
      expect(error.reason).toBe('handler_raised');
      expect(error.cause).toBeInstanceOf(Error);
      expect((error.cause as Error).cause).toBe('a string');
      expect(error.toolCallId).toBe('a');
      expect(error.toolName).toBe('throws');
    });

    it('reports invalid_return for undefined, functions, symbols and unknown tags', async () => {
      const returns: unknown[] = [undefined, () => 1, Symbol('s'), { '~toolResult': 'maybe' }, { '~toolResult': 'ok' }];
      const tools = returns.map((value, i) => defineTool({ name: `t${i}`, handler: (_a) => value }));
      const { outcomes } = await runToolCalls(tools.map((t, i) => call(`c${i}`, t.name)), tools);
      for (const o of outcomes) expect(o.kind === 'message' && isToolError(o.error, 'invalid_return')).toBe(true);
    });

    it('reports not_found for a manual-mode tool without a handler', async () => {
      const manual = defineTool({ name: 'manual', description: 'run by the caller' });
      const { outcomes, messages } = await runToolCalls([call('a', 'manual')], [manual]);
      expect(isToolError((outcomes[0] as { error: unknown }).error, 'not_found')).toBe(true);
      expect(messages[0]!.isError).toBe(true);
    });

    it('treats plain values (null, numbers, strings, arrays, objects) as success', async () => {
      const values: unknown[] = [null, 0, 'text', [1, 2], { a: { b: 1 } }, false];
      const tools = values.map((value, i) => defineTool({ name: `t${i}`, handler: (_a) => value }));
      const { messages } = await runToolCalls(tools.map((t, i) => call(`c${i}`, t.name)), tools);
      expect(messages.map((m) => m.content)).toEqual(['null', '0', 'text', '[1,2]', '{"a":{"b":1}}', 'false']);
      expect(messages.every((m) => !m.isError)).toBe(true);
    });
  });

  describe('encoding', () => {
    it('routes a BigInt result through onToolError as encoding_failed', async () => {
      const big = defineTool({ name: 'big', handler: (_a) => ({ n: 1n }) });
      const seen: unknown[] = [];
      const { messages } = await runToolCalls([call('a', 'big')], [big], {
        onToolError: (_c, e) => (seen.push(e), { continue: 'could not encode' }),
      });
      expect(isToolError(seen[0], 'encoding_failed')).toBe(true);
      expect((seen[0] as ToolError).cause).toBeInstanceOf(TypeError);
      expect(messages[0]).toEqual({ role: 'tool', toolCallId: 'a', name: 'big', content: 'could not encode', isError: true });
    });

    it('routes a cyclic result as encoding_failed and halts under halt', async () => {
      const cyclic: Record<string, unknown> = {};
      cyclic.self = cyclic;
      const tool = defineTool({ name: 'cyc', handler: (_a) => ok(cyclic) });
      const { halt: h, messages } = await runToolCalls([call('a', 'cyc'), call('b', 'echo')], [tool, echo], { onToolError: 'halt' });
      expect(isToolError((h as { error: unknown }).error, 'encoding_failed')).toBe(true);
      expect(messages[0]!.content).toMatch(/^encoding_failed: /);
      expect(messages[1]!.isError).toBe(false);
    });

    it('treats an encoder that returns a non-string as encoding_failed', async () => {
      const { outcomes } = await runToolCalls([call('a', 'echo')], [echo], {
        toolResultEncoder: { encode: () => 5 as unknown as string },
      });
      expect(isToolError((outcomes[0] as { error: unknown }).error, 'encoding_failed')).toBe(true);
    });

    it('falls back to the default error text when encodeError throws', async () => {
      const { messages } = await runToolCalls([call('a', 'fail')], [fail], {
        toolResultEncoder: {
          encode: String,
          encodeError: () => {
            throw new Error('nope');
          },
        },
      });
      expect(messages[0]!.content).toBe('handler_raised: tool "fail" raised: boom');
    });
  });

  describe('halts and ask-user', () => {
    const stop = defineTool({
      name: 'stop',
      parameters: z.object({ ms: z.number(), reason: z.string() }),
      handler: async ({ ms, reason }) => {
        await delay(ms);
        return halt(reason, { stoppedBy: reason });
      },
    });
    const ask = defineTool({
      name: 'ask',
      parameters: z.object({ ms: z.number() }),
      handler: async ({ ms }) => {
        await delay(ms);
        return askUser('Which city?', { choices: ['Paris', 'Rome'] });
      },
    });

    it('lets every sibling finish and report when a handler halts', async () => {
      const result = await runToolCalls(
        [call('a', 'stop', { ms: 0, reason: 'done_early' }), call('b', 'slow', { ms: 40 }), call('c', 'slow', { ms: 20 })],
        [stop, slow],
        { maxConcurrency: 3 },
      );
      expect(result.halt).toEqual({ haltedReason: 'tool_halt', toolCallId: 'a', toolName: 'stop', reason: 'done_early', result: { stoppedBy: 'done_early' } });
      expect(result.outcomes.map((o) => o.kind)).toEqual(['halt', 'message', 'message']);
      expect(result.messages.map((m) => m.toolCallId)).toEqual(['b', 'c']);
    });

    it('lets queued calls run after a halt as well', async () => {
      const result = await runToolCalls(
        [call('a', 'stop', { ms: 0, reason: 'x' }), call('b', 'slow', { ms: 5 }), call('c', 'slow', { ms: 5 })],
        [stop, slow],
        { maxConcurrency: 1 },
      );
      expect(result.messages.map((m) => m.toolCallId)).toEqual(['b', 'c']);
      expect(result.halt).toMatchObject({ haltedReason: 'tool_halt', toolCallId: 'a' });
    });

    it('reports ask-user with and without options and drains the siblings', async () => {
      const result = await runToolCalls([call('a', 'slow', { ms: 30 }), call('b', 'ask', { ms: 0 })], [slow, ask]);
      expect(result.halt).toEqual({
        haltedReason: 'ask_user',
        toolCallId: 'b',
        toolName: 'ask',
        question: 'Which city?',
        options: { choices: ['Paris', 'Rome'] },
      });
      expect(result.outcomes[1]).toEqual({
        kind: 'ask_user',
        index: 1,
        call: call('b', 'ask', { ms: 0 }),
        question: 'Which city?',
        options: { choices: ['Paris', 'Rome'] },
      });
      expect(result.messages.map((m) => m.toolCallId)).toEqual(['a']);

      const bare = defineTool({ name: 'bare', handler: (_a) => askUser('Sure?') });
      const r2 = await runToolCalls([call('q', 'bare')], [bare]);
      expect(r2.halt).toEqual({ haltedReason: 'ask_user', toolCallId: 'q', toolName: 'bare', question: 'Sure?' });
      expect(r2.messages).toEqual([]);
    });

    it('reports the first halt observed in time, not the lowest input index', async () => {
      const result = await runToolCalls(
        [call('late', 'stop', { ms: 60, reason: 'late' }), call('early', 'stop', { ms: 5, reason: 'early' }), call('ask', 'ask', { ms: 30 })],
        [stop, ask],
        { maxConcurrency: 3 },
      );
      expect(result.halt).toMatchObject({ haltedReason: 'tool_halt', toolCallId: 'early', reason: 'early' });
      expect(result.outcomes.map((o) => o.kind)).toEqual(['halt', 'halt', 'ask_user']);
    });

    it('lets a halt observed before a tool_error win over it', async () => {
      const lateFail = defineTool({
        name: 'lateFail',
        handler: async (_a) => {
          await delay(30);
          throw new Error('late');
        },
      });
      const result = await runToolCalls([call('f', 'lateFail'), call('s', 'stop', { ms: 0, reason: 'first' })], [lateFail, stop], {
        onToolError: 'halt',
      });
      expect(result.halt).toMatchObject({ haltedReason: 'tool_halt', toolCallId: 's' });
    });

    it.each(RESERVED_HALT_REASONS)('turns a handler halt with the reserved reason %s into invalid_return', async (reason) => {
      const tool = defineTool({ name: 'r', handler: (_a) => halt(reason, 'x') });
      const cont = await runToolCalls([call('a', 'r')], [tool]);
      const o = cont.outcomes[0]!;
      expect(o.kind).toBe('message');
      const error = (o as { error: ToolError }).error;
      expect(error.reason).toBe('invalid_return');
      expect(error.metadata).toEqual({ reservedHaltReason: reason });
      expect(cont.halt).toBeUndefined();

      const halted = await runToolCalls([call('a', 'r')], [tool], { onToolError: 'halt' });
      expect(halted.halt).toMatchObject({ haltedReason: 'tool_error', toolCallId: 'a', reservedHaltReason: reason });
    });

    it('accepts a halt reason that only resembles a reserved one', async () => {
      const tool = defineTool({ name: 'r', handler: (_a) => halt('completed_step', 1) });
      const { halt: h } = await runToolCalls([call('a', 'r')], [tool]);
      expect(h).toMatchObject({ haltedReason: 'tool_halt', reason: 'completed_step' });
    });
  });

  describe('unknown tools', () => {
    it('answers an unknown name with an error result and runs the other calls (default)', async () => {
      const handler = vi.fn((args: unknown) => args);
      const tool = defineTool({ name: 'known', handler });
      const result = await runToolCalls([call('a', 'ghost'), call('b', 'known', { v: 1 })], [tool]);
      expect(result.messages).toEqual([
        { role: 'tool', toolCallId: 'a', name: 'ghost', content: 'unknown_tool: there is no tool named "ghost"', isError: true },
        { role: 'tool', toolCallId: 'b', name: 'known', content: '{"v":1}', isError: false },
      ]);
      expect(handler).toHaveBeenCalledTimes(1);
    });

    it("routes an unknown name through onToolError like any failure", async () => {
      const { halt: h } = await runToolCalls([call('a', 'ghost')], [echo], { onToolError: 'halt' });
      expect(h).toMatchObject({ haltedReason: 'tool_error', toolCallId: 'a', toolName: 'ghost' });
      expect(isToolError((h as { error: unknown }).error, 'unknown_tool')).toBe(true);
    });

    it("rejects with UnknownToolError and runs nothing under unknownTool: 'preflight'", async () => {
      const handler = vi.fn((args: unknown) => args);
      const tool = defineTool({ name: 'known', handler });
      const promise = runToolCalls([call('a', 'known'), call('b', 'ghost'), call('c', 'phantom'), call('d', 'ghost')], [tool], {
        unknownTool: 'preflight',
      });
      await expect(promise).rejects.toBeInstanceOf(UnknownToolError);
      const error = (await promise.catch((e: unknown) => e)) as UnknownToolError;
      expect(error.reason).toBe('unknown_tool');
      expect(error.code).toBe('unknown_tool');
      expect(error.toolName).toBe('ghost');
      expect(error.toolNames).toEqual(['ghost', 'phantom']);
      expect(error.toolCallIds).toEqual(['b', 'c', 'd']);
      expect(error.message).toBe('unknown tools "ghost", "phantom": no tool call ran');
      await delay(5);
      expect(handler).not.toHaveBeenCalled();
    });

    it('runs normally under preflight when every name is known', async () => {
      const { messages } = await runToolCalls([call('a', 'echo', { k: 1 })], [echo], { unknownTool: 'preflight' });
      expect(messages[0]!.content).toBe('{"k":1}');
    });
  });

  describe('cancellation', () => {
    it('cancels running handlers and queued calls when the batch signal aborts', async () => {
      const controller = new AbortController();
      const sawAbort: string[] = [];
      const waiter = defineTool({
        name: 'wait',
        handler: (_a, ctx) =>
          new Promise((resolve) => {
            ctx.signal.addEventListener('abort', () => {
              sawAbort.push(ctx.call.id);
              resolve('ignored');
            });
          }),
      });
      const pending = runToolCalls([call('a', 'wait'), call('b', 'echo', { fast: 1 }), call('c', 'wait'), call('d', 'wait')], [waiter, echo], {
        maxConcurrency: 2,
        signal: controller.signal,
      });
      await delay(20);
      controller.abort(new Error('user hit stop'));
      const result = await pending;
      expect(result.outcomes.map((o) => (o.kind === 'message' ? o.status : o.kind))).toEqual(['cancelled', 'success', 'cancelled', 'cancelled']);
      expect(sawAbort.sort()).toEqual(['a', 'c']);
      expect(result.halt).toEqual({ haltedReason: 'cancelled', reason: new Error('user hit stop') });
      const cancelled = result.outcomes[3] as { error: ToolError; message: { isError: boolean; content: string } };
      expect(cancelled.error.reason).toBe('cancelled');
      expect(cancelled.error.cause).toEqual(new Error('user hit stop'));
      expect(cancelled.message.isError).toBe(true);
      expect(cancelled.message.content).toBe('cancelled: tool call "d" was cancelled');
    });

    it('runs nothing when the signal is already aborted', async () => {
      const handler = vi.fn((_a: unknown) => 1);
      const tool = defineTool({ name: 't', handler });
      const result = await runToolCalls([call('a', 't'), call('b', 't')], [tool], { signal: AbortSignal.abort('stop') });
      expect(handler).not.toHaveBeenCalled();
      expect(result.outcomes.map((o) => o.kind === 'message' && o.status)).toEqual(['cancelled', 'cancelled']);
      expect(result.halt).toEqual({ haltedReason: 'cancelled', reason: 'stop' });
    });

    it('passes a handler-reported cancelled ToolError to onToolError like any reported error', async () => {
      const reported = new ToolError('cancelled', 'the remote job was cancelled');
      const tool = defineTool({ name: 't', handler: (_a) => toolError(reported) });
      const seen: unknown[] = [];
      const result = await runToolCalls([call('a', 't')], [tool], { onToolError: (_c, e) => (seen.push(e), { continue: 'gone' }) });
      expect(seen).toEqual([reported]);
      expect(result.outcomes[0]).toMatchObject({ kind: 'message', status: 'error' });
      expect(result.halt).toBeUndefined();
    });

    it('does not pass cancellations to onToolError', async () => {
      const policy = vi.fn((_c: unknown, _e: unknown) => 'halt' as const);
      const result = await runToolCalls([call('a', 't')], [defineTool({ name: 't', handler: (_a) => 1 })], {
        signal: AbortSignal.abort(),
        onToolError: policy,
      });
      expect(policy).not.toHaveBeenCalled();
      expect(result.halt).toMatchObject({ haltedReason: 'cancelled' });
    });
  });

  describe('concurrency keys', () => {
    it('runs calls sharing a key one at a time while other calls run alongside', async () => {
      const probe = concurrencyProbe();
      const otherProbe = concurrencyProbe();
      const log: string[] = [];
      const db = defineTool({
        name: 'db',
        concurrencyKey: 'database',
        handler: async (_a, ctx) => {
          probe.enter();
          log.push(`start ${ctx.call.id}`);
          await delay(15);
          log.push(`end ${ctx.call.id}`);
          probe.leave();
          return 1;
        },
      });
      const dbAdmin = defineTool({
        name: 'db_admin',
        concurrencyKey: 'database',
        handler: async (_a, ctx) => {
          probe.enter();
          log.push(`start ${ctx.call.id}`);
          await delay(5);
          log.push(`end ${ctx.call.id}`);
          probe.leave();
          return 2;
        },
      });
      const free = defineTool({ name: 'free', handler: async (_a) => (otherProbe.enter(), await delay(20), otherProbe.leave(), 3) });
      const { messages } = await runToolCalls(
        [call('a', 'db'), call('b', 'free'), call('c', 'db_admin'), call('d', 'free'), call('e', 'db')],
        [db, dbAdmin, free],
        { maxConcurrency: 8 },
      );
      expect(probe.max).toBe(1);
      expect(otherProbe.max).toBe(2);
      expect(log).toEqual(['start a', 'end a', 'start c', 'end c', 'start e', 'end e']);
      expect(messages.map((m) => m.toolCallId)).toEqual(['a', 'b', 'c', 'd', 'e']);
    });
  });
});
