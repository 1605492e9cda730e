import { describe, expect, it } from 'vitest';
import {
  JSON_SCHEMA_FORMATS,
  checkJsonSchema,
  compileJsonSchema,
  defineTool,
  runToolCalls,
  type JsonSchema,
} from '../../src/tools/index.js';
import { call, expectInvalidArgument, rejectionOf, thrownBy } from './helpers.js';

const paths = (schema: JsonSchema, value: unknown): string[] => checkJsonSchema(schema, value).map((i) => i.path.join('.'));

describe('checkJsonSchema()', () => {
  it('resolves $ref to $defs, definitions, anchors and $id inside the schema', () => {
    const schema = {
      type: 'object',
      properties: {
        a: { $ref: '#/$defs/positive' },
        b: { $ref: '#/definitions/name' },
        c: { $ref: '#item' },
        d: { $ref: 'https://example.com/point' },
        e: { type: 'array', items: { $ref: '#/$defs/positive' } },
      },
      $defs: {
        positive: { type: 'integer', minimum: 1 },
        item: { $anchor: 'item', enum: ['x', 'y'] },
        point: { $id: 'https://example.com/point', type: 'object', required: ['x'] },
      },
      definitions: { name: { type: 'string', minLength: 1 } },
    };
    expect(checkJsonSchema(schema, { a: 1, b: 'n', c: 'x', d: { x: 0 }, e: [2, 3] })).toEqual([]);
    expect(checkJsonSchema(schema, { a: 0, b: '', c: 'z', d: {}, e: [1, -1] })).toEqual([
      { path: ['a'], keyword: 'minimum', message: '0 is less than 1' },
      { path: ['b'], keyword: 'minLength', message: 'String is too short (0 < 1)' },
      { path: ['c'], keyword: 'enum', message: 'expected one of ["x","y"]' },
      { path: ['d', 'x'], keyword: 'required', message: 'required property is missing' },
      { path: ['e', 1], keyword: 'minimum', message: '-1 is less than 1' },
    ]);
  });

  it('supports recursive schemas through $ref', () => {
    const tree = { $defs: { node: { type: 'object', properties: { children: { type: 'array', items: { $ref: '#/$defs/node' } } }, additionalProperties: false } }, $ref: '#/$defs/node' };
    expect(checkJsonSchema(tree, { children: [{ children: [] }] })).toEqual([]);
    expect(paths(tree, { children: [{ children: [{ oops: 1 }] }] })).toEqual(['children.0.children.0.oops']);
  });

  it('checks every known format', () => {
    const schema = { type: 'object', properties: Object.fromEntries(['date', 'date-time', 'email', 'uuid', 'ipv4', 'uri'].map((f) => [f, { type: 'string', format: f }])) };
    expect(
      checkJsonSchema(schema, {
        date: '2024-02-29',
        'date-time': '2024-02-29T12:00:00Z',
        email: 'a@example.com',
        uuid: '123e4567-e89b-12d3-a456-426614174000',
        ipv4: '10.0.0.1',
        uri: 'https://example.com/x',
      }),
    ).toEqual([]);
    expect(checkJsonSchema(schema, { date: '2023-02-29', 'date-time': 'noon', email: 'nobody', uuid: 'x', ipv4: '999.1.1.1', uri: 'no scheme' })).toEqual(
      ['date', 'date-time', 'email', 'uuid', 'ipv4', 'uri'].map((f) => ({ path: [f], keyword: 'format', message: `String does not match format "${f}"` })),
    );
    expect(JSON_SCHEMA_FORMATS).toEqual(expect.arrayContaining(['date', 'date-time', 'time', 'duration', 'email', 'hostname', 'ipv4', 'ipv6', 'uri', 'uuid', 'regex']));
  });

  it('checks the conditional and dependent keywords', () => {
    const schema = {
      type: 'object',
      if: { properties: { kind: { const: 'card' } }, required: ['kind'] },
      then: { required: ['number'] },
      else: { required: ['iban'] },
      dependentRequired: { cvv: ['number'] },
      dependentSchemas: { coupon: { properties: { total: { minimum: 10 } } } },
      propertyNames: { pattern: '^[a-z]+$' },
      not: { required: ['forbidden'] },
      unevaluatedProperties: true,
    };
    expect(checkJsonSchema(schema, { kind: 'card', number: '4' })).toEqual([]);
    expect(paths(schema, { kind: 'card' })).toEqual(['number']);
    expect(paths(schema, { kind: 'bank' })).toEqual(['iban']);
    expect(checkJsonSchema(schema, { iban: 'x', cvv: '1' })[0]?.keyword).toBe('dependentRequired');
    expect(paths(schema, { iban: 'x', coupon: 'c', total: 5 })).toEqual(['total']);
    expect(checkJsonSchema(schema, { iban: 'x', Bad: 1 })[0]).toMatchObject({ keyword: 'pattern' });
    expect(checkJsonSchema(schema, { iban: 'x', forbidden: 1 })).toEqual([{ path: [], keyword: 'not', message: 'the value matched "not" schema' }]);
  });

  it('checks arrays: prefixItems, contains, uniqueItems', () => {
    const schema = { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], contains: { const: 'go' }, uniqueItems: true };
    expect(checkJsonSchema(schema, ['go', 1])).toEqual([]);
    expect(checkJsonSchema(schema, [1, 'x', 'x']).map((i) => [i.path.join('.'), i.keyword])).toEqual([
      ['0', 'type'],
      ['1', 'type'],
      ['', 'contains'],
      ['', 'uniqueItems'],
    ]);
  });

  it('uses the draft that $schema names, else 2020-12', () => {
    const draft4 = { $schema: 'http://json-schema.org/draft-04/schema#', type: 'number', maximum: 5, exclusiveMaximum: true };
    expect(compileJsonSchema(draft4).draft).toBe('4');
    expect(paths(draft4, 5)).toEqual(['']);
    expect(paths(draft4, 4)).toEqual([]);
    expect(compileJsonSchema({ $schema: 'http://json-schema.org/draft-07/schema#' }).draft).toBe('7');
    expect(compileJsonSchema({ $schema: 'https://json-schema.org/draft/2019-09/schema' }).draft).toBe('2019-09');
    expect(compileJsonSchema({ type: 'object' }).draft).toBe('2020-12');
  });

  it('treats keywords outside the JSON Schema vocabularies as annotations', () => {
    const schema = { type: 'string', title: 'T', examples: ['x'], 'x-internal': { secret: true }, nullable: true, deprecated: true };
    expect(checkJsonSchema(schema, 'x')).toEqual([]);
    expect(paths(schema, null)).toEqual(['']);
  });

  it('handles boolean schemas and values that are not JSON', () => {
    expect(checkJsonSchema(true, 1)).toEqual([]);
    expect(checkJsonSchema(false, 1)).toEqual([{ path: [], keyword: 'false', message: 'no value is allowed here' }]);
    expect(checkJsonSchema({ properties: { a: false } }, { a: 1 })).toEqual([{ path: ['a'], keyword: 'false', message: 'no value is allowed here' }]);
    expect(checkJsonSchema({ type: 'object', properties: { a: { type: 'number' } } }, { a: undefined })[0]?.message).toMatch(/^the value is not JSON data/);
  });

  it('leaves the caller schema untouched and works on a frozen one', () => {
    const schema = Object.freeze({ type: 'object', properties: Object.freeze({ r: Object.freeze({ $ref: '#/$defs/n' }) }), $defs: Object.freeze({ n: Object.freeze({ type: 'number' }) }) });
    const before = JSON.stringify(schema);
    expect(paths(schema, { r: 'x' })).toEqual(['r']);
    expect(JSON.stringify(schema)).toBe(before);
    expect(Object.getOwnPropertyNames(schema.properties.r)).toEqual(['$ref']);
    expect(compileJsonSchema(schema)).toBe(compileJsonSchema(schema)); // compiled once per schema object
  });

  it('never generates code, so it works where eval and new Function are forbidden', () => {
    const realEval = globalThis.eval;
    const RealFunction = globalThis.Function;
    const forbidden = (): never => {
      throw new EvalError('code generation from strings disallowed');
    };
    globalThis.eval = forbidden as typeof eval;
    globalThis.Function = forbidden as unknown as FunctionConstructor;
    try {
      const schema = { type: 'object', properties: { n: { type: 'integer', multipleOf: 3 }, s: { type: 'string', format: 'date', pattern: '^2' } } };
      expect(paths(schema, { n: 4, s: '1999-01-01' })).toEqual(['n', 's']);
    } finally {
      globalThis.eval = realEval;
      globalThis.Function = RealFunction;
    }
  });
});

