import { describe, expect, it } from 'vitest';
import { LlamuxError, isLlamuxError } from '../../src/index.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ERROR_CODES, abortError, fromNative, toErrorCode } from '../../src/errors.js';
import { GgufFormatError } from '../../src/gguf/errors.js';
import { projectRoot } from '../helpers/paths.js';

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

describe('error codes: one list in TypeScript, one in C++', () => {
  it('ERROR_CODES matches native/engine/errors.h LLAMUX_ERROR_CODES, in order', () => {
    const header = readFileSync(join(projectRoot, 'native', 'engine', 'errors.h'), 'utf8');
    const native = [...header.matchAll(/^\s*X\(\w+, "([A-Z_]+)"\)/gm)].map((m) => m[1]);
    expect(native).toEqual([...ERROR_CODES]);
  });

  it('maps unknown native codes to INTERNAL and keeps known ones', () => {
    for (const code of ERROR_CODES) expect(toErrorCode(code)).toBe(code);
    expect(toErrorCode('NOPE')).toBe('INTERNAL');
    expect(toErrorCode(undefined)).toBe('INTERNAL');
    expect(toErrorCode(7)).toBe('INTERNAL');
  });

  it('GgufFormatError is a LlamuxError with MODEL_INVALID', () => {
    const e = new GgufFormatError('bad magic', { offset: 0 });
    expect(e).toBeInstanceOf(LlamuxError);
    expect(isLlamuxError(e, 'MODEL_INVALID')).toBe(true);
    expect(e.name).toBe('GgufFormatError');
    expect(e.offset).toBe(0);
  });
});
