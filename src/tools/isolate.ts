/**
 * The isolate executor: runs one call's handler in its own `worker_threads` Worker, so that a
 * handler which never yields (`while (true) {}`) can still be stopped, by terminating the worker.
 *
 * The worker is created from a JavaScript source string (`eval: true`), so it works the same from
 * the TypeScript sources under a test runner and from the built `.js` files.
 *
 * Where the handler comes from:
 * - `tool.isolate = { module, export }`: the worker `import()`s the module (absolute path, `file:` or
 *   `data:` URL; a relative path is resolved against the working directory) and calls the export.
 * - otherwise `handler.toString()` is compiled inside the worker. Such a handler must be
 *   self-contained: no closure variables and no imported bindings (bundlers and test runners
 *   rename imports); it may use globals, `require`, `await import()`, and the global helpers
 *   `ok`, `toolError`, `askUser`, `halt` that the worker defines (it also shims esbuild's `__name`
 *   and Vite's `__vite_ssr_dynamic_import__`, which tsx and vitest inject into function bodies).
 *   Native and bound functions have no usable source and are refused.
 *
 * Arguments, `ctx.context`, `ctx.call` and the returned value cross the thread boundary by
 * structured clone. In the worker `ctx.engine` is `undefined` and `ctx.signal` never aborts (the
 * worker is terminated instead).
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ToolError, describeValue, toError } from './errors.js';
import { handlerRaised, notFound, type ToolExecutor } from './executor.js';
import { interpretHandlerReturn, toolError, TOOL_RESULT_TAG, type ToolResult } from './results.js';
import type { AnyTool, ToolContext } from './tool.js';

const WORKER_SOURCE = `'use strict';
const { parentPort } = require('node:worker_threads');
const TAG = ${JSON.stringify(TOOL_RESULT_TAG)};
const define = (key, value) => {
  if (!(key in globalThis)) Object.defineProperty(globalThis, key, { value, writable: true, configurable: true });
};
define('__name', (fn, name) => {
  try { Object.defineProperty(fn, 'name', { value: name, configurable: true }); } catch {}
  return fn;
});
// Vite's SSR transform (vitest) rewrites import() in function bodies to this helper.
define('__vite_ssr_dynamic_import__', (specifier) => import(specifier));
define('ok', (value) => ({ [TAG]: 'ok', value }));
define('toolError', (error) => ({ [TAG]: 'error', error }));
define('askUser', (question, options) =>
  options === undefined ? { [TAG]: 'ask_user', question } : { [TAG]: 'ask_user', question, options });
define('halt', (reason, result) => ({ [TAG]: 'halt', reason, result }));
function compile(source) {
  try {
    return (0, eval)('(' + source + '\\n)');
  } catch (first) {
    try {
      const holder = (0, eval)('({' + source + '\\n})');
      return holder[Object.keys(holder)[0]];
    } catch {
      throw first;
    }
  }
}
function plainError(err) {
  if (err instanceof Error) return { name: String(err.name), message: String(err.message), stack: String(err.stack) };
  let text;
  try { text = String(err); } catch { text = typeof err; }
  return { name: 'Error', message: 'non-error value thrown: ' + text };
}
function send(message) {
  try {
    parentPort.postMessage(message);
  } catch (err) {
    if (message.type === 'returned') {
      parentPort.postMessage({ type: 'uncloneable', message: String(err && err.message) });
    } else {
      parentPort.postMessage({ type: message.type, error: plainError(message.error), plain: true });
    }
  }
}
parentPort.once('message', async (job) => {
  let fn;
  try {
    if (job.module !== undefined) {
      const mod = await import(job.module);
      fn = mod[job.exportName];
    } else {
      fn = compile(job.source);
    }
    if (typeof fn !== 'function') throw new TypeError('the isolated handler is not a function');
    if (fn.length !== 1 && fn.length !== 2) {
      throw new TypeError('the isolated handler must take (args) or (args, ctx), it declares ' + fn.length + ' parameters');
    }
  } catch (err) {
    send({ type: 'load_failed', error: err });
    return;
  }
  const ctx = Object.freeze({
    context: job.context,
    sessionId: job.sessionId,
    requestId: job.requestId,
    call: job.call,
    signal: new AbortController().signal,
    engine: undefined,
  });
  let value;
  try {
    value = fn.length === 1 ? await fn(job.args) : await fn(job.args, ctx);
  } catch (err) {
    send({ type: 'raised', error: err });
    return;
  }
  send({ type: 'returned', value });
});
`;

type WorkerReply =
  | { type: 'returned'; value: unknown }
  | { type: 'raised' | 'load_failed'; error: unknown; plain?: boolean }
  | { type: 'uncloneable'; message: string };

/** Where an isolated tool's handler comes from: `{ module, exportName }` or `{ source }`. */
export type IsolateTarget = { module: string; exportName: string } | { source: string };

function moduleSpecifier(module: string | URL): string {
  if (module instanceof URL) return module.href;
  if (/^[a-z][a-z0-9+.-]*:/i.test(module) && !/^[a-z]:[\\/]/i.test(module)) return module;
  return pathToFileURL(path.resolve(module)).href;
}

