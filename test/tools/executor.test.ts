import { describe, expect, it } from 'vitest';
import {
  EXECUTOR_ERROR_REASONS,
  TOOL_RESULT_TAG,
  ToolError,
  askUser,
  defaultExecutor,
  halt,
  isolateExecutor,
  ok,
  toolError,
  type AnyTool,
  type ToolContext,
  type ToolResult,
} from '../../src/tools/index.js';
import { expectInvalidArgument, rejectionOf } from './helpers.js';

function ctxFor(id = 'c1', name = 't'): ToolContext {
  return Object.freeze({
    context: { tenant: 'acme' },
    sessionId: 'sess',
    requestId: 'req',
    call: { id, name, arguments: {} },
    signal: new AbortController().signal,
    engine: { engine: true },
  });
}

function tool(handler: unknown, name = 't'): AnyTool {
  return {
    name,
    description: '',
    parameters: undefined,
    handler: handler as AnyTool['handler'],
    timeoutMs: undefined,
    timeoutMode: undefined,
    concurrencyKey: undefined,
    isolate: undefined,
  };
}

async function run(handler: unknown): Promise<ToolResult> {
  return (await defaultExecutor.execute(tool(handler), { a: 1 }, ctxFor())) as ToolResult;
}

function errorReason(result: ToolResult): string | undefined {
  return result[TOOL_RESULT_TAG] === 'error' && result.error instanceof ToolError ? result.error.reason : undefined;
}

describe('defaultExecutor.execute()', () => {
  it('calls an arity-1 handler with the arguments only', async () => {
    const seen: unknown[][] = [];
    const result = await run(function (this: unknown, args: unknown) {
      seen.push([...arguments]);
      return args;
    });
    expect(seen).toEqual([[{ a: 1 }]]);
    expect(result).toEqual(ok({ a: 1 }));
  });

  it('calls an arity-2 handler with the arguments and the context', async () => {
    const ctx = ctxFor('c7');
    const result = await defaultExecutor.execute(tool((args: unknown, c: ToolContext) => ({ args, c })), { a: 2 }, ctx);
    expect(result).toEqual(ok({ args: { a: 2 }, c: ctx }));
  });

  it('throws INVALID_ARGUMENT for a handler of any other arity', async () => {
    expectInvalidArgument(await rejectionOf(run(() => 1)), /declares 0 parameters/);
    expectInvalidArgument(
      await rejectionOf(run((_a: unknown, _b: unknown, _c: unknown) => 1)),
      /^Expected the handler of tool "t" to take \(args\) or \(args, ctx\) but received a function that declares 3 parameters/,
    );
  });

  it('returns each of the five legal results', async () => {
    expect(await run((_a: unknown) => 'plain')).toEqual(ok('plain'));
    expect(await run((_a: unknown) => ok(5))).toEqual(ok(5));
    expect(await run((_a: unknown) => toolError({ code: 404 }))).toEqual(toolError({ code: 404 }));
    expect(await run((_a: unknown) => askUser('Which?'))).toEqual(askUser('Which?'));
    expect(await run((_a: unknown) => askUser('Which?', { choices: [1, 2] }))).toEqual({
      [TOOL_RESULT_TAG]: 'ask_user',
      question: 'Which?',
      options: { choices: [1, 2] },
    });
    expect(await run((_a: unknown) => halt('handoff', { to: 'human' }))).toEqual({
      [TOOL_RESULT_TAG]: 'halt',
      reason: 'handoff',
      result: { to: 'human' },
    });
  });

  it('awaits async handlers', async () => {
    expect(await run(async (_a: unknown) => ok('later'))).toEqual(ok('later'));
  });

  it('passes a handler-reported ToolError through unchanged', async () => {
    const reported = new ToolError('timeout', 'my own timeout');
    const result = await run((_a: unknown) => toolError(reported));
    expect(result[TOOL_RESULT_TAG] === 'error' && result.error).toBe(reported);
  });

  it('converts a throw to handler_raised with the cause kept', async () => {
    const boom = new Error('boom');
    const result = await run((_a: unknown) => {
      throw boom;
    });
    expect(errorReason(result)).toBe('handler_raised');
    const error = (result as { error: ToolError }).error;
    expect(error.cause).toBe(boom);
    expect(error.message).toBe('tool "t" raised: boom');
    expect(error.toolCallId).toBe('c1');
  });

  it('normalises a thrown non-error to an Error whose cause is the thrown value', async () => {
    const thrown = { code: 42 };
    const result = await run(async (_a: unknown) => {
      throw thrown;
    });
    const cause = (result as { error: ToolError }).error.cause as Error;
    expect(cause).toBeInstanceOf(Error);
    expect(cause.message).toBe('non-error value thrown: object');
    expect(cause.cause).toBe(thrown);
  });

  it('converts undefined, functions, symbols and malformed tagged objects to invalid_return', async () => {
    const bad: unknown[] = [
      undefined,
      () => 1,
      Symbol('x'),
      { [TOOL_RESULT_TAG]: 'done' },
      { [TOOL_RESULT_TAG]: 7 },
      { [TOOL_RESULT_TAG]: 'ok' },
      { [TOOL_RESULT_TAG]: 'error' },
      { [TOOL_RESULT_TAG]: 'ask_user', question: 5 },
      { [TOOL_RESULT_TAG]: 'ask_user', question: 'q', options: 'x' },
      { [TOOL_RESULT_TAG]: 'halt', reason: '', result: 1 },
      { [TOOL_RESULT_TAG]: 'halt', reason: 'r' },
    ];
    for (const value of bad) {
      const result = await run((_a: unknown) => value);
      expect(errorReason(result)).toBe('invalid_return');
      expect((result as { error: ToolError }).error.cause).toBe(value);
    }
    expect(errorReason(await run(async (_a: unknown) => undefined))).toBe('invalid_return');
  });

  it('converts a reserved halt reason to invalid_return with the reason in metadata', async () => {
    const result = await run((_a: unknown) => halt('max_turns', null));
    expect(errorReason(result)).toBe('invalid_return');
    expect((result as { error: ToolError }).error.metadata).toEqual({ reservedHaltReason: 'max_turns' });
  });

  it('returns not_found for a tool without a handler', async () => {
    const result = (await defaultExecutor.execute(tool(undefined, 'manual'), {}, ctxFor('x', 'manual'))) as ToolResult;
    expect(errorReason(result)).toBe('not_found');
    expect((result as { error: ToolError }).error.message).toBe('tool "manual" has no handler (manual mode); the caller must run it');
  });

  it('uses only reasons from the closed executor set', () => {
    expect(EXECUTOR_ERROR_REASONS).toEqual(['handler_raised', 'handler_exit', 'timeout', 'invalid_return', 'encoding_failed', 'not_found']);
  });
});

