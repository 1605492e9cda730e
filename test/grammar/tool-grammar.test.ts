// The JSON-Schema → GBNF tool grammar (src/grammar), checked through llama.cpp's own grammar
// engine: each text is fed byte by byte (the scripted vocabulary's <0xNN> tokens) between the
// marker tokens, and must be accepted whole and complete, or refused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native/binding.js';
import { compileToolGrammar, LlamuxError, loadModel, type Model, type ToolGrammar, type ToolGrammarRequest } from '../../src/index.js';
import { testModel, tokenId } from '../helpers/models.js';

let model: Model;
let START: number;
let END: number;
beforeAll(async () => {
  model = await loadModel(testModel('grammar-call').path);
  START = tokenId('grammar-call', '<tool_call>');
  END = tokenId('grammar-call', '</tool_call>');
});
afterAll(async () => {
  await model.dispose();
});

const bytes = (text: string): number[] => Array.from(Buffer.from(text, 'utf8'), (b) => 3 + b);

function grammar(tools: ToolGrammarRequest['tools'], more: Partial<ToolGrammarRequest> = {}): ToolGrammar {
  return compileToolGrammar({ tools, choice: 'auto', family: 'hermes', start: [START], end: [END], endIsEog: false, parallel: true, ...more });
}

/** Whether the grammar takes `<tool_call>` + body + `</tool_call>` whole and may end there. */
function accepts(g: ToolGrammar, body: string, endIsEog = false): boolean {
  const tokens = Int32Array.from([START, ...bytes(body), ...(endIsEog ? [] : [END])]);
  const r = native.testing.grammarAccepts(model.nativeHandle(), g.gbnf, g.root, tokens);
  expect(r.parsed).toBe(true);
  return r.accepted === tokens.length && r.complete;
}

const call = (name: string, args: string): string => `{"name": "${name}", "arguments": ${args}}`;

function schemaCase(parameters: Record<string, unknown>, valid: string[], invalid: string[]): void {
  const g = grammar([{ name: 't', parameters }]);
  for (const v of valid) expect(accepts(g, call('t', v)), `accepts ${v}`).toBe(true);
  for (const v of invalid) expect(accepts(g, call('t', v)), `refuses ${v}`).toBe(false);
}

