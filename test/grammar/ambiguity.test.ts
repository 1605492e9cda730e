// Issue 30: tool schemas whose grammar would be ambiguous (branches that open the same array or
// object key, nested or recursive) are refused naming the JSON pointer; schemas whose ambiguity
// ends inside a value are compiled as before. Malformed $ref encodings are INVALID_ARGUMENT.
import { describe, expect, it } from 'vitest';
import { checkToolSchemas, compileToolGrammar } from '../../src/grammar/index.js';

const tool = (parameters: Record<string, unknown>) => [{ name: 'f', parameters }];
const refused = (parameters: Record<string, unknown>): string => {
  try {
    checkToolSchemas(tool(parameters));
  } catch (e) {
    expect(e).toMatchObject({ code: 'INVALID_ARGUMENT' });
    // compileToolGrammar refuses it the same way.
    expect(() => compileToolGrammar({ tools: tool(parameters), choice: 'required', family: 'hermes', start: [1], end: [2], endIsEog: false, parallel: true })).toThrow((e as Error).message);
    return (e as Error).message;
  }
  throw new Error('not refused');
};
const served = (parameters: Record<string, unknown>): void => {
  expect(() => checkToolSchemas(tool(parameters))).not.toThrow();
  expect(compileToolGrammar({ tools: tool(parameters), choice: 'required', family: 'hermes', start: [1], end: [2], endIsEog: false, parallel: true }).gbnf).toContain('llamux-tool-span ::=');
};

function nested(depth: number, branch: (next: unknown) => unknown[]): Record<string, unknown> {
  const defs: Record<string, unknown> = { [`l${depth}`]: { type: 'integer' } };
  for (let d = depth - 1; d >= 0; d--) defs[`l${d}`] = { anyOf: branch({ $ref: `#/$defs/l${d + 1}` }) };
  return { type: 'object', properties: { x: { $ref: '#/$defs/l0' } }, required: ['x'], $defs: defs };
}

describe('ambiguous schemas', () => {
  it('refuses array branches nested past 16 parses, naming the pointer', () => {
    const msg = refused(nested(12, (next) => [{ type: 'array', items: next }, { type: 'array', items: { type: 'array', items: next } }]));
    expect(msg).toMatch(/Tool "f": the parameters schema at #\/\$defs\/l4\/anyOf cannot be compiled to a grammar: ambiguous: 2 branches/);
    // 4 levels (16 parses) are served.
    served(nested(4, (next) => [{ type: 'array', items: next }, { type: 'array', items: { type: 'array', items: next } }]));
  });

  it('refuses objects that start with the same key, and free-form values beside containers', () => {
    expect(refused(nested(6, (next) => [{ type: 'object', properties: { a: next }, required: ['a'] }, { type: 'object', properties: { a: next, b: { type: 'string' } }, required: ['a'] }]))).toMatch(/ambiguous/);
    expect(refused(nested(6, (next) => [{ type: 'array', items: next }, {}]))).toMatch(/ambiguous/);
    expect(refused(nested(6, (next) => [{ type: 'array', items: next }, { oneOf: [{ type: 'array', items: { type: 'string' } }] }]))).toMatch(/ambiguous/);
  });

  it('refuses recursion through an ambiguous choice', () => {
    const msg = refused({ type: 'object', properties: { t: { $ref: '#/$defs/t' } }, $defs: { t: { anyOf: [{ type: 'array', items: { $ref: '#/$defs/t' } }, { type: 'array', items: { type: 'integer' } }] } } });
    expect(msg).toMatch(/#\/\$defs\/t.*\/\$ref.*ambiguous recursion/);
  });

  it('serves choices whose ambiguity ends inside a value', () => {
    served({ type: 'object', properties: { a: { anyOf: [{ type: 'string', enum: ['auto'] }, { type: 'string' }] }, n: { type: ['integer', 'number'] } } });
    served({ type: 'object', properties: { t: { $ref: '#/$defs/n' } }, $defs: { n: { anyOf: [{ type: 'object', properties: { leaf: { type: 'integer' } }, required: ['leaf'] }, { type: 'object', properties: { kids: { type: 'array', items: { $ref: '#/$defs/n' } } }, required: ['kids'] }] } } });
    served({ type: 'object', properties: { v: { anyOf: [{ type: 'array', items: { type: 'integer' } }, { type: 'integer' }, { type: 'null' }] } } });
  });

  it('answers INVALID_ARGUMENT to a $ref with malformed %-encoding', () => {
    expect(refused({ type: 'object', properties: { a: { $ref: '#/$defs/%E0%A4%A' } }, $defs: {} })).toMatch(/at \/properties\/a\/\$ref .*malformed %-encoding/);
    served({ type: 'object', properties: { a: { $ref: '#/$defs/caf%C3%A9' } }, $defs: { 'café': { type: 'string' } } });
  });
});
