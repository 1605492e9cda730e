/**
 * Tool result encoders: turn a handler's success value (or a failure) into the string content of a
 * tool-role message.
 */
import { ToolError, describeValue } from './errors.js';
import type { ToolCall } from './tool.js';

export interface ToolResultEncoder {
  /**
   * Encodes a success value. Throwing, or returning something other than a string, makes the call
   * fail with `encoding_failed` (routed through `onToolError`).
   */
  encode(value: unknown, call: ToolCall): string;
  /** Encodes a failure for the model. Optional; `describeToolError` is used when absent or when it throws. */
  encodeError?(error: unknown, call: ToolCall): string;
}

/**
 * Model-readable text for a failure: a string as is, an `Error`'s message (a `ToolError` is prefixed
 * with its reason), anything else as JSON when it can be, else `String(value)`.
 */
export function describeToolError(error: unknown): string {
  if (typeof error === 'string') return error;
  if (error instanceof ToolError) return `${error.reason}: ${error.message}`;
  if (error instanceof Error) return error.message === '' ? error.name : `${error.name}: ${error.message}`;
  try {
    const json = JSON.stringify(error);
    if (typeof json === 'string') return json;
  } catch {
    // fall through
  }
  try {
    return String(error);
  } catch {
    return describeValue(error);
  }
}

/**
 * The default encoder. Strings are sent as they are (models read plain text best); every other
 * value is `JSON.stringify`'d, with `undefined` (from `ok()`) as `null`. BigInt, cycles and
 * values JSON cannot represent at the top level throw, which becomes `encoding_failed`.
 */
export const jsonEncoder: ToolResultEncoder = Object.freeze({
  encode(value: unknown): string {
    if (typeof value === 'string') return value;
    if (value === undefined) return 'null';
    const json: unknown = JSON.stringify(value);
    if (typeof json !== 'string') throw new TypeError(`JSON cannot represent ${describeValue(value)}`);
    return json;
  },
  encodeError(error: unknown): string {
    return describeToolError(error);
  },
});

/** Runs an encoder's `encode`, turning failures into a `ToolError('encoding_failed')`. */
export function encodeSuccess(
  encoder: ToolResultEncoder,
  value: unknown,
  call: ToolCall,
): { ok: true; content: string } | { ok: false; error: ToolError } {
  try {
    const content: unknown = encoder.encode(value, call);
    if (typeof content === 'string') return { ok: true, content };
    return {
      ok: false,
      error: new ToolError('encoding_failed', `the encoder returned ${describeValue(content)} instead of a string`, {
        toolCallId: call.id,
        toolName: call.name,
        metadata: { value },
      }),
    };
  } catch (err) {
    return {
      ok: false,
      error: new ToolError('encoding_failed', `the result of tool ${JSON.stringify(call.name)} could not be encoded: ${(err as Error)?.message ?? describeValue(err)}`, {
        cause: err,
        toolCallId: call.id,
        toolName: call.name,
        metadata: { value },
      }),
    };
  }
}

/** Runs an encoder's `encodeError`, falling back to `describeToolError`. Never throws. */
export function encodeFailure(encoder: ToolResultEncoder, error: unknown, call: ToolCall): string {
  if (typeof encoder.encodeError === 'function') {
    try {
      const text: unknown = encoder.encodeError(error, call);
      if (typeof text === 'string') return text;
    } catch {
      // fall back below
    }
  }
  return describeToolError(error);
}
