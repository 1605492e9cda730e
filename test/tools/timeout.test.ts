import { describe, expect, it } from 'vitest';
import { ToolError, defineTool, isToolError, runToolCalls, streamToolCalls, type ToolCallOutcome } from '../../src/tools/index.js';
import { call, collect, delay } from './helpers.js';

function errorOf(outcome: ToolCallOutcome | undefined): ToolError {
  if (outcome?.kind !== 'message' || !(outcome.error instanceof ToolError)) throw new Error('expected a failed call');
  return outcome.error;
}

describe('runToolCalls() timeouts', () => {
  describe("timeoutMode: 'cooperative'", () => {
    it('aborts the signal at the deadline, waits for the handler, and reports timeout', async () => {
      let cleanedUp = false;
      let abortReason: unknown;
      const tool = defineTool({
        name: 'coop',
        handler: (_a, ctx) =>
          new Promise((resolve) => {
            ctx.signal.addEventListener('abort', () => {
              abortReason = ctx.signal.reason;
              setTimeout(() => {
                cleanedUp = true;
                resolve('partial');
              }, 20);
            });
          }),
      });
      const { outcomes, messages } = await runToolCalls([call('a', 'coop')], [tool], { toolTimeoutMs: 30 });
      expect(cleanedUp).toBe(true);
      const error = errorOf(outcomes[0]);
      expect(error.reason).toBe('timeout');
      expect(error.metadata).toEqual({ timeoutMs: 30, timeoutMode: 'cooperative' });
      expect(abortReason).toBe(error);
      expect(messages[0]).toEqual({ role: 'tool', toolCallId: 'a', name: 'coop', content: 'timeout: tool "coop" did not finish within 30 ms', isError: true });
    });

    it('stops waiting for a handler that ignores the signal after timeoutGraceMs', async () => {
      const tool = defineTool({ name: 'deaf', handler: (_a) => delay(2_000).then(() => 'late') });
      const started = Date.now();
      const { outcomes } = await runToolCalls([call('a', 'deaf')], [tool], { toolTimeoutMs: 20, timeoutGraceMs: 30 });
      expect(Date.now() - started).toBeLessThan(1_000);
      expect(errorOf(outcomes[0]).reason).toBe('timeout');
    });

    it('routes a timeout through onToolError', async () => {
      const tool = defineTool({ name: 'deaf', handler: (_a) => delay(500).then(() => 'late') });
      const { halt } = await runToolCalls([call('a', 'deaf')], [tool], { toolTimeoutMs: 10, timeoutGraceMs: 0, onToolError: 'halt' });
      expect(halt).toMatchObject({ haltedReason: 'tool_error', toolCallId: 'a' });
      expect(isToolError((halt as { error: unknown }).error, 'timeout')).toBe(true);
    });
  });

  describe("timeoutMode: 'abandon'", () => {
    it('reports timeout at the deadline and leaves the handler running', async () => {
      let finished = false;
      const tool = defineTool({
        name: 'lazy',
        handler: async (_a) => {
          await delay(150);
          finished = true;
          return 'late';
        },
      });
      const started = Date.now();
      const events = await collect(streamToolCalls([call('a', 'lazy')], [tool], { toolTimeoutMs: 20, timeoutMode: 'abandon' }));
      expect(Date.now() - started).toBeLessThan(140);
      expect(finished).toBe(false);
      expect(events.map((e) => e.type)).toEqual(['tool_execution_started', 'tool_execution_completed', 'tool_result_encoded']);
      const completed = events[1] as { result: { error: unknown } };
      expect(isToolError(completed.result.error, 'timeout')).toBe(true);
      expect(events[2]).toMatchObject({ status: 'error', content: 'timeout: tool "lazy" did not finish within 20 ms' });
      await delay(200);
      expect(finished).toBe(true);
    });

    it('can be chosen per tool', async () => {
      const tool = defineTool({ name: 'lazy', timeoutMode: 'abandon', timeoutMs: 10, handler: (_a) => delay(300).then(() => 1) });
      const started = Date.now();
      const { outcomes } = await runToolCalls([call('a', 'lazy')], [tool], { timeoutGraceMs: 5_000 });
      expect(Date.now() - started).toBeLessThan(250);
      expect(errorOf(outcomes[0]).metadata).toEqual({ timeoutMs: 10, timeoutMode: 'abandon' });
    });
  });

  describe("timeoutMode: 'isolate'", () => {
    it('terminates a handler stuck in a busy loop', async () => {
      const counter = new SharedArrayBuffer(4);
      const spin = defineTool({
        name: 'spin',
        handler: (args: Record<string, unknown>) => {
          const cells = new Int32Array(args.counter as SharedArrayBuffer);
          while (true) Atomics.add(cells, 0, 1);
        },
      });
      const { outcomes } = await runToolCalls([{ id: 'a', name: 'spin', arguments: { counter } }], [spin], {
        timeoutMode: 'isolate',
        toolTimeoutMs: 300,
      });
      const error = errorOf(outcomes[0]);
      expect(error.reason).toBe('timeout');
      expect(error.metadata).toEqual({ timeoutMs: 300, timeoutMode: 'isolate' });
      const cells = new Int32Array(counter);
      const before = Atomics.load(cells, 0);
      expect(before).toBeGreaterThan(0);
      await delay(50);
      expect(Atomics.load(cells, 0)).toBe(before);
    });

    it('runs an arity-2 handler in a worker with a cloned context', async () => {
      const tool = defineTool({
        name: 'iso',
        timeoutMode: 'isolate',
        handler: async (args: Record<string, unknown>, ctx) => ({
          args,
          context: ctx.context,
          sessionId: ctx.sessionId,
          requestId: ctx.requestId,
          callId: ctx.call.id,
          engine: ctx.engine === undefined,
          signal: ctx.signal.aborted,
          isMainThread: (await import('node:worker_threads')).isMainThread,
        }),
      });
      const { messages } = await runToolCalls([call('c1', 'iso', { n: 1 })], [tool], {
        context: { user: 'u' },
        sessionId: 's',
        requestId: 'r',
        engine: { notCloneable: () => 1 },
      });
      expect(JSON.parse(messages[0]!.content)).toEqual({
        args: { n: 1 },
        context: { user: 'u' },
        sessionId: 's',
        requestId: 'r',
        callId: 'c1',
        engine: true,
        signal: false,
        isMainThread: false,
      });
    });

    it('reports handler_exit when the handler exits its worker', async () => {
      const tool = defineTool({ name: 'quit', timeoutMode: 'isolate', handler: (_a) => process.exit(3) });
      const { outcomes } = await runToolCalls([call('a', 'quit')], [tool]);
      const error = errorOf(outcomes[0]);
      expect(error.reason).toBe('handler_exit');
      expect(error.metadata).toEqual({ exitCode: 3 });
    });

    it('routes handler_exit and invalid_return through onToolError', async () => {
      const quit = defineTool({ name: 'quit', timeoutMode: 'isolate', handler: (_a) => process.exit(1) });
      const nothing = defineTool({ name: 'nothing', handler: (_a) => undefined });
      const seen: string[] = [];
      const { messages, halt } = await runToolCalls([call('a', 'quit'), call('b', 'nothing')], [quit, nothing], {
        onToolError: (c, error) => {
          seen.push(`${c.id}:${(error as ToolError).reason}`);
          return c.id === 'a' ? { continue: 'the tool crashed' } : 'halt';
        },
      });
      expect(seen.sort()).toEqual(['a:handler_exit', 'b:invalid_return']);
      expect(messages[0]).toEqual({ role: 'tool', toolCallId: 'a', name: 'quit', content: 'the tool crashed', isError: true });
      expect(halt).toMatchObject({ haltedReason: 'tool_error', toolCallId: 'b' });
    });

    it('reports handler_exit when the worker dies of an uncaught error', async () => {
      const tool = defineTool({
        name: 'crash',
        timeoutMode: 'isolate',
        handler: (_a) =>
          new Promise(() => {
            setTimeout(() => {
              throw new Error('late crash');
            }, 0);
          }),
      });
      const { outcomes } = await runToolCalls([call('a', 'crash')], [tool]);
      const error = errorOf(outcomes[0]);
      expect(error.reason).toBe('handler_exit');
      expect((error.cause as Error).message).toBe('late crash');
    });

    it('reports handler_raised with the thrown error', async () => {
      const tool = defineTool({
        name: 'raise',
        timeoutMode: 'isolate',
        handler: (_a) => {
          throw new RangeError('out of range');
        },
      });
      const error = errorOf((await runToolCalls([call('a', 'raise')], [tool])).outcomes[0]);
      expect(error.reason).toBe('handler_raised');
      expect(error.cause).toBeInstanceOf(Error);
      expect((error.cause as Error).message).toBe('out of range');
    });

    it('accepts tagged results made with the worker globals or literally', async () => {
      const viaGlobal = defineTool({
        name: 'g',
        timeoutMode: 'isolate',
        handler: (_a) => (globalThis as unknown as { halt(r: string, v: unknown): unknown }).halt('isolated_stop', { x: 1 }),
      });
      const literal = defineTool({ name: 'l', timeoutMode: 'isolate', handler: (_a) => ({ '~toolResult': 'ask_user', question: 'ok?' }) });
      const reserved = defineTool({ name: 'r', timeoutMode: 'isolate', handler: (_a) => ({ '~toolResult': 'halt', reason: 'completed', result: 1 }) });
      const result = await runToolCalls([call('a', 'g'), call('b', 'l'), call('c', 'r')], [viaGlobal, literal, reserved]);
      expect(result.outcomes[0]).toMatchObject({ kind: 'halt', reason: 'isolated_stop', result: { x: 1 } });
      expect(result.outcomes[1]).toMatchObject({ kind: 'ask_user', question: 'ok?' });
      expect(errorOf(result.outcomes[2]).metadata).toEqual({ reservedHaltReason: 'completed' });
    });

    it('reports invalid_return for undefined or a value that cannot leave the worker', async () => {
      const nothing = defineTool({ name: 'n', timeoutMode: 'isolate', handler: (_a) => undefined });
      const fn = defineTool({ name: 'f', timeoutMode: 'isolate', handler: (_a) => ({ f: () => 1 }) });
      const { outcomes } = await runToolCalls([call('a', 'n'), call('b', 'f')], [nothing, fn]);
      expect(errorOf(outcomes[0]).reason).toBe('invalid_return');
      expect(errorOf(outcomes[1]).reason).toBe('invalid_return');
    });

    it('reports handler_raised when the context cannot be sent to the worker', async () => {
      const tool = defineTool({ name: 't', timeoutMode: 'isolate', handler: (_a) => 1 });
      const { outcomes } = await runToolCalls([call('a', 't')], [tool], { context: { fn: () => 1 } });
      const error = errorOf(outcomes[0]);
      expect(error.reason).toBe('handler_raised');
      expect(error.message).toMatch(/cannot be sent to a worker/);
    });

    it('loads the handler from an isolate module', async () => {
      const source = 'export default (args) => ({ doubled: args.n * 2 }); export const named = (args, ctx) => ctx.call.id + ":" + args.n;';
      const module = `data:text/javascript,${encodeURIComponent(source)}`;
      const byDefault = defineTool({ name: 'd', isolate: { module } });
      const byName = defineTool({ name: 'm', isolate: { module: new URL(module), export: 'named' } });
      expect(byDefault.timeoutMode).toBe('isolate');
      const { messages } = await runToolCalls([call('a', 'd', { n: 4 }), call('b', 'm', { n: 5 })], [byDefault, byName]);
      expect(messages.map((m) => m.content)).toEqual(['{"doubled":8}', 'b:5']);
    });

    it('reports handler_raised when the isolate module cannot be loaded', async () => {
      const broken = defineTool({ name: 'b', isolate: { module: 'data:text/javascript,export default (', export: 'default' } });
      const missing = defineTool({ name: 'm', isolate: { module: 'data:text/javascript,export const x = 1', export: 'nope' } });
      const { outcomes } = await runToolCalls([call('a', 'b'), call('c', 'm')], [broken, missing]);
      expect(errorOf(outcomes[0]).reason).toBe('handler_raised');
      expect(errorOf(outcomes[1]).message).toMatch(/could not be loaded: the isolated handler is not a function/);
    });

    it('refuses at entry a handler with no source to send', async () => {
      const bound = defineTool({ name: 'bound', handler: function (this: unknown, a: unknown) { return a; }.bind(null) });
      await expect(runToolCalls([call('a', 'bound')], [bound], { timeoutMode: 'isolate' })).rejects.toThrow(
        /cannot run isolated: its handler is a native or bound function/,
      );
      await expect(runToolCalls([call('a', 'bound')], [bound])).resolves.toBeDefined();
    });

    it('terminates isolated workers when the batch is cancelled', async () => {
      const counter = new SharedArrayBuffer(4);
      const spin = defineTool({
        name: 'spin',
        timeoutMode: 'isolate',
        handler: (args: Record<string, unknown>) => {
          const cells = new Int32Array(args.counter as SharedArrayBuffer);
          while (true) Atomics.add(cells, 0, 1);
        },
      });
      const controller = new AbortController();
      const pending = runToolCalls([{ id: 'a', name: 'spin', arguments: { counter } }], [spin], { signal: controller.signal });
      const cells = new Int32Array(counter);
      while (Atomics.load(cells, 0) === 0) await delay(5);
      controller.abort();
      const { outcomes, halt } = await pending;
      expect(outcomes[0]).toMatchObject({ kind: 'message', status: 'cancelled' });
      expect(halt).toMatchObject({ haltedReason: 'cancelled' });
      const before = Atomics.load(cells, 0);
      await delay(50);
      expect(Atomics.load(cells, 0)).toBe(before);
    });
  });
});
