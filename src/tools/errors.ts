/**
 * Error types of the tool layer.
 *
 * `ToolError` describes one failed tool call. Its `reason` is drawn from a closed union: six reasons
 * the executor produces and three the runner adds for calls that never reach a handler.
 * `UnknownToolError` is the batch-level failure of the `unknownTool: 'preflight'` mode.
 * Bad options, tools and calls are the caller's mistake, not a call's: they throw
 * `LlamuxError('INVALID_ARGUMENT')` (see `invalidArgument`).
 */
import { LlamuxError } from '../errors.js';

/** Reasons produced by an executor (the closed set of the executor contract). */
export const EXECUTOR_ERROR_REASONS = [
  'handler_raised',
  'handler_exit',
  'timeout',
  'invalid_return',
  'encoding_failed',
  'not_found',
] as const;

/** Reasons produced by the runner for calls that never reached a handler (or were stopped). */
export const RUNNER_ERROR_REASONS = ['invalid_arguments', 'unknown_tool', 'cancelled'] as const;

export type ExecutorErrorReason = (typeof EXECUTOR_ERROR_REASONS)[number];
export type RunnerErrorReason = (typeof RUNNER_ERROR_REASONS)[number];
export type ToolErrorReason = ExecutorErrorReason | RunnerErrorReason;

export interface ToolErrorOptions {
  /** The underlying failure (an `Error`; thrown non-errors are wrapped first). */
  cause?: unknown;
  toolCallId?: string;
  toolName?: string;
  /** Extra facts, e.g. `{ reservedHaltReason: 'completed' }` or `{ exitCode: 1 }`. */
  metadata?: Record<string, unknown>;
}

/**
 * One failed tool call, as the executor or the runner saw it.
 *
 * @example
 * ```ts
 * if (isToolError(err) && err.reason === 'timeout') retryLater(err.toolCallId);
 * ```
 */
export class ToolError extends Error {
  readonly reason: ToolErrorReason;
  readonly toolCallId: string | undefined;
  readonly toolName: string | undefined;
  readonly metadata: Readonly<Record<string, unknown>>;

  constructor(reason: ToolErrorReason, message?: string, options: ToolErrorOptions = {}) {
    super(message ?? `tool call failed: ${reason}`, 'cause' in options ? { cause: options.cause } : undefined);
    this.reason = reason;
    this.toolCallId = options.toolCallId;
    this.toolName = options.toolName;
    this.metadata = Object.freeze({ ...(options.metadata ?? {}) });
  }
}
Object.defineProperty(ToolError.prototype, 'name', { value: 'ToolError', writable: true, configurable: true });

/** True for a `ToolError` (optionally one with the given reason). */
export function isToolError(value: unknown, reason?: ToolErrorReason): value is ToolError {
  return value instanceof ToolError && (reason === undefined || value.reason === reason);
}

/**
 * The batch named a tool that is not registered, and `unknownTool: 'preflight'` was asked for:
 * nothing ran.
 */
export class UnknownToolError extends Error {
  readonly code = 'unknown_tool' as const;
  readonly reason = 'unknown_tool' as const;
  /** Every unknown name in the batch, in input order, without repeats. */
  readonly toolNames: readonly string[];
  /** The ids of the calls that named an unknown tool, in input order. */
  readonly toolCallIds: readonly string[];

  constructor(toolNames: readonly string[], toolCallIds: readonly string[]) {
    const list = toolNames.map((n) => JSON.stringify(n)).join(', ');
    super(`unknown tool${toolNames.length === 1 ? '' : 's'} ${list}: no tool call ran`);
    this.toolNames = Object.freeze([...toolNames]);
    this.toolCallIds = Object.freeze([...toolCallIds]);
  }

  /** The first unknown name. */
  get toolName(): string {
    return this.toolNames[0] ?? '';
  }
}
Object.defineProperty(UnknownToolError.prototype, 'name', {
  value: 'UnknownToolError',
  writable: true,
  configurable: true,
});

/**
 * Normalises any thrown value to an `Error`. An `Error` is returned as is; anything else is wrapped
 * in an `Error` whose `cause` is the original value.
 */
export function toError(thrown: unknown): Error {
  if (thrown instanceof Error) return thrown;
  return new Error(`non-error value thrown: ${describeValue(thrown)}`, { cause: thrown });
}

/** A short, never-throwing description of a value for error messages. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'undefined':
      return 'undefined';
    case 'string':
      return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
    case 'number':
    case 'boolean':
      return String(value);
    case 'bigint':
      return `${value}n`;
    case 'symbol':
      return value.toString();
    case 'function':
      return `function ${value.name || '(anonymous)'}`;
    default: {
      if (Array.isArray(value)) return `array(${value.length})`;
      let ctor = 'object';
      try {
        const proto: unknown = Object.getPrototypeOf(value);
        const name = (proto as { constructor?: { name?: unknown } } | null)?.constructor?.name;
        if (typeof name === 'string' && name !== '' && name !== 'Object') ctor = name;
      } catch {
        // exotic objects (revoked proxies) fall through to 'object'
      }
      return ctor;
    }
  }
}

/**
 * What a bad argument was, for "expected … but received …" messages: primitives with their type
 * (`0 of type number`, `"x" of type string`), objects by constructor (`an object of type Map`).
 */
export function describeReceived(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  switch (typeof value) {
    case 'string':
    case 'number':
    case 'boolean':
    case 'bigint':
    case 'symbol':
      return `${describeValue(value)} of type ${typeof value}`;
    case 'function':
      return `a function (${value.name || 'anonymous'})`;
    default:
      if (Array.isArray(value)) return `an array of length ${value.length}`;
      return `an object of type ${describeValue(value) === 'object' ? 'Object' : describeValue(value)}`;
  }
}

/** `LlamuxError('INVALID_ARGUMENT')` with the given message: the tool layer's error for bad options, tools and calls. */
export function invalidArgument(message: string, cause?: unknown): LlamuxError {
  return new LlamuxError('INVALID_ARGUMENT', message, cause === undefined ? {} : { cause });
}

/** `INVALID_ARGUMENT`: "Expected *subject* to be *expected* but received *value*". */
export function expectedArgument(subject: string, expected: string, value: unknown): LlamuxError {
  return invalidArgument(`Expected ${subject} to be ${expected} but received ${describeReceived(value)}`);
}
