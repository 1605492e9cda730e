import { describe, expect, it } from 'vitest';
import {
  RESERVED_HALT_REASONS,
  TOOL_RESULT_TAG,
  ToolError,
  UnknownToolError,
  askUser,
  halt,
  interpretHandlerReturn,
  isToolError,
  isToolResult,
  ok,
  toolError,
} from '../../src/tools/index.js';

describe('result constructors', () => {
  it('build plain tagged objects', () => {
    expect(ok(1)).toEqual({ '~toolResult': 'ok', value: 1 });
    expect(ok()).toEqual({ '~toolResult': 'ok', value: undefined });
    expect(toolError('bad')).toEqual({ '~toolResult': 'error', error: 'bad' });
    expect(askUser('q')).toEqual({ '~toolResult': 'ask_user', question: 'q' });
    expect(askUser('q', { a: 1 })).toEqual({ '~toolResult': 'ask_user', question: 'q', options: { a: 1 } });
    expect(halt('r', 2)).toEqual({ '~toolResult': 'halt', reason: 'r', result: 2 });
  });

  it('survive structuredClone', () => {
    for (const r of [ok({ a: 1 }), toolError('e'), askUser('q', { o: 1 }), halt('r', [1])]) {
      expect(isToolResult(structuredClone(r))).toBe(true);
    }
  });
});

describe('isToolResult()', () => {
  it('is true only for well-formed tagged results', () => {
    expect(isToolResult(ok(1))).toBe(true);
    expect(isToolResult({ [TOOL_RESULT_TAG]: 'ok' })).toBe(false);
    expect(isToolResult({ [TOOL_RESULT_TAG]: 'nope', value: 1 })).toBe(false);
    expect(isToolResult({ value: 1 })).toBe(false);
    expect(isToolResult(null)).toBe(false);
  });
});

describe('interpretHandlerReturn()', () => {
  it('treats any value that is not tagged as success, except undefined, functions and symbols', () => {
    for (const v of [null, 0, '', 'x', [], {}, { type: 'ok' }, new Date(0), 5n, false]) {
      expect(interpretHandlerReturn(v)).toEqual(ok(v));
    }
    for (const v of [undefined, () => 1, Symbol('s')]) {
      const r = interpretHandlerReturn(v);
      expect(r[TOOL_RESULT_TAG] === 'error' && isToolError(r.error, 'invalid_return')).toBe(true);
    }
  });

  it('records the reserved reason for every reserved halt', () => {
    expect(RESERVED_HALT_REASONS).toEqual(['ask_user', 'max_turns', 'halt_when', 'tool_error', 'cancelled', 'completed']);
    for (const reason of RESERVED_HALT_REASONS) {
      const r = interpretHandlerReturn(halt(reason, 1), { toolCallId: 'c', toolName: 't' });
      const error = (r as { error: ToolError }).error;
      expect(error.reason).toBe('invalid_return');
      expect(error.metadata).toEqual({ reservedHaltReason: reason });
      expect(error.toolCallId).toBe('c');
      expect(error.toolName).toBe('t');
    }
  });
});

describe('ToolError', () => {
  it('carries reason, ids, metadata and cause, with name on the prototype', () => {
    const cause = new Error('inner');
    const e = new ToolError('timeout', 'too slow', { cause, toolCallId: 'c', toolName: 't', metadata: { timeoutMs: 5 } });
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('ToolError');
    expect(Object.hasOwn(e, 'name')).toBe(false);
    expect(e.message).toBe('too slow');
    expect(e.reason).toBe('timeout');
    expect(e.cause).toBe(cause);
    expect(e.toolCallId).toBe('c');
    expect(e.toolName).toBe('t');
    expect(e.metadata).toEqual({ timeoutMs: 5 });
    expect(Object.isFrozen(e.metadata)).toBe(true);
    expect(new ToolError('not_found').message).toBe('tool call failed: not_found');
    expect('cause' in new ToolError('not_found')).toBe(false);
  });

  it('is recognised by isToolError, optionally by reason', () => {
    const e = new ToolError('handler_exit');
    expect(isToolError(e)).toBe(true);
    expect(isToolError(e, 'handler_exit')).toBe(true);
    expect(isToolError(e, 'timeout')).toBe(false);
    expect(isToolError(new Error('x'))).toBe(false);
  });
});

describe('UnknownToolError', () => {
  it('lists the unknown names and call ids', () => {
    const e = new UnknownToolError(['a'], ['c1']);
    expect(e.name).toBe('UnknownToolError');
    expect(e.message).toBe('unknown tool "a": no tool call ran');
    expect(e.reason).toBe('unknown_tool');
    expect(e.toolName).toBe('a');
    expect(e.toolNames).toEqual(['a']);
    expect(e.toolCallIds).toEqual(['c1']);
  });
});
