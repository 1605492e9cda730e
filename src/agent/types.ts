import type { ChatMessage } from '../chat/types.js';
import type { FinishReason } from '../engine/events.js';
import type { HaltMetadata } from '../tools/runner.js';

/** Where a conversation stands after a run (or a step). */
export type AgentStatus =
  /** The last message is a user message or tool results: the next step calls the model. */
  | 'ready'
  /** The model answered without calling a tool. */
  | 'completed'
  /** A tool asked the user a question (`askUser`); resume with the answer. */
  | 'awaiting_user'
  /** The model called manual tools (no handler); resume with their results. */
  | 'awaiting_tools'
  /** A tool halted the loop (`halt(...)`, or `onToolError: 'halt'`). */
  | 'halted'
  /** `maxTurns` model calls were made. */
  | 'max_turns'
  /** The `haltWhen` predicate returned true. */
  | 'halt_when'
  /** Generation hit its token limit (possibly inside a tool-call span, which is never run). */
  | 'length';

/** A call that still needs a result before the model may be called again. */
export interface AgentPendingCall {
  id: string;
  name: string;
  arguments: Record<string, unknown> | string;
  /** Why it has no result: a question for the user, a manual tool, or a tool halt. */
  reason: 'ask_user' | 'manual' | 'halt';
  question?: string;
  options?: Record<string, unknown>;
  /** The handler's halt reason and result (reason 'halt'). */
  haltReason?: string;
  haltResult?: unknown;
}

/** A tool result waiting for its siblings (results are written in call order). */
export interface AgentHeldResult {
  toolCallId: string;
  name: string;
  content: string;
  isError: boolean;
}

/** A span the model generated: the exact bytes and tokens, for replay into later prompts. */
export interface AgentSpan {
  text: string;
  tokens: number[];
  prelude?: { text: string; tokens: number[] };
}

/**
 * A conversation and everything needed to continue it. Plain JSON: `JSON.stringify` it to
 * suspend (e.g. while waiting for a user's answer) and pass the parsed object back to resume.
 */
export interface AgentState {
  version: 1;
  /** Identifies the conversation (the engine session it will be pinned to). */
  conversationId: string;
  messages: ChatMessage[];
  status: AgentStatus;
  /** Model calls made over the conversation's life. */
  turns: number;
  /** Calls of the last assistant message that have no result yet. */
  pending: AgentPendingCall[];
  /** Results of the last assistant message's calls, held until every call has one. */
  held: AgentHeldResult[];
  /** Exact spans by tool-call id. */
  spans: Record<string, AgentSpan>;
  /** Why the last run halted, when it did. */
  halt?: HaltMetadata;
}

/** One model call's numbers: what was reused from the KV cache and what had to be prefilled. */
export interface AgentTurnReport {
  turn: number;
  promptTokens: number;
  reusedTokens: number;
  prefilledTokens: number;
  generatedTokens: number;
  ttftMs: number;
  finishReason: FinishReason;
  /** Tool calls spliced back as their exact tokens. */
  replayedCalls: number;
}

export interface AgentToolCallInfo {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
  /** The raw span text when it was not a well-formed call (answered with an error, never run). */
  invalidArguments?: string;
}

export type AgentEvent =
  | { type: 'turnStart'; turn: number; promptTokens: number; replayedCalls: string[] }
  | { type: 'text'; turn: number; text: string }
  | { type: 'toolCallStart'; turn: number; index: number }
  | { type: 'toolCallDelta'; turn: number; index: number; text: string }
  | { type: 'toolCall'; turn: number; call: AgentToolCallInfo }
  | { type: 'toolCallTruncated'; turn: number; index: number; text: string }
  | { type: 'turnEnd'; turn: number; report: AgentTurnReport; text: string }
  | { type: 'toolResult'; turn: number; toolCallId: string; name: string; content: string; isError: boolean }
  | { type: 'askUser'; turn: number; toolCallId: string; name: string; question: string; options?: Record<string, unknown> }
  | { type: 'awaitingTools'; turn: number; calls: AgentPendingCall[] }
  | { type: 'done'; result: AgentResult };

export interface AgentResult {
  status: AgentStatus;
  /** The state to continue from (serialisable). */
  state: AgentState;
  /** The last assistant text. */
  text: string;
  /** Reports of the model calls made in this run. */
  turns: AgentTurnReport[];
  halt?: HaltMetadata;
}

/** Results for pending calls, by tool-call id: the content, or content with an error flag. */
export type AgentResumeInput =
  | { answer: string }
  | { results: Record<string, string | { content: string; isError?: boolean }> };

/** What `haltWhen` sees after each turn (after its tools ran). */
export interface AgentTurnInfo {
  turn: number;
  state: Readonly<AgentState>;
  report: AgentTurnReport;
  toolCalls: readonly AgentToolCallInfo[];
  toolResults: readonly AgentHeldResult[];
}
