/**
 * Anthropic Messages adapter: `tool_use` blocks in, one user message of `tool_result` blocks out.
 */
import { expectedArgument } from './errors.js';
import {
  runToolCalls,
  type HaltMetadata,
  type RunToolCallsOptions,
  type ToolCallOutcome,
} from './runner.js';
import { toolParametersJsonSchema, type AnyTool, type Tool, type ToolCall } from './tool.js';

export interface AnthropicToolUseBlock {
  readonly type: 'tool_use';
  readonly id: string;
  readonly name: string;
  readonly input: unknown;
}

/** Any content block; only `tool_use` blocks are read. */
export type AnthropicContentBlock = AnthropicToolUseBlock | { readonly type: string; readonly [key: string]: unknown };

/** Success: exactly `type`, `tool_use_id`, `content`. Failure: the same plus `is_error: true`. */
export type AnthropicToolResultBlock =
  | { type: 'tool_result'; tool_use_id: string; content: string }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error: true };

export interface AnthropicToolResultMessage {
  role: 'user';
  content: AnthropicToolResultBlock[];
}

/** A tool in the shape of the Messages API `tools` list. */
export interface AnthropicToolDefinition {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
}

export interface AnthropicToolRun {
  /** The follow-up user message; ask-user and halted calls have no block (the caller answers them). */
  readonly message: AnthropicToolResultMessage;
  readonly outcomes: ToolCallOutcome[];
  readonly halt?: HaltMetadata;
}

function contentOf(input: { readonly content?: unknown } | readonly unknown[]): unknown[] {
  if (Array.isArray(input)) return input;
  const content = (input as { readonly content?: unknown } | null)?.content;
  if (Array.isArray(content)) return content;
  throw expectedArgument('the input', 'an Anthropic response or a content block array', input);
}

/** The `tool_use` blocks of a response (or of its `content` array) as tool calls, in order. */
export function anthropicToolCalls(response: { readonly content?: unknown } | readonly unknown[]): ToolCall[] {
  const calls: ToolCall[] = [];
  for (const block of contentOf(response)) {
    if (typeof block !== 'object' || block === null || (block as { type?: unknown }).type !== 'tool_use') continue;
    const b = block as AnthropicToolUseBlock;
    calls.push({ id: b.id, name: b.name, arguments: b.input === undefined ? {} : b.input });
  }
  return calls;
}

/** One user message with a `tool_result` block per outcome that has content, in input order. */
export function toAnthropicToolResults(outcomes: readonly ToolCallOutcome[]): AnthropicToolResultMessage {
  const content: AnthropicToolResultBlock[] = [];
  for (const outcome of outcomes) {
    if (outcome.kind !== 'message') continue;
    const m = outcome.message;
    content.push(
      m.isError
        ? { type: 'tool_result', tool_use_id: m.toolCallId, content: m.content, is_error: true }
        : { type: 'tool_result', tool_use_id: m.toolCallId, content: m.content },
    );
  }
  return { role: 'user', content };
}

/**
 * Runs every `tool_use` block of a response and builds the follow-up user message. A failing tool
 * or an unregistered name gets `is_error: true` with the error text; the other tools still run.
 * Non-tool blocks are ignored.
 *
 * @example
 * ```ts
 * const { message } = await runAnthropicToolUse(response, [weather, add]);
 * messages.push({ role: 'assistant', content: response.content }, message);
 * ```
 */
export async function runAnthropicToolUse(
  response: { readonly content?: unknown } | readonly unknown[],
  tools: readonly AnyTool[],
  options?: RunToolCallsOptions,
): Promise<AnthropicToolRun> {
  const result = await runToolCalls(anthropicToolCalls(response), tools, options);
  const message = toAnthropicToolResults(result.outcomes);
  return result.halt === undefined
    ? { message, outcomes: result.outcomes }
    : { message, outcomes: result.outcomes, halt: result.halt };
}

/** A tool as an entry of the Messages API `tools` list. */
export function toAnthropicTool(tool: Pick<Tool, 'name' | 'description' | 'parameters'>): AnthropicToolDefinition {
  return { name: tool.name, description: tool.description ?? '', input_schema: toolParametersJsonSchema(tool) };
}
