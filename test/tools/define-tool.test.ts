import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import * as zm from 'zod/mini';
import {
  checkJsonSchema,
  defineTool,
  describeToolError,
  jsonEncoder,
  toAnthropicTool,
  toOpenAITool,
  toolParametersJsonSchema,
  toolToJsonSchema,
  validateToolArguments,
  ToolError,
  type ToolCall,
} from '../../src/tools/index.js';
import { expectInvalidArgument, thrownBy } from './helpers.js';

const c: ToolCall = { id: 'c', name: 't', arguments: {} };

describe('defineTool()', () => {
  it('returns a frozen tool with defaults filled in', () => {
    const tool = defineTool({ name: 'echo', handler: (a) => a });
    expect(tool).toEqual({
      name: 'echo',
      description: '',
      parameters: undefined,
      handler: tool.handler,
      timeoutMs: undefined,
      timeoutMode: undefined,
      concurrencyKey: undefined,
      isolate: undefined,
    });
    expect(Object.isFrozen(tool)).toBe(true);
  });

  it('types the handler arguments from a zod schema', () => {
    const tool = defineTool({
      name: 'add',
      parameters: z.object({ a: z.number(), b: z.number() }),
      handler: ({ a, b }) => a + b,
    });
    expect(tool.handler?.({ a: 1, b: 2 }, undefined as never)).toBe(3);
  });

  it('accepts a manual-mode tool without a handler', () => {
    expect(defineTool({ name: 'manual', description: 'the caller runs it' }).handler).toBeUndefined();
  });

  it('refuses a handler whose arity is not 1 or 2', () => {
    expectInvalidArgument(
      thrownBy(() => defineTool({ name: 'zero', handler: () => 1 })),
      'Expected the handler of tool "zero" to take (args) or (args, ctx) but received a function that declares 0 parameters ' +
        '(default values and rest parameters do not count; write (_args) => … for a tool without arguments)',
    );
    expectInvalidArgument(
      thrownBy(() => defineTool({ name: 'three', handler: ((_a: unknown, _b: unknown, _c: unknown) => 1) as never })),
      /declares 3 parameters/,
    );
    expectInvalidArgument(thrownBy(() => defineTool({ name: 'rest', handler: ((..._args: unknown[]) => 1) as never })), /declares 0 parameters/);
    expectInvalidArgument(
      thrownBy(() => defineTool({ name: 'str', handler: 'nope' as never })),
      'Expected the handler of tool "str" to be a function but received "nope" of type string',
    );
  });

  it('refuses bad fields and unknown keys with INVALID_ARGUMENT', () => {
    const cases: [unknown, string | RegExp][] = [
      [null, 'Expected the tool definition to be an object but received null'],
      [{ name: '' }, 'Expected the tool definition.name to be a non-empty string but received "" of type string'],
      [{ name: 't', timeoutMs: 0 }, 'Expected the timeoutMs of tool "t" to be a positive number or Infinity but received 0 of type number'],
      [{ name: 't', timeoutMs: Number.NaN }, 'Expected the timeoutMs of tool "t" to be a positive number or Infinity but received NaN of type number'],
      [{ name: 't', timeoutMode: 'kill' }, `Expected the timeoutMode of tool "t" to be one of 'cooperative', 'abandon', 'isolate' but received "kill" of type string`],
      [{ name: 't', concurrencyKey: '' }, 'Expected the concurrencyKey of tool "t" to be a non-empty string but received "" of type string'],
      [{ name: 't', description: 5 }, 'Expected the description of tool "t" to be a string but received 5 of type number'],
      [{ name: 't', parameters: 'x' }, 'Expected the parameters of tool "t" to be a zod schema or a JSON Schema object but received "x" of type string'],
      [{ name: 't', isolate: { module: 5 } }, /^Expected isolate.module of tool "t" to be a non-empty string .* but received 5 of type number$/],
      [{ name: 't', isolate: { module: 'data:text/javascript,', export: '' } }, 'Expected isolate.export of tool "t" to be a non-empty string but received "" of type string'],
      [{ name: 't', isolate: { module: 'data:text/javascript,' }, timeoutMode: 'abandon' }, /isolate module and always runs isolated, to be 'isolate' or undefined but received "abandon"/],
      [{ name: 'h', handlr: (_a: unknown) => 1 }, /^Unknown tool definition key "handlr"; expected one of name, /],
    ];
    for (const [definition, message] of cases) expectInvalidArgument(thrownBy(() => defineTool(definition as never)), message);
    expect(defineTool({ name: 't', timeoutMs: Infinity }).timeoutMs).toBe(Infinity);
  });

  it('refuses isolate mode for a handler function: isolate takes a module and an export only', () => {
    expectInvalidArgument(
      thrownBy(() => defineTool({ name: 'iso', timeoutMode: 'isolate', handler: (_a: unknown) => 1 })),
      /^Expected tool "iso" to have an isolate module \(\{ module, export \}\) for timeoutMode 'isolate' but received a function \(handler\); /,
    );
    expectInvalidArgument(
      thrownBy(() => defineTool({ name: 'both', handler: (_a: unknown) => 1, isolate: { module: 'data:text/javascript,export default (a) => a' } })),
      'Expected tool "both" to have either a handler or an isolate module but received both; an isolated tool runs only its module export',
    );
    const tool = defineTool({ name: 'm', isolate: { module: 'data:text/javascript,export default (a) => a' } });
    expect(tool.timeoutMode).toBe('isolate');
    expect(tool.handler).toBeUndefined();
  });
});

