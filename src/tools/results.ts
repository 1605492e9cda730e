/**
 * What a tool handler may return.
 *
 * A handler returns either a plain value (treated as success) or one of four tagged results built
 * with `ok`, `toolError`, `askUser` and `halt`. Tagged results are plain objects with a string tag
 * under the key `'~toolResult'`, so they survive `structuredClone` and the isolate worker boundary.
 */
import { ToolError, describeValue } from './errors.js';

/** The key that marks a tagged handler result. */
export const TOOL_RESULT_TAG = '~toolResult';

/** Halt reasons owned by the orchestrator; a handler that uses one gets `invalid_return`. */
export const RESERVED_HALT_REASONS = [
  'ask_user',
  'max_turns',
  'halt_when',
  'tool_error',
  'cancelled',
  'completed',
] as const;
export type ReservedHaltReason = (typeof RESERVED_HALT_REASONS)[number];

export interface OkResult<T = unknown> {
  readonly [TOOL_RESULT_TAG]: 'ok';
  readonly value: T;
}
/** A failure the handler reports itself; `error` passes through the executor unchanged. */
export interface ErrorResult<E = unknown> {
  readonly [TOOL_RESULT_TAG]: 'error';
  readonly error: E;
}
export interface AskUserResult {
  readonly [TOOL_RESULT_TAG]: 'ask_user';
  readonly question: string;
  readonly options?: Readonly<Record<string, unknown>>;
}
export interface HaltResult<T = unknown> {
  readonly [TOOL_RESULT_TAG]: 'halt';
  readonly reason: string;
  readonly result: T;
}
/** The four tagged results; together with a plain success value they are the five legal returns. */
export type ToolResult = OkResult | ErrorResult | AskUserResult | HaltResult;
export type ToolResultKind = ToolResult[typeof TOOL_RESULT_TAG];

/** Success with a value for the encoder. `ok()` with no value encodes as JSON `null`. */
export function ok<T>(value: T): OkResult<T>;
export function ok(): OkResult<undefined>;
export function ok<T>(value?: T): OkResult<T | undefined> {
  return { [TOOL_RESULT_TAG]: 'ok', value };
}

/** A handler-reported failure. It reaches `onToolError` unchanged. */
export function toolError<E>(error: E): ErrorResult<E> {
  return { [TOOL_RESULT_TAG]: 'error', error };
}

/** Suspend the loop and surface a question to the user, optionally with caller-defined options. */
export function askUser(question: string, options?: Record<string, unknown>): AskUserResult {
  return options === undefined
    ? { [TOOL_RESULT_TAG]: 'ask_user', question }
    : { [TOOL_RESULT_TAG]: 'ask_user', question, options };
}

/** Halt the loop with a handler-chosen reason (not a reserved one) and a terminal result. */
export function halt<T>(reason: string, result: T): HaltResult<T> {
  return { [TOOL_RESULT_TAG]: 'halt', reason, result };
}

/** True when `value` carries the result tag at all, valid or not. */
export function hasResultTag(value: unknown): value is { readonly [TOOL_RESULT_TAG]: unknown } {
  return typeof value === 'object' && value !== null && Object.hasOwn(value, TOOL_RESULT_TAG);
}

/** True for a well-formed tagged result (see `interpretHandlerReturn` for the rules). */
export function isToolResult(value: unknown): value is ToolResult {
  return hasResultTag(value) && checkTagged(value) === undefined;
}

function isPlainRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Returns why a tagged object is malformed, or undefined when it is well formed. */
function checkTagged(value: { readonly [TOOL_RESULT_TAG]: unknown }): string | undefined {
  const v = value as Record<string, unknown>;
  const tag = v[TOOL_RESULT_TAG];
  switch (tag) {
    case 'ok':
      return Object.hasOwn(v, 'value') ? undefined : 'an ok result needs a "value" key';
    case 'error':
      return Object.hasOwn(v, 'error') ? undefined : 'an error result needs an "error" key';
    case 'ask_user':
      if (typeof v.question !== 'string') return 'an ask_user result needs a string "question"';
      if (v.options !== undefined && !isPlainRecord(v.options)) return 'ask_user "options" must be an object';
      return undefined;
    case 'halt':
      if (typeof v.reason !== 'string' || v.reason === '') return 'a halt result needs a non-empty string "reason"';
      return Object.hasOwn(v, 'result') ? undefined : 'a halt result needs a "result" key';
    default:
      return `unknown result tag ${describeValue(tag)}`;
  }
}

/**
 * Turns whatever a handler (or executor) returned into a `ToolResult`.
 *
 * - A well-formed tagged result is returned as is.
 * - `halt()` with a reserved reason becomes an `invalid_return` error whose metadata carries
 *   `reservedHaltReason`.
 * - `undefined`, a function, a symbol, or a tagged object with an unknown tag or missing fields
 *   becomes an `invalid_return` error whose `cause` is the offending value.
 * - Any other value (including `null`, strings, arrays, class instances, BigInt) is success:
 *   `ok(value)`. Whether it can be encoded is the encoder's business (`encoding_failed`).
 */
export function interpretHandlerReturn(value: unknown, where: { toolCallId?: string; toolName?: string } = {}): ToolResult {
  if (hasResultTag(value)) {
    const problem = checkTagged(value);
    if (problem !== undefined) {
      return toolError(new ToolError('invalid_return', `handler returned a malformed result: ${problem}`, { ...where, cause: value }));
    }
    const result = value as ToolResult;
    if (result[TOOL_RESULT_TAG] === 'halt' && (RESERVED_HALT_REASONS as readonly string[]).includes(result.reason)) {
      return toolError(
        new ToolError('invalid_return', `handler used the reserved halt reason ${JSON.stringify(result.reason)}`, {
          ...where,
          cause: value,
          metadata: { reservedHaltReason: result.reason },
        }),
      );
    }
    return result;
  }
  if (value === undefined || typeof value === 'function' || typeof value === 'symbol') {
    return toolError(
      new ToolError('invalid_return', `handler returned ${describeValue(value)}; return a value or ok(value)`, {
        ...where,
        cause: value,
      }),
    );
  }
  return ok(value);
}
