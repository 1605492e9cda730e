/**
 * The executor contract and the default, in-process executor.
 */
import { ToolError, toError } from './errors.js';
import { interpretHandlerReturn, toolError, type ToolResult } from './results.js';
import { assertHandlerArity, type AnyTool, type ToolContext } from './tool.js';

/**
 * Invokes one tool's handler. The runner has already found the tool and validated the arguments.
 *
 * An executor returns the handler's result (a plain value counts as success) and converts its own
 * failures to `toolError(new ToolError(reason))` with a reason from the executor set:
 * `handler_raised`, `handler_exit`, `invalid_return`, `not_found` (and, for executors that enforce
 * deadlines themselves, `timeout`). Handler-reported `toolError(x)` values pass through unchanged.
 * Whatever an executor returns is interpreted again by the runner, and an executor that throws is
 * treated as `handler_raised`.
 */
export interface ToolExecutor {
  execute(tool: AnyTool, args: unknown, ctx: ToolContext): ToolResult | Promise<ToolResult> | unknown;
}

/** `not_found`: the tool has no handler (manual mode). */
export function notFound(tool: AnyTool, ctx: ToolContext): ToolResult {
  return toolError(
    new ToolError('not_found', `tool ${JSON.stringify(tool.name)} has no handler (manual mode); the caller must run it`, {
      toolCallId: ctx.call.id,
      toolName: tool.name,
    }),
  );
}

/** `handler_raised` for a thrown value; the cause is the value normalised to an `Error`. */
export function handlerRaised(tool: AnyTool, ctx: ToolContext, thrown: unknown): ToolResult {
  const cause = toError(thrown);
  return toolError(
    new ToolError('handler_raised', `tool ${JSON.stringify(tool.name)} raised: ${cause.message}`, {
      cause,
      toolCallId: ctx.call.id,
      toolName: tool.name,
    }),
  );
}

/**
 * The default executor: calls `handler(args)` or `handler(args, ctx)` by arity in this thread.
 *
 * @throws {LlamuxError} `INVALID_ARGUMENT` when the handler's arity is not 1 or 2 (the runner checks this at entry).
 */
export const defaultExecutor: ToolExecutor = Object.freeze({
  async execute(tool: AnyTool, args: unknown, ctx: ToolContext): Promise<ToolResult> {
    const handler = tool.handler;
    if (handler === undefined || handler === null) return notFound(tool, ctx);
    assertHandlerArity(handler, tool.name);
    let value: unknown;
    try {
      value = handler.length === 1 ? await (handler as (a: unknown) => unknown)(args) : await handler(args, ctx);
    } catch (err) {
      return handlerRaised(tool, ctx, err);
    }
    return interpretHandlerReturn(value, { toolCallId: ctx.call.id, toolName: tool.name });
  },
});