describe('toolToJsonSchema()', () => {
  const weather = defineTool({
    name: 'get_weather',
    description: 'Current weather',
    parameters: z.object({ city: z.string().describe('City name'), units: z.enum(['c', 'f']).default('c') }),
    handler: (a) => a,
  });
  const parameters = {
    type: 'object',
    properties: {
      city: { type: 'string', description: 'City name' },
      units: { type: 'string', enum: ['c', 'f'], default: 'c' },
    },
    required: ['city'],
  };

  it('exports a zod schema as the input-side JSON Schema without $schema', () => {
    expect(toolToJsonSchema(weather)).toEqual({ name: 'get_weather', description: 'Current weather', parameters });
  });

  it('exports the OpenAI function shape and the Anthropic tool shape', () => {
    expect(toOpenAITool(weather)).toEqual({ type: 'function', function: { name: 'get_weather', description: 'Current weather', parameters } });
    expect(toAnthropicTool(weather)).toEqual({ name: 'get_weather', description: 'Current weather', input_schema: parameters });
  });

  it('passes a JSON Schema through and gives an open object without a schema', () => {
    const json = { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] };
    expect(toolParametersJsonSchema(defineTool({ name: 's', parameters: json }))).toEqual(json);
    expect(toolParametersJsonSchema(defineTool({ name: 'n' }))).toEqual({ type: 'object', properties: {} });
  });

  it('returns a copy the caller may change', () => {
    const first = toolParametersJsonSchema(weather);
    (first.properties as Record<string, unknown>).city = 'changed';
    expect(toolParametersJsonSchema(weather)).toEqual(parameters);
  });

  it('converts zod mini schemas too', () => {
    const tool = defineTool({ name: 'm', parameters: zm.object({ a: zm.string() }), handler: (a) => a.a });
    expect(toolParametersJsonSchema(tool)).toMatchObject({ type: 'object', properties: { a: { type: 'string' } }, required: ['a'] });
  });
});

