/**
 * The tool runner: `runToolCalls` (tool-role messages in input order) and `streamToolCalls`
 * (events in completion order). Both drive the same `executeBatch` (execute.ts) on a batch
 * prepared from zod-validated settings (runner-settings.ts); the types are in runner-types.ts.
 */
import { executeBatch } from './execute.js';
import { prepareBatch } from './runner-settings.js';
import type { RunToolCallsOptions, RunToolCallsResult, ToolEvent } from './runner-types.js';
import { streamBatch } from './stream.js';
import type { AnyTool, ToolCall } from './tool.js';

export * from './runner-types.js';

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

/**
 * Runs a batch of tool calls and resolves with one tool-role message per call that ended with
 * content, in input order, plus every call's outcome and the halt metadata when the batch halted.
 *
 * Unknown tool names give that call an `unknown_tool` error (the others run), unless
 * `unknownTool: 'preflight'`, which rejects with `UnknownToolError` before anything runs.
 * An empty batch resolves at once with no messages.
 *
 * @throws {LlamuxError} `INVALID_ARGUMENT` (as a rejection) for malformed calls, tools or options, a
 *   handler of arity other than 1 or 2, an `onToolError` function of arity other than 2, or a call
 *   that would run a handler function in isolate mode.
 * @throws {UnknownToolError} (as a rejection) in `'preflight'` mode.
 * @example
 * ```ts
 * const { messages, halt } = await runToolCalls(
 *   [{ id: 'c0', name: 'echo', arguments: { x: 1 } }],
 *   [defineTool({ name: 'echo', handler: (args) => args })],
 * );
 * // messages: [{ role: 'tool', toolCallId: 'c0', name: 'echo', content: '{"x":1}', isError: false }]
 * ```
 */
export async function runToolCalls(
  calls: readonly ToolCall[],
  tools: readonly AnyTool[],
  options: RunToolCallsOptions = {},
): Promise<RunToolCallsResult> {
  const batch = prepareBatch(calls, tools, options);
  if (batch.unknown !== undefined) throw batch.unknown;
  if (batch.calls.length === 0) return { messages: [], outcomes: [] };
  return executeBatch(batch, () => undefined, batch.settings.signal);
}

/**
 * Runs a batch of tool calls lazily (on first iteration) and yields events: for each call
 * `tool_execution_started`, `tool_execution_completed`, then one of `tool_result_encoded`,
 * `ask_user_requested` or `tool_halt`. Calls interleave in completion order. Calls cancelled before
 * they started yield only their `tool_result_encoded` (status `cancelled`).
 *
 * Leaving the loop early (`break`, `return`, a throw) cancels the calls still running, like
 * `options.signal`, and waits for them before the iterator closes.
 *
 * @throws {LlamuxError} `INVALID_ARGUMENT`, synchronously, on the same entry checks as `runToolCalls`.
 * In `'preflight'` mode an unknown tool makes the stream yield one `{ type: 'error' }` event and end.
 */
export function streamToolCalls(
  calls: readonly ToolCall[],
  tools: readonly AnyTool[],
  options: RunToolCallsOptions = {},
): AsyncIterable<ToolEvent> {
  const batch = prepareBatch(calls, tools, options);
  return {
    [Symbol.asyncIterator]: () => streamBatch(batch),
  };
}