/**
 * How a tool would be loaded in an isolate worker.
 * @throws {TypeError} when the tool has neither a module nor a handler with usable source.
 */
export function isolateTarget(tool: AnyTool): IsolateTarget | undefined {
  if (tool.isolate !== undefined) {
    return { module: moduleSpecifier(tool.isolate.module), exportName: tool.isolate.export ?? 'default' };
  }
  if (tool.handler === undefined) return undefined;
  const source = Function.prototype.toString.call(tool.handler);
  if (/\{\s*\[native code\]\s*\}\s*$/.test(source)) {
    throw new TypeError(
      `tool ${JSON.stringify(tool.name)} cannot run isolated: its handler is a native or bound function with no source; ` +
        'give the tool an isolate module ({ module, export }) instead',
    );
  }
  return { source };
}

function fromPlain(error: unknown): Error {
  const e = error as { name?: unknown; message?: unknown; stack?: unknown } | null;
  const out = new Error(typeof e?.message === 'string' ? e.message : describeValue(error));
  if (typeof e?.name === 'string') out.name = e.name;
  if (typeof e?.stack === 'string') out.stack = e.stack;
  return out;
}

/**
 * Runs one call in a fresh worker. Resolves with the handler's interpreted result; a worker that
 * dies or exits before answering gives `handler_exit`; an aborted `ctx.signal` terminates the worker
 * (also `handler_exit`, with `metadata.terminated`).
 */
export function runIsolated(tool: AnyTool, args: unknown, ctx: ToolContext): Promise<ToolResult> {
  const where = { toolCallId: ctx.call.id, toolName: tool.name };
  let target: IsolateTarget | undefined;
  try {
    target = isolateTarget(tool);
  } catch (err) {
    return Promise.resolve(handlerRaised(tool, ctx, err));
  }
  if (target === undefined) return Promise.resolve(notFound(tool, ctx));
  const exited = (message: string, metadata: Record<string, unknown>, cause?: unknown): ToolResult =>
    toolError(new ToolError('handler_exit', message, { ...where, metadata, ...(cause === undefined ? {} : { cause }) }));
  if (ctx.signal.aborted) {
    return Promise.resolve(exited('the call was aborted before its worker started', { terminated: true }));
  }

  return new Promise<ToolResult>((resolve) => {
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    let settled = false;
    const finish = (result: ToolResult, waitForExit = false): void => {
      if (settled) return;
      settled = true;
      ctx.signal.removeEventListener('abort', onAbort);
      const stopped = worker.terminate().catch(() => undefined);
      if (waitForExit) void stopped.then(() => resolve(result));
      else resolve(result);
    };
    // On abort, answer only once the thread has really stopped.
    const onAbort = (): void => {
      finish(exited(`the worker of tool ${JSON.stringify(tool.name)} was terminated`, { terminated: true, reason: ctx.signal.reason }), true);
    };
    ctx.signal.addEventListener('abort', onAbort, { once: true });

    worker.on('message', (reply: WorkerReply) => {
      switch (reply.type) {
        case 'returned':
          finish(interpretHandlerReturn(reply.value, where));
          break;
        case 'raised':
          finish(handlerRaised(tool, ctx, reply.plain === true ? fromPlain(reply.error) : reply.error));
          break;
        case 'load_failed': {
          const cause = reply.plain === true ? fromPlain(reply.error) : toError(reply.error);
          finish(
            toolError(
              new ToolError('handler_raised', `the isolated handler of tool ${JSON.stringify(tool.name)} could not be loaded: ${cause.message}`, {
                ...where,
                cause,
              }),
            ),
          );
          break;
        }
        case 'uncloneable':
          finish(
            toolError(
              new ToolError('invalid_return', `tool ${JSON.stringify(tool.name)} returned a value that cannot leave the worker: ${reply.message}`, where),
            ),
          );
          break;
      }
    });
    worker.on('error', (err: unknown) => {
      const cause = toError(err);
      finish(exited(`the worker of tool ${JSON.stringify(tool.name)} died: ${cause.message}`, {}, cause));
    });
    worker.on('exit', (exitCode: number) => {
      finish(exited(`the worker of tool ${JSON.stringify(tool.name)} exited with code ${exitCode} before answering`, { exitCode }));
    });

    const job = {
      ...target,
      args,
      context: ctx.context,
      sessionId: ctx.sessionId,
      requestId: ctx.requestId,
      call: { id: ctx.call.id, name: ctx.call.name, arguments: args },
    };
    try {
      worker.postMessage(job);
    } catch (err) {
      const cause = toError(err);
      finish(
        toolError(
          new ToolError('handler_raised', `the arguments or context of tool ${JSON.stringify(tool.name)} cannot be sent to a worker: ${cause.message}`, {
            ...where,
            cause,
          }),
        ),
      );
    }
  });
}

/** The executor used for calls whose timeout mode is `isolate`. */
export const isolateExecutor: ToolExecutor = Object.freeze({
  execute(tool: AnyTool, args: unknown, ctx: ToolContext): Promise<ToolResult> {
    return runIsolated(tool, args, ctx);
  },
});