describe('validateToolArguments()', () => {
  it('returns the zod output or an invalid_arguments error with the issues', async () => {
    const tool = defineTool({ name: 't', parameters: z.object({ n: z.number().int() }), handler: (a) => a });
    expect(await validateToolArguments(tool, c, { n: 2 })).toEqual({ ok: true, value: { n: 2 } });
    const bad = await validateToolArguments(tool, c, { n: 1.5 });
    expect(bad.ok).toBe(false);
    const error = (bad as { error: ToolError }).error;
    expect(error.reason).toBe('invalid_arguments');
    expect(error.metadata.issues).toEqual([{ path: ['n'], message: 'Invalid input: expected int, received number' }]);
  });

  it('runs async zod refinements', async () => {
    const tool = defineTool({
      name: 't',
      parameters: z.object({ id: z.string().refine(async (v) => v.startsWith('u_'), 'must start with u_') }),
      handler: (a) => a,
    });
    expect((await validateToolArguments(tool, c, { id: 'u_1' })).ok).toBe(true);
    expect((await validateToolArguments(tool, c, { id: 'x' })).ok).toBe(false);
  });

  it('checks JSON Schema tools and names the path of each bad value', async () => {
    const tool = defineTool({
      name: 't',
      parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'], additionalProperties: false },
    });
    expect(await validateToolArguments(tool, c, { q: 'x' })).toEqual({ ok: true, value: { q: 'x' } });
    const bad = await validateToolArguments(tool, c, { extra: 1 });
    expect((bad as { error: ToolError }).error.message).toBe(
      'invalid arguments for tool "t": q: required property is missing; extra: unrecognised property',
    );
  });

  it('accepts anything when there is no schema', async () => {
    expect(await validateToolArguments(defineTool({ name: 't' }), c, [1])).toEqual({ ok: true, value: [1] });
  });
});

describe('checkJsonSchema()', () => {
  it('checks the keywords tool schemas use, one issue per bad value', () => {
    const schema = {
      type: 'object',
      properties: {
        s: { type: 'string', minLength: 2, maxLength: 3, pattern: '^a' },
        n: { type: 'number', minimum: 0, maximum: 10, exclusiveMaximum: 10 },
        i: { type: 'integer' },
        e: { enum: ['x', 'y'] },
        k: { const: 5 },
        a: { type: 'array', items: { type: 'boolean' }, minItems: 1, maxItems: 2 },
        u: { anyOf: [{ type: 'string' }, { type: 'null' }] },
        o: { oneOf: [{ type: 'number' }, { type: 'integer' }] },
        m: { type: 'object', additionalProperties: { type: 'number' } },
        t: { type: ['string', 'null'] },
      },
    };
    expect(checkJsonSchema(schema, { s: 'ab', n: 5, i: 3, e: 'x', k: 5, a: [true], u: null, o: 1.5, m: { x: 1 }, t: null })).toEqual([]);
    const issues = checkJsonSchema(schema, { s: 'b', n: 10, i: 1.5, e: 'z', k: 4, a: [1, true, false], u: 1, o: 2, m: { x: 'no' }, t: 3 });
    expect(issues.map((i) => i.path.join('.'))).toEqual(['s', 's', 'n', 'i', 'e', 'k', 'a', 'a.0', 'u', 'o', 'm.x', 't']);
  });
});

describe('jsonEncoder', () => {
  it('sends strings as they are and JSON for everything else', () => {
    expect(jsonEncoder.encode('hi', c)).toBe('hi');
    expect(jsonEncoder.encode({ a: [1] }, c)).toBe('{"a":[1]}');
    expect(jsonEncoder.encode(undefined, c)).toBe('null');
    expect(() => jsonEncoder.encode(1n, c)).toThrow(TypeError);
    expect(() => jsonEncoder.encode(() => 1, c)).toThrow(/JSON cannot represent/);
  });

  it('describes failures as text', () => {
    expect(describeToolError('plain')).toBe('plain');
    expect(describeToolError(new ToolError('timeout', 'slow'))).toBe('timeout: slow');
    expect(describeToolError(new RangeError('r'))).toBe('RangeError: r');
    expect(describeToolError({ code: 1 })).toBe('{"code":1}');
    expect(describeToolError(undefined)).toBe('undefined');
    expect(describeToolError(2n)).toBe('2');
  });
});