describe('compileToolGrammar: call syntax per family', () => {
  const tools = [{ name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];

  it('hermes / gemma4 / custom markers: {"name", "arguments"} with an optional newline around it', () => {
    for (const family of ['hermes', 'gemma4', 'json'] as const) {
      const g = grammar(tools, { family });
      expect(accepts(g, '{"name": "get_weather", "arguments": {"city": "Rome"}}')).toBe(true);
      expect(accepts(g, '\n{"name":"get_weather","arguments":{"city":"Rome"}}\n')).toBe(true);
      expect(accepts(g, '{"name": "get_weather", "parameters": {"city": "Rome"}}')).toBe(false);
      expect(accepts(g, '{"name": "get_time", "arguments": {"city": "Rome"}}')).toBe(false);
      expect(accepts(g, '{"name": "get_weather", "arguments": {"city": "Rome"}} trailing')).toBe(false);
    }
  });

  it('llama3: "parameters", and the grammar ends before an end-of-generation end marker', () => {
    const g = grammar(tools, { family: 'llama3', endIsEog: true });
    expect(g.gbnf).not.toContain(`<[${END}]>`);
    expect(accepts(g, '{"name": "get_weather", "parameters": {"city": "Rome"}}', true)).toBe(true);
    expect(accepts(g, '{"name": "get_weather", "arguments": {"city": "Rome"}}', true)).toBe(false);
  });

  it('mistral: a list of calls; one element only without parallel calls', () => {
    const one = '[{"name": "get_weather", "arguments": {"city": "Rome"}}]';
    const two = '[{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]';
    const g = grammar(tools, { family: 'mistral', endIsEog: true });
    expect(accepts(g, one, true)).toBe(true);
    expect(accepts(g, two, true)).toBe(true);
    const single = grammar(tools, { family: 'mistral', endIsEog: true, parallel: false });
    expect(accepts(single, one, true)).toBe(true);
    expect(accepts(single, two, true)).toBe(false);
  });

  it('the markers are token terminals: the start marker written as text is refused', () => {
    const g = grammar(tools);
    const tokens = Int32Array.from([...bytes('<tool_call>'), ...bytes('{"name": "get_weather", "arguments": {"city": "Rome"}}'), END]);
    expect(native.testing.grammarAccepts(model.nativeHandle(), g.gbnf, g.root, tokens).accepted).toBe(0);
  });

  it('a named choice allows only that tool; required allows any of them', () => {
    const two = [...tools, { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string' } }, required: ['tz'] } }];
    const named = grammar(two, { choice: { name: 'get_time' } });
    expect(accepts(named, '{"name": "get_time", "arguments": {"tz": "CET"}}')).toBe(true);
    expect(accepts(named, '{"name": "get_weather", "arguments": {"city": "Rome"}}')).toBe(false);
    const required = grammar(two, { choice: 'required' });
    expect(accepts(required, '{"name": "get_time", "arguments": {"tz": "CET"}}')).toBe(true);
    expect(accepts(required, '{"name": "get_weather", "arguments": {"city": "Rome"}}')).toBe(true);
  });

  it('a caller body grammar goes between the marker tokens', () => {
    const g = grammar([], { body: 'root ::= "call:" [a-z]+' });
    expect(accepts(g, 'call:abc')).toBe(true);
    expect(accepts(g, 'call:ABC')).toBe(false);
  });

  it('is cached per request shape', () => {
    expect(grammar(tools)).toBe(grammar(tools));
    expect(grammar(tools, { parallel: false })).not.toBe(grammar(tools));
  });
});

describe('compileToolGrammar: the JSON Schema subset', () => {
  it('primitive types: string (escapes, UTF-8), integer, number, boolean, null', () => {
    schemaCase(
      { type: 'object', properties: { s: { type: 'string' }, i: { type: 'integer' }, n: { type: 'number' }, b: { type: 'boolean' }, z: { type: 'null' } }, required: ['s', 'i', 'n', 'b', 'z'] },
      ['{"s": "a\\"b\\\\c\\n\\u00e9 é 東", "i": -12, "n": -1.5e3, "b": true, "z": null}', '{"s":"","i":0,"n":2,"b":false,"z":null}'],
      ['{"s": 1, "i": -12, "n": 1, "b": true, "z": null}', '{"s": "x", "i": 1.5, "n": 1, "b": true, "z": null}', '{"s": "x", "i": 01, "n": 1, "b": true, "z": null}', '{"s": "x", "i": 1, "n": 1, "b": "true", "z": null}', '{"s": "a\nb", "i": 1, "n": 1, "b": true, "z": null}'],
    );
  });

  it('required and optional properties, in declared order; no undeclared keys', () => {
    schemaCase(
      { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' }, c: { type: 'integer' } }, required: ['b'] },
      ['{"b": 1}', '{"a": 1, "b": 2}', '{"b": 2, "c": 3}', '{"a": 1, "b": 2, "c": 3}'],
      ['{}', '{"a": 1}', '{"b": 2, "a": 1}', '{"b": 1, "d": 2}', '{"a": 1, "c": 3}'],
    );
    schemaCase({ type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } }, ['{}', '{"a": 1}', '{"b": 2}', '{"a": 1, "b": 2}'], ['{"a": 1,}', '{,"b": 2}']);
  });

  it('enum, const, type lists, nullable', () => {
    schemaCase(
      { type: 'object', properties: { u: { enum: ['c', 'f', 3] }, k: { const: { x: [1] } }, t: { type: ['string', 'null'] }, n: { type: 'integer', nullable: true } }, required: ['u', 'k', 't', 'n'] },
      ['{"u": "c", "k": {"x":[1]}, "t": null, "n": null}', '{"u": 3, "k": {"x":[1]}, "t": "s", "n": 4}'],
      ['{"u": "k", "k": {"x":[1]}, "t": null, "n": null}', '{"u": "c", "k": {"x":[2]}, "t": null, "n": null}', '{"u": "c", "k": {"x":[1]}, "t": 1, "n": null}'],
    );
  });

  it('nested objects and arrays with minItems / maxItems, strings with minLength / maxLength', () => {
    schemaCase(
      {
        type: 'object',
        properties: {
          tags: { type: 'array', items: { type: 'string', minLength: 1, maxLength: 3 }, minItems: 1, maxItems: 2 },
          box: { type: 'object', properties: { w: { type: 'number' }, inner: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } }, required: ['inner'] },
        },
        required: ['tags', 'box'],
      },
      ['{"tags": ["a"], "box": {"inner": {"ok": true}}}', '{"tags": ["abc", "d"], "box": {"w": 1, "inner": {"ok": false}}}'],
      ['{"tags": [], "box": {"inner": {"ok": true}}}', '{"tags": ["a", "b", "c"], "box": {"inner": {"ok": true}}}', '{"tags": ["abcd"], "box": {"inner": {"ok": true}}}', '{"tags": [""], "box": {"inner": {"ok": true}}}', '{"tags": ["a"], "box": {"inner": {}}}'],
    );
  });

  it('anyOf / oneOf, allOf (merged), local $ref with recursion, free-form objects', () => {
    schemaCase(
      {
        type: 'object',
        $defs: { node: { type: 'object', properties: { v: { type: 'integer' }, kids: { type: 'array', items: { $ref: '#/$defs/node' } } }, required: ['v'] } },
        properties: {
          x: { anyOf: [{ type: 'integer' }, { type: 'string', enum: ['auto'] }] },
          tree: { $ref: '#/$defs/node' },
          meta: { type: 'object', additionalProperties: { type: 'integer' } },
          both: { allOf: [{ type: 'object', properties: { p: { type: 'integer' } }, required: ['p'] }, { properties: { q: { type: 'string' } }, required: ['q'] }] },
        },
        required: ['x', 'tree', 'meta', 'both'],
      },
      ['{"x": 5, "tree": {"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]}, "meta": {"a": 1, "b": 2}, "both": {"p": 1, "q": "s"}}', '{"x": "auto", "tree": {"v": 1}, "meta": {}, "both": {"p": 1, "q": ""}}'],
      ['{"x": "manual", "tree": {"v": 1}, "meta": {}, "both": {"p": 1, "q": ""}}', '{"x": 5, "tree": {"kids": []}, "meta": {}, "both": {"p": 1, "q": ""}}', '{"x": 5, "tree": {"v": 1}, "meta": {"a": "s"}, "both": {"p": 1, "q": ""}}', '{"x": 5, "tree": {"v": 1}, "meta": {}, "both": {"p": 1}}'],
    );
  });

  it('empty and true schemas take any JSON value; an absent parameters schema takes {} only', () => {
    schemaCase({ type: 'object', properties: { any: {} }, required: ['any'] }, ['{"any": [1, {"a": null}, "s", true]}', '{"any": -0.5}'], ['{"any": undefined}']);
    const g = grammar([{ name: 'ping' }]);
    expect(accepts(g, call('ping', '{}'))).toBe(true);
    expect(accepts(g, call('ping', '{"a": 1}'))).toBe(false);
  });

  it('reports what it does not enforce (relaxed), by tool and JSON pointer', () => {
    const g = grammar([
      { name: 'r', parameters: { type: 'object', properties: { s: { type: 'string', pattern: '^a', format: 'email' }, n: { type: 'integer', minimum: 1 }, o: { oneOf: [{ type: 'integer' }, { type: 'string' }] } } } },
    ]);
    expect(g.relaxed).toEqual([
      'r: /properties/s: pattern (not enforced)',
      'r: /properties/s: format (not enforced)',
      'r: /properties/n: minimum (not enforced)',
      'r: /properties/o/oneOf: oneOf (compiled as anyOf: exclusivity is not enforced)',
    ]);
    // Relaxed means "allowed": a value the keyword would refuse still passes the grammar.
    expect(accepts(g, call('r', '{"s": "zzz", "n": -4}'))).toBe(true);
  });

  it('refuses unsatisfiable or unusable schemas with INVALID_ARGUMENT naming the tool and the path', () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ type: 'object', properties: { a: { type: 'string', enum: [1] } }, required: ['a'] }, /\/properties\/a.*no enum value/],
      [{ type: 'object', properties: { a: false }, required: ['a'] }, /required property "a" can have no value/],
      [{ type: 'object', properties: { a: { type: 'string', minLength: 3, maxLength: 2 } } }, /minLength 3 exceeds maxLength 2/],
      [{ type: 'object', properties: { a: { type: 'array', items: false, minItems: 1 } } }, /minItems needs items/],
      [{ type: 'object', required: ['b'], additionalProperties: false }, /"b" is not allowed/],
      [{ type: 'object', properties: { a: { type: [] } } }, /type lists no type/],
      [{ type: 'object', properties: { a: { anyOf: [false, { enum: [] }] } } }, /enum/],
      [{ type: 'object', properties: { a: { $ref: 'http://x/y.json' } } }, /only local references/],
      [{ type: 'object', properties: { a: { $ref: '#/$defs/missing' } } }, /does not resolve/],
      [{ type: 'array' }, /must describe an object/],
      [{ type: 'object', properties: { a: { type: 'date' } } }, /unknown type/],
    ];
    for (const [parameters, message] of cases) {
      let err: unknown;
      try {
        grammar([{ name: 'bad', parameters }]);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(parameters)).toBeInstanceOf(LlamuxError);
      expect((err as LlamuxError).code).toBe('INVALID_ARGUMENT');
      expect((err as LlamuxError).message).toMatch(/^Tool "bad"/);
      expect((err as LlamuxError).message).toMatch(message);
    }
  });
});