describe('isolateExecutor.execute()', () => {
  const isolated = (exportName: string): AnyTool => ({
    ...tool(undefined),
    timeoutMode: 'isolate',
    isolate: { module: new URL('./fixtures/isolated-tools.mjs', import.meta.url), export: exportName },
  });

  it('runs the module export in a worker and returns its result', async () => {
    const result = await isolateExecutor.execute(isolated('default'), { n: 21 }, ctxFor());
    expect(result).toEqual(ok({ doubled: 42 }));
  });

  it('returns not_found for a tool without a handler or module', async () => {
    const result = (await isolateExecutor.execute(tool(undefined), {}, ctxFor())) as ToolResult;
    expect(errorReason(result)).toBe('not_found');
  });

  it('refuses a handler function without starting a worker: handler_raised caused by INVALID_ARGUMENT', async () => {
    const result = (await isolateExecutor.execute(tool((_a: unknown) => 1), {}, ctxFor())) as ToolResult;
    expect(errorReason(result)).toBe('handler_raised');
    expectInvalidArgument((result as { error: ToolError }).error.cause, /^Expected tool "t" to have an isolate module/);
  });

  it('does not start a worker when the signal is already aborted', async () => {
    const ctx = { ...ctxFor(), signal: AbortSignal.abort() };
    const result = (await isolateExecutor.execute(isolated('default'), {}, ctx)) as ToolResult;
    expect(errorReason(result)).toBe('handler_exit');
    expect((result as { error: ToolError }).error.metadata).toEqual({ terminated: true });
  });
});
