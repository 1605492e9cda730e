/**
 * The isolate executor: runs one call's handler in its own `worker_threads` Worker, so that a
 * handler which never yields (`while (true) {}`) can still be stopped, by terminating the worker.
 *
 * The handler always comes from a module: `tool.isolate = { module, export }`. The worker
 * `import()`s the module (a path, absolute or relative to the working directory, a `file:` or
 * `data:` URL, or a `URL`) and calls the export (`'default'` when left out). A function defined in
 * this thread is never shipped to the worker: its closure, its imports and whatever a bundler or
 * test runner did to its source would not survive the trip.
 *
 * The worker itself is created from a JavaScript source string (`eval: true`), so it works the same
 * from the TypeScript sources under a test runner and from the built `.js` files.
 *
 * Arguments, `ctx.context`, `ctx.call` and the returned value cross the thread boundary by
 * structured clone. In the worker `ctx.engine` is `undefined` and `ctx.signal` never aborts (the
 * worker is terminated instead).
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ToolError, describeValue, invalidArgument, toError } from './errors.js';
import { handlerRaised, notFound, type ToolExecutor } from './executor.js';
import { interpretHandlerReturn, toolError, type ToolResult } from './results.js';
import { isolateNeedsModule, type AnyTool, type ToolContext } from './tool.js';

const WORKER_SOURCE = `'use strict';
const { parentPort } = require('node:worker_threads');
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
    const mod = await import(job.module);
    fn = mod[job.exportName];
    if (typeof fn !== 'function') {
      throw new TypeError('the export ' + JSON.stringify(job.exportName) + ' of ' + job.module + ' is not a function');
    }
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

/** Where an isolated tool's handler comes from: the module's URL and the export's name. */
export interface IsolateTarget {
  readonly module: string;
  readonly exportName: string;
}

function moduleSpecifier(module: string | URL): string {
  if (module instanceof URL) return module.href;
  if (/^[a-z][a-z0-9+.-]*:/i.test(module) && !/^[a-z]:[\\/]/i.test(module)) return module;
  return pathToFileURL(path.resolve(module)).href;
}

/**
 * How a tool would be loaded in an isolate worker; `undefined` for a manual-mode tool (no handler,
 * no module), which the executor answers with `not_found`.
 * @throws {LlamuxError} `INVALID_ARGUMENT` when the tool has a handler function but no isolate module.
 */
export function isolateTarget(tool: AnyTool): IsolateTarget | undefined {
  if (tool.isolate !== undefined) {
    return { module: moduleSpecifier(tool.isolate.module), exportName: tool.isolate.export ?? 'default' };
  }
  if (tool.handler === undefined || tool.handler === null) return undefined;
  throw invalidArgument(isolateNeedsModule(tool.name, tool.handler));
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