describe('compileJsonSchema() refusals', () => {
  const refused: [string, JsonSchema, string | RegExp][] = [
    [
      'a remote $ref',
      { type: 'object', properties: { a: { $ref: 'https://example.com/other.json' } } },
      /^Unsupported JSON Schema keyword "\$ref" in the JSON Schema at \/properties\/a: "https:\/\/example.com\/other.json" does not resolve inside the schema; /,
    ],
    ['a $ref to a missing definition', { $ref: '#/$defs/missing' }, /^Unsupported JSON Schema keyword "\$ref" in the JSON Schema at \/: "#\/\$defs\/missing" does not resolve/],
    ['$dynamicRef', { $defs: { x: { $dynamicRef: '#meta' } } }, 'Unsupported JSON Schema keyword "$dynamicRef" in the JSON Schema at /$defs/x: dynamic references are not supported; use $ref'],
    ['$dynamicAnchor', { $dynamicAnchor: 'meta' }, 'Unsupported JSON Schema keyword "$dynamicAnchor" in the JSON Schema at /: dynamic anchors are not supported; use $anchor'],
    ['a $recursiveRef other than "#"', { $recursiveRef: '#/x' }, /^Unsupported JSON Schema keyword "\$recursiveRef" in the JSON Schema at \/: only "#" is supported/],
    ['an unknown format', { properties: { p: { type: 'string', format: 'phone' } } }, /^Unsupported JSON Schema keyword "format" in the JSON Schema at \/properties\/p: "phone" of type string is not a format llamux can check; known formats: date, /],
    ['an unknown draft', { $schema: 'http://json-schema.org/draft-03/schema#' }, /^Expected \$schema of the JSON Schema to be the URI of JSON Schema draft-04, draft-07, 2019-09 or 2020-12 .* but received "http:\/\/json-schema.org\/draft-03\/schema#" of type string$/],
    ['an unknown type', { items: { type: 'strnig' } }, /^Expected "type" in the JSON Schema at \/items to be one of array, boolean, integer, null, number, object, string or a list of them but received "strnig" of type string$/],
    ['an invalid pattern', { pattern: '(' }, /^Expected "pattern" in the JSON Schema at \/ to be a valid regular expression \(u flag\) but received "\(": /],
    ['an invalid patternProperties key', { patternProperties: { '[': {} } }, /^Expected the patternProperties key in the JSON Schema at \/ to be a valid regular expression/],
    ['a non-array required', { required: 'a' }, 'Expected "required" in the JSON Schema at / to be an array of strings but received "a" of type string'],
    ['a non-number size keyword', { properties: { s: { maxLength: '3' } } }, 'Expected "maxLength" in the JSON Schema at /properties/s to be a number but received "3" of type string'],
    ['a subschema that is not a schema', { properties: { a: 5 } }, 'Expected the JSON Schema at /properties/a to be an object or a boolean but received 5 of type number'],
    ['a schema that is not JSON', { default: () => 1 } as unknown as JsonSchema, /^Expected the JSON Schema to be JSON data but it cannot be copied: /],
  ];
  for (const [what, schema, message] of refused) {
    it(`refuses ${what} with INVALID_ARGUMENT`, () => {
      expectInvalidArgument(thrownBy(() => compileJsonSchema(schema)), message);
      expectInvalidArgument(thrownBy(() => checkJsonSchema(schema, {})), message);
    });
  }

  it('refuses such a schema when the tool is defined, naming the tool', () => {
    expectInvalidArgument(
      thrownBy(() => defineTool({ name: 'lookup', parameters: { type: 'object', properties: { id: { $ref: 'ids.json' } } } })),
      /^Unsupported JSON Schema keyword "\$ref" in the parameters of tool "lookup" at \/properties\/id: "ids.json" does not resolve inside the schema/,
    );
  });

  it('refuses a hand-written tool with such a schema at run entry, before anything runs', async () => {
    let ran = false;
    const tool = {
      name: 'when',
      description: '',
      parameters: { type: 'object', properties: { at: { type: 'string', format: 'timestamp' } } },
      handler: (_a: unknown) => ((ran = true), 1),
      timeoutMs: undefined,
      timeoutMode: undefined,
      concurrencyKey: undefined,
      isolate: undefined,
    };
    expectInvalidArgument(
      await rejectionOf(runToolCalls([call('a', 'when', { at: 'now' })], [tool])),
      /^Unsupported JSON Schema keyword "format" in the parameters of tool "when" at \/properties\/at: "timestamp" of type string is not a format/,
    );
    expect(ran).toBe(false);
  });

  it('answers bad arguments of a JSON Schema tool with invalid_arguments naming each path', async () => {
    const tool = defineTool({
      name: 'book',
      parameters: {
        type: 'object',
        properties: { when: { type: 'string', format: 'date' }, guests: { type: 'array', items: { $ref: '#/$defs/guest' } } },
        required: ['when'],
        $defs: { guest: { type: 'object', properties: { age: { type: 'integer', minimum: 0 } }, required: ['age'] } },
      },
      handler: (a) => a,
    });
    const { messages } = await runToolCalls([call('a', 'book', { when: 'tomorrow', guests: [{ age: 3 }, { age: -1 }, {}] })], [tool]);
    expect(messages[0]).toMatchObject({
      isError: true,
      content:
        'invalid_arguments: invalid arguments for tool "book": when: String does not match format "date"; guests.1.age: -1 is less than 0; ' +
        'guests.2.age: required property is missing',
    });
  });
});
