import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ToolError, defineTool, isToolError, runToolCalls, streamToolCalls, type ToolCallOutcome } from '../../src/tools/index.js';
import { call, collect, delay, expectInvalidArgument, rejectionOf, thrownBy } from './helpers.js';

const FIXTURE = new URL('./fixtures/isolated-tools.mjs', import.meta.url);

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
    const isolated = (name: string, exportName: string, extra: { timeoutMs?: number } = {}) =>
      defineTool({ name, isolate: { module: FIXTURE, export: exportName }, ...extra });

    it('terminates a handler stuck in a busy loop', async () => {
      const counter = new SharedArrayBuffer(4);
      const { outcomes } = await runToolCalls([{ id: 'a', name: 'spin', arguments: { counter } }], [isolated('spin', 'spin')], {
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

    it('runs an arity-2 export in a worker with a cloned context', async () => {
      const { messages } = await runToolCalls([call('c1', 'iso', { n: 1 })], [isolated('iso', 'describeCall')], {
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

    it('loads the module from a URL, a file: or data: URL string, or a path, and the default export when none is named', async () => {
      const source = 'export const named = (args, ctx) => ctx.call.id + ":" + args.n;';
      const tools = [
        defineTool({ name: 'url', isolate: { module: FIXTURE } }),
        defineTool({ name: 'href', isolate: { module: FIXTURE.href, export: 'default' } }),
        defineTool({ name: 'relative', isolate: { module: 'test/tools/fixtures/isolated-tools.mjs' } }),
        defineTool({ name: 'absolute', isolate: { module: fileURLToPath(FIXTURE) } }),
        defineTool({ name: 'data', isolate: { module: `data:text/javascript,${encodeURIComponent(source)}`, export: 'named' } }),
      ];
      expect(tools.map((t) => t.timeoutMode)).toEqual(['isolate', 'isolate', 'isolate', 'isolate', 'isolate']);
      const calls = tools.map((t, i) => call(`c${i}`, t.name, { n: i + 1 }));
      const { messages } = await runToolCalls(calls, tools);
      expect(messages.map((m) => m.content)).toEqual(['{"doubled":2}', '{"doubled":4}', '{"doubled":6}', '{"doubled":8}', 'c4:5']);
    });

    it('refuses at entry a tool that would run a handler function in isolate mode', async () => {
      let ran = 0;
      const plain = defineTool({
        name: 'plain',
        handler: function lookup(a: unknown) {
          ran++;
          return a;
        },
      });
      const message =
        `Expected tool "plain" to have an isolate module ({ module, export }) for timeoutMode 'isolate' but received a function (lookup); ` +
        'isolate mode imports the handler from a module in a worker and cannot run a function defined in this thread';
      expectInvalidArgument(await rejectionOf(runToolCalls([call('a', 'plain')], [plain], { timeoutMode: 'isolate' })), message);
      expectInvalidArgument(thrownBy(() => streamToolCalls([call('a', 'plain')], [plain], { timeoutMode: 'isolate' })), message);
      expect(ran).toBe(0);
      // The same tool runs in the other modes, and a batch in isolate mode may hold manual tools and isolated tools.
      await expect(runToolCalls([call('a', 'plain')], [plain], { timeoutMode: 'abandon' })).resolves.toMatchObject({ messages: [{ isError: false }] });
      const { outcomes } = await runToolCalls([call('m', 'manual'), call('i', 'iso')], [defineTool({ name: 'manual' }), isolated('iso', 'default')], {
        timeoutMode: 'isolate',
      });
      expect(errorOf(outcomes[0]).reason).toBe('not_found');
      expect(outcomes[1]).toMatchObject({ status: 'success', message: { content: '{"doubled":null}' } });
    });

    it('reports handler_exit when the handler exits its worker', async () => {
      const { outcomes } = await runToolCalls([call('a', 'quit')], [isolated('quit', 'exit3')]);
      const error = errorOf(outcomes[0]);
      expect(error.reason).toBe('handler_exit');
      expect(error.metadata).toEqual({ exitCode: 3 });
    });

    it('routes handler_exit and invalid_return through onToolError', async () => {
      const nothing = defineTool({ name: 'nothing', handler: (_a) => undefined });
      const seen: string[] = [];
      const { messages, halt } = await runToolCalls([call('a', 'quit'), call('b', 'nothing')], [isolated('quit', 'exit1'), nothing], {
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
      const { outcomes } = await runToolCalls([call('a', 'crash')], [isolated('crash', 'crashLater')]);
      const error = errorOf(outcomes[0]);
      expect(error.reason).toBe('handler_exit');
      expect((error.cause as Error).message).toBe('late crash');
    });

    it('reports handler_raised with the thrown error', async () => {
      const error = errorOf((await runToolCalls([call('a', 'raise')], [isolated('raise', 'raise')])).outcomes[0]);
      expect(error.reason).toBe('handler_raised');
      expect(error.cause).toBeInstanceOf(Error);
      expect((error.cause as Error).message).toBe('out of range');
    });

    it('accepts tagged results built in the worker', async () => {
      const result = await runToolCalls(
        [call('a', 'h'), call('b', 'q'), call('c', 'r')],
        [isolated('h', 'haltTagged'), isolated('q', 'askTagged'), isolated('r', 'reservedHalt')],
      );
      expect(result.outcomes[0]).toMatchObject({ kind: 'halt', reason: 'isolated_stop', result: { x: 1 } });
      expect(result.outcomes[1]).toMatchObject({ kind: 'ask_user', question: 'ok?' });
      expect(errorOf(result.outcomes[2]).metadata).toEqual({ reservedHaltReason: 'completed' });
    });

    it('reports invalid_return for undefined or a value that cannot leave the worker', async () => {
      const { outcomes } = await runToolCalls([call('a', 'n'), call('b', 'f')], [isolated('n', 'nothing'), isolated('f', 'uncloneable')]);
      expect(errorOf(outcomes[0]).reason).toBe('invalid_return');
      expect(errorOf(outcomes[1]).reason).toBe('invalid_return');
    });

    it('reports handler_raised when the context cannot be sent to the worker', async () => {
      const { outcomes } = await runToolCalls([call('a', 't')], [isolated('t', 'default')], { context: { fn: () => 1 } });
      const error = errorOf(outcomes[0]);
      expect(error.reason).toBe('handler_raised');
      expect(error.message).toMatch(/cannot be sent to a worker/);
    });

    it('reports handler_raised when the module or its export cannot be loaded', async () => {
      const tools = [
        defineTool({ name: 'broken', isolate: { module: 'data:text/javascript,export default (', export: 'default' } }),
        isolated('missing', 'nope'),
        isolated('number', 'notAFunction'),
        isolated('arity', 'threeParams'),
        defineTool({ name: 'gone', isolate: { module: new URL('./fixtures/does-not-exist.mjs', import.meta.url) } }),
      ];
      const { outcomes } = await runToolCalls(tools.map((t, i) => call(`c${i}`, t.name)), tools);
      for (const outcome of outcomes) expect(errorOf(outcome).reason).toBe('handler_raised');
      expect(errorOf(outcomes[1]).message).toBe(
        `the isolated handler of tool "missing" could not be loaded: the export "nope" of ${FIXTURE.href} is not a function`,
      );
      expect(errorOf(outcomes[2]).message).toMatch(/the export "notAFunction" of .* is not a function$/);
      expect(errorOf(outcomes[3]).message).toMatch(/must take \(args\) or \(args, ctx\), it declares 3 parameters$/);
      expect(errorOf(outcomes[4]).message).toMatch(/could not be loaded: .*does-not-exist\.mjs/);
    });

    it('terminates isolated workers when the batch is cancelled', async () => {
      const counter = new SharedArrayBuffer(4);
      const controller = new AbortController();
      const pending = runToolCalls([{ id: 'a', name: 'spin', arguments: { counter } }], [isolated('spin', 'spin')], { signal: controller.signal });
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
