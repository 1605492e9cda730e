import { describe, expect, it } from 'vitest';
import { LlamuxError, isLlamuxError } from '../../src/index.js';
import { abortError, fromNative } from '../../src/errors.js';

describe('LlamuxError', () => {
  it('carries a stable code, its message and the name LlamuxError', () => {
    const e = new LlamuxError('MODEL_NOT_FOUND', 'No model file at "x"');
    expect(e).toBeInstanceOf(Error);
    expect(e.code).toBe('MODEL_NOT_FOUND');
    expect(e.message).toBe('No model file at "x"');
    expect(e.name).toBe('LlamuxError');
    expect(isLlamuxError(e, 'MODEL_NOT_FOUND')).toBe(true);
    expect(isLlamuxError(e, 'DISPOSED')).toBe(false);
    expect(isLlamuxError(new Error('x'))).toBe(false);
  });

  it('names aborts AbortError and keeps the signal reason as cause', () => {
    const ac = new AbortController();
    ac.abort(new Error('user left'));
    const e = abortError(ac.signal, 'The generation');
    expect(e.code).toBe('ABORTED');
    expect(e.name).toBe('AbortError');
    expect((e.cause as Error).message).toBe('user left');
    expect(e.message).toBe('The generation was aborted');
  });

  it('maps native { code, message } errors and keeps the caller stack', () => {
    const stack = new Error('here').stack;
    const e = fromNative(Object.assign(new Error('boom'), { code: 'QUEUE_FULL' }), stack);
    expect(e.code).toBe('QUEUE_FULL');
    expect(e.message).toBe('boom');
    expect(e.stack).toContain('errors.test.ts');
    expect(fromNative(new Error('odd')).code).toBe('INTERNAL');
    expect(fromNative(Object.assign(new Error('x'), { code: 'NOT_A_CODE' })).code).toBe('INTERNAL');
  });
});
