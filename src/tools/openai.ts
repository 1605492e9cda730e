/**
 * OpenAI Chat Completions adapter: an assistant message's `tool_calls` in, tool-role messages out.
 */
import { decodeToolArguments } from '../chat/accumulator.js';
import { expectedArgument, invalidArgument } from './errors.js';
import {
  runToolCalls,
  type HaltMetadata,
  type RunToolCallsOptions,
  type ToolCallOutcome,
} from './runner.js';
import { toolToJsonSchema, type AnyTool, type Tool, type ToolCall, type ToolFunctionSchema } from './tool.js';

export interface OpenAIToolCall {
  readonly id: string;
  readonly type: 'function';
  readonly function: { readonly name: string; readonly arguments: string };
}

export interface OpenAIAssistantMessage {
  readonly role: 'assistant';
  readonly content?: string | null;
  readonly tool_calls?: readonly OpenAIToolCall[];
}

/** Exactly `role`, `tool_call_id`, `content`. */
export interface OpenAIToolMessage {
  role: 'tool';
  tool_call_id: string;
  content: string;
}

/** A tool in the shape of the Chat Completions `tools` list. */
export interface OpenAIToolDefinition {
  type: 'function';
  function: ToolFunctionSchema;
}

export interface OpenAIToolRun {
  /** One tool message per call that ended with content, in order (ask-user and halted calls have none). */
  readonly messages: OpenAIToolMessage[];
  readonly outcomes: ToolCallOutcome[];
  readonly halt?: HaltMetadata;
}

type AssistantInput = OpenAIAssistantMessage | { readonly choices: readonly { readonly message: OpenAIAssistantMessage }[] };

function messageOf(input: AssistantInput): OpenAIAssistantMessage {
  if (typeof input !== 'object' || input === null) {
    throw expectedArgument('the input', 'an OpenAI assistant message or chat completion', input);
  }
  if ('choices' in input) {
    const message = input.choices[0]?.message;
    if (message === undefined) throw invalidArgument('Expected the chat completion to have at least one choice with a message but received none');
    return message;
  }
  return input;
}

/**
 * The `tool_calls` of an assistant message (or of a completion's first choice) as tool calls.
 * Arguments are decoded from their JSON string; malformed JSON, or JSON that is not an object, is
 * kept as `_invalid_arguments` so the runner answers with an error and never calls the handler.
 */
export function openAIToolCalls(input: AssistantInput): ToolCall[] {
  const message = messageOf(input);
  const calls: ToolCall[] = [];
  for (const tc of message.tool_calls ?? []) {
    const fn = tc?.function;
    const raw = fn?.arguments;
    const name = typeof fn?.name === 'string' ? fn.name : '';
    if (typeof raw !== 'string') {
      calls.push({ id: tc.id, name, arguments: raw === undefined ? {} : raw });
      continue;
    }
    const decoded = decodeToolArguments(raw);
    calls.push(decoded.ok ? { id: tc.id, name, arguments: decoded.value } : { id: tc.id, name, arguments: {}, _invalid_arguments: raw });
  }
  return calls;
}

/** Tool-role messages for the outcomes that have content, in input order. */
export function toOpenAIToolMessages(outcomes: readonly ToolCallOutcome[]): OpenAIToolMessage[] {
  const out: OpenAIToolMessage[] = [];
  for (const outcome of outcomes) {
    if (outcome.kind === 'message') out.push({ role: 'tool', tool_call_id: outcome.message.toolCallId, content: outcome.message.content });
  }
  return out;
}

/**
 * Runs an assistant message's tool calls and returns the tool-role messages to append.
 *
 * @example
 * ```ts
 * const { messages: toolMessages } = await runOpenAIToolCalls(completion.choices[0].message, tools);
 * messages.push(completion.choices[0].message, ...toolMessages);
 * ```
 */
export async function runOpenAIToolCalls(
  input: AssistantInput,
  tools: readonly AnyTool[],
  options?: RunToolCallsOptions,
): Promise<OpenAIToolRun> {
  const result = await runToolCalls(openAIToolCalls(input), tools, options);
  const messages = toOpenAIToolMessages(result.outcomes);
  return result.halt === undefined
    ? { messages, outcomes: result.outcomes }
    : { messages, outcomes: result.outcomes, halt: result.halt };
}

/** A tool as an entry of the Chat Completions `tools` list. */
export function toOpenAITool(tool: Pick<Tool, 'name' | 'description' | 'parameters'>): OpenAIToolDefinition {
  return { type: 'function', function: toolToJsonSchema(tool) };
}
