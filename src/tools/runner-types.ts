// The tool runner's public types: options, messages, outcomes, halts and stream events.
import type { ToolResultEncoder } from './encoder.js';
import type { ToolError, UnknownToolError } from './errors.js';
import type { ToolExecutor } from './executor.js';
import type { ToolResult } from './results.js';
import type { TimeoutMode, ToolCall } from './tool.js';

// ---------------------------------------------------------------------------------------------

/** What an `onToolError` function decides: replace the content and go on, or halt the batch. */
export type OnToolErrorDecision = { readonly continue: unknown; readonly isError?: boolean } | 'halt';
/** Called once per failed call with the call and the error (a `ToolError`, or what the handler reported). */
export type OnToolErrorFunction = (call: ToolCall, error: unknown) => OnToolErrorDecision | Promise<OnToolErrorDecision>;
export type OnToolError = 'continue' | 'halt' | OnToolErrorFunction;

export interface RunToolCallsOptions<TEngine = unknown, TContext = unknown> {
  /** Passed to handlers as `ctx.engine`; its `toolExecutor`, `toolResultEncoder` and `context` are fallbacks. */
  readonly engine?: TEngine;
  /** `ctx.context` of every handler. Default: `engine.context`, else `undefined`. */
  readonly context?: TContext;
  readonly sessionId?: string;
  readonly requestId?: string;
  /** Default: `engine.toolExecutor`, else `defaultExecutor`. Not used for isolated calls. */
  readonly toolExecutor?: ToolExecutor;
  /** Default: `engine.toolResultEncoder`, else `jsonEncoder`. */
  readonly toolResultEncoder?: ToolResultEncoder;
  /** Default `'continue'`. */
  readonly onToolError?: OnToolError;
  /** Per-call deadline in ms (a tool's `timeoutMs` wins). Default 30 000; `Infinity` disables it. */
  readonly toolTimeoutMs?: number;
  /** Default `'cooperative'` (a tool's `timeoutMode` wins). */
  readonly timeoutMode?: TimeoutMode;
  /** How long `cooperative` and `isolate` wait for an interrupted handler to settle. Default 1 000 ms. */
  readonly timeoutGraceMs?: number;
  /** Default `max(1, min(calls.length, availableParallelism() * 2))`. */
  readonly maxConcurrency?: number;
  /** `'error'` (default): that call gets an error result, the rest run. `'preflight'`: nothing runs. */
  readonly unknownTool?: 'error' | 'preflight';
  /** Cancels the batch: running handlers are interrupted and, like queued calls, reported as cancelled. */
  readonly signal?: AbortSignal;
}

/** A tool-role message. `isError` is true for failures and cancellations. */
export interface ToolMessage {
  readonly role: 'tool';
  readonly toolCallId: string;
  readonly name: string;
  readonly content: string;
  readonly isError: boolean;
}

export type ToolCallStatus = 'success' | 'error' | 'cancelled';

/** How one call ended. Exactly one per call. */
export type ToolCallOutcome =
  | {
      readonly kind: 'message';
      readonly index: number;
      readonly call: ToolCall;
      readonly status: ToolCallStatus;
      readonly message: ToolMessage;
      /** The failure, for `error` and `cancelled`. */
      readonly error?: unknown;
    }
  | {
      readonly kind: 'ask_user';
      readonly index: number;
      readonly call: ToolCall;
      readonly question: string;
      readonly options?: Readonly<Record<string, unknown>>;
    }
  | { readonly kind: 'halt'; readonly index: number; readonly call: ToolCall; readonly reason: string; readonly result: unknown };

export interface ToolErrorHaltMetadata {
  readonly haltedReason: 'tool_error';
  readonly toolCallId: string;
  readonly toolName: string;
  /** The error that halted the batch (an `invalid_return` ToolError when the `onToolError` function misbehaved). */
  readonly error: unknown;
  /** What the `onToolError` function threw, when it threw. */
  readonly onToolErrorException?: unknown;
  /** The reserved reason a handler tried to halt with, when that is what failed. */
  readonly reservedHaltReason?: string;
}

/** Why a batch halted. Only the first halt observed (in time) is reported. */
export type HaltMetadata =
  | {
      readonly haltedReason: 'ask_user';
      readonly toolCallId: string;
      readonly toolName: string;
      readonly question: string;
      readonly options?: Readonly<Record<string, unknown>>;
    }
  | { readonly haltedReason: 'tool_halt'; readonly toolCallId: string; readonly toolName: string; readonly reason: string; readonly result: unknown }
  | ToolErrorHaltMetadata
  | { readonly haltedReason: 'cancelled'; readonly reason: unknown };

export interface RunToolCallsResult {
  /** One message per call that ended with content (not ask-user, not halt), in input order. */
  readonly messages: ToolMessage[];
  /** One outcome per call, in input order. */
  readonly outcomes: ToolCallOutcome[];
  /** Present when the batch halted. */
  readonly halt?: HaltMetadata;
}

export interface EventBase {
  /** The call's position in the input. */
  readonly index: number;
  readonly toolCallId: string;
  readonly toolName: string;
}
export interface ToolExecutionStartedEvent extends EventBase {
  readonly type: 'tool_execution_started';
  readonly arguments: unknown;
}
export interface ToolExecutionCompletedEvent extends EventBase {
  readonly type: 'tool_execution_completed';
  readonly result: ToolResult;
}
export interface ToolResultEncodedEvent extends EventBase {
  readonly type: 'tool_result_encoded';
  readonly content: string;
  readonly isError: boolean;
  readonly status: ToolCallStatus;
  readonly message: ToolMessage;
  /** Present when this call's failure halted the batch (`onToolError` decided to halt). */
  readonly halt?: ToolErrorHaltMetadata;
}
export interface AskUserRequestedEvent extends EventBase {
  readonly type: 'ask_user_requested';
  readonly question: string;
  readonly options?: Readonly<Record<string, unknown>>;
}
export interface ToolHaltEvent extends EventBase {
  readonly type: 'tool_halt';
  readonly reason: string;
  readonly result: unknown;
}
/** The only event of a stream refused by the `'preflight'` unknown-tool check. */
export interface ToolBatchErrorEvent {
  readonly type: 'error';
  readonly error: UnknownToolError;
}
export type ToolEvent =
  | ToolExecutionStartedEvent
  | ToolExecutionCompletedEvent
  | ToolResultEncodedEvent
  | AskUserRequestedEvent
  | ToolHaltEvent
  | ToolBatchErrorEvent;

/** Default per-call deadline. */
export const DEFAULT_TOOL_TIMEOUT_MS = 30_000;
/** Default wait for an interrupted `cooperative` or `isolate` call to settle. */
export const DEFAULT_TIMEOUT_GRACE_MS = 1_000;
