import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ToolCallAccumulator, createToolCallAccumulator, parsePartialJson } from '../../src/tools/index.js';

/** Splits a string at random cut points. */
function splitAt(text: string, cuts: number[]): string[] {
  const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
  const out: string[] = [];
  let last = 0;
  for (const p of points) {
    out.push(text.slice(last, p));
    last = p;
  }
  out.push(text.slice(last));
  return out;
}

const jsonObject = fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 }).map(
  (o) => JSON.parse(JSON.stringify(o)) as Record<string, unknown>,
);

describe('ToolCallAccumulator', () => {
  describe('OpenAI fragments', () => {
    it('joins split arguments by index', () => {
      const acc = new ToolCallAccumulator();
      acc.feed([{ index: 0, id: 'call_a', type: 'function', function: { name: 'search', arguments: '{"q' } }]);
      acc.feed([{ index: 0, function: { arguments: 'uery":"hi"}' } }]);
      expect(acc.finalize()).toEqual([{ id: 'call_a', name: 'search', arguments: { query: 'hi' } }]);
    });

    it('orders calls by index and accepts one partial call outside an array', () => {
      const acc = createToolCallAccumulator();
      acc.feed([{ index: 1, id: 'b', function: { name: 'two', arguments: '' } }]);
      acc.feed({ index: 0, id: 'a', function: { name: 'one', arguments: '{}' } });
      acc.feed([{ index: 1, function: { arguments: '{"x":1}' } }]);
      expect(acc.finalize()).toEqual([
        { id: 'a', name: 'one', arguments: {} },
        { id: 'b', name: 'two', arguments: { x: 1 } },
      ]);
    });

    it('treats empty arguments as {} and tags malformed or non-object arguments', () => {
      const acc = new ToolCallAccumulator();
      acc.feed([{ index: 0, id: 'a', function: { name: 'noargs' } }]);
      acc.feed([{ index: 1, id: 'b', function: { name: 'bad', arguments: '{"x": ' } }]);
      acc.feed([{ index: 2, id: 'c', function: { name: 'arr', arguments: '[1,2]' } }]);
      expect(acc.finalize()).toEqual([
        { id: 'a', name: 'noargs', arguments: {} },
        { id: 'b', name: 'bad', arguments: {}, _invalid_arguments: '{"x": ' },
        { id: 'c', name: 'arr', arguments: {}, _invalid_arguments: '[1,2]' },
      ]);
    });

    it('accepts arguments that arrive already decoded', () => {
      const acc = new ToolCallAccumulator();
      acc.feed([{ index: 0, id: 'a', function: { name: 'n', arguments: { k: 1 } } }]);
      expect(acc.finalize()).toEqual([{ id: 'a', name: 'n', arguments: { k: 1 } }]);
    });
  });

  describe('Anthropic fragments', () => {
    it('joins partial_json between start and stop', () => {
      const acc = new ToolCallAccumulator();
      acc.feed({ id: 'tu_a', name: 'search', _index: 0, _phase: 'start' });
      acc.feed({ _index: 0, _phase: 'partial', partial_json: '{"q' });
      acc.feed({ _index: 0, _phase: 'partial', partial_json: 'uery":"hi"}' });
      acc.feed({ _index: 0, _phase: 'stop' });
      expect(acc.finalize()).toEqual([{ id: 'tu_a', name: 'search', arguments: { query: 'hi' } }]);
    });

    it('reads the raw content_block events too', () => {
      const acc = new ToolCallAccumulator();
      acc.feed({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
      acc.feed({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Let me check.' } });
      acc.feed({ type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'tu_1', name: 'w', input: {} } });
      acc.feed({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"city":' } });
      acc.feed({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '"Paris"}' } });
      acc.feed({ type: 'content_block_stop', index: 1 });
      expect(acc.finalize()).toEqual([{ id: 'tu_1', name: 'w', arguments: { city: 'Paris' } }]);
    });

    it('gives a tool without partial_json its start input or {}', () => {
      const acc = new ToolCallAccumulator();
      acc.feed({ id: 'x', name: 'ping', _index: 0, _phase: 'start' });
      acc.feed({ _index: 0, _phase: 'stop' });
      expect(acc.finalize()).toEqual([{ id: 'x', name: 'ping', arguments: {} }]);
    });
  });

  describe('Gemini fragments', () => {
    it('keeps complete calls in arrival order', () => {
      const acc = new ToolCallAccumulator();
      acc.feed({ name: 'search', arguments: { query: 'hi' } });
      acc.feed({ functionCall: { name: 'lookup', args: { id: 3 } } });
      acc.feed({ functionCall: { name: 'now' } });
      expect(acc.finalize()).toEqual([
        { id: null, name: 'search', arguments: { query: 'hi' } },
        { id: null, name: 'lookup', arguments: { id: 3 } },
        { id: null, name: 'now', arguments: {} },
      ]);
    });
  });

  describe('llamux engine events', () => {
    it('reads the Hermes/Qwen body of the end event', () => {
      const acc = new ToolCallAccumulator();
      acc.feed({ type: 'toolCallDelta', index: 0, text: '{"name": "get_weather", ' });
      acc.feed({ type: 'toolCallDelta', index: 0, text: '"arguments": {"city": "Paris"}}' });
      acc.feed({ type: 'toolCallEnd', index: 0, text: '{"name": "get_weather", "arguments": {"city": "Paris"}}', tokens: new Int32Array([1, 2]) });
      expect(acc.finalize()).toEqual([{ id: null, name: 'get_weather', arguments: { city: 'Paris' } }]);
    });

    it('accepts "parameters" and arguments given as a JSON string', () => {
      const acc = new ToolCallAccumulator();
      acc.feed({ type: 'toolCallEnd', index: 1, text: '{"name":"b","arguments":"{\\"x\\":2}"}', tokens: new Int32Array() });
      acc.feed({ type: 'toolCallEnd', index: 0, text: '{"name":"a","parameters":{"x":1}}', tokens: new Int32Array() });
      expect(acc.finalize()).toEqual([
        { id: null, name: 'a', arguments: { x: 1 } },
        { id: null, name: 'b', arguments: { x: 2 } },
      ]);
    });

    it('keeps a truncated call flagged with its raw text and its name when it can be read', () => {
      const acc = new ToolCallAccumulator();
      const text = '{"name": "write_file", "arguments": {"path": "a.txt", "content": "hel';
      acc.feed({ type: 'toolCallEnd', index: 0, text, tokens: new Int32Array(), truncated: true });
      acc.feed({ type: 'toolCallDelta', index: 1, text: '{"name": "never_ended"' });
      expect(acc.finalize()).toEqual([
        { id: null, name: 'write_file', arguments: {}, _invalid_arguments: text, _truncated: true },
        { id: null, name: 'never_ended', arguments: {}, _invalid_arguments: '{"name": "never_ended"', _truncated: true },
      ]);
    });

    it('tags a malformed body', () => {
      const acc = new ToolCallAccumulator();
      acc.feed({ type: 'toolCallEnd', index: 0, text: '<tool_call>{oops', tokens: new Int32Array() });
      acc.feed({ type: 'toolCallEnd', index: 1, text: '{"arguments": {}}', tokens: new Int32Array() });
      acc.feed({ type: 'toolCallEnd', index: 2, text: '{"name": "n", "arguments": 5}', tokens: new Int32Array() });
      expect(acc.finalize()).toEqual([
        { id: null, name: '', arguments: {}, _invalid_arguments: '<tool_call>{oops' },
        { id: null, name: '', arguments: {}, _invalid_arguments: '{"arguments": {}}' },
        { id: null, name: 'n', arguments: {}, _invalid_arguments: '{"name": "n", "arguments": 5}' },
      ]);
    });
  });

  it('orders OpenAI, then Anthropic, then Gemini, then llamux calls', () => {
    const acc = new ToolCallAccumulator();
    acc.feed({ type: 'toolCallEnd', index: 0, text: '{"name":"l","arguments":{}}', tokens: new Int32Array() });
    acc.feed({ name: 'g', arguments: {} });
    acc.feed({ id: 'an', name: 'a', _index: 0, _phase: 'start' });
    acc.feed([{ index: 0, id: 'oa', function: { name: 'o', arguments: '{}' } }]);
    expect(acc.finalize().map((c) => c.name)).toEqual(['o', 'a', 'g', 'l']);
    expect(acc.size).toBe(4);
  });

  it('mints ids with idFactory for calls that have none', () => {
    const acc = new ToolCallAccumulator({ idFactory: (source, position) => `${source}_${position}` });
    acc.feed([{ index: 0, id: 'keep', function: { name: 'o', arguments: '{}' } }]);
    acc.feed({ name: 'g', arguments: {} });
    acc.feed({ type: 'toolCallEnd', index: 0, text: '{"name":"l","arguments":{}}', tokens: new Int32Array() });
    expect(acc.finalize().map((c) => c.id)).toEqual(['keep', 'gemini_1', 'llamux_2']);
  });

  it('drops unrecognised fragments silently', () => {
    const acc = new ToolCallAccumulator();
    for (const junk of [null, undefined, 42, 'text', [], [1, null], { foo: 1 }, { index: -1, function: {} }, { _phase: 'start' }, { type: 'toolCallEnd' }, { name: 'x', arguments: 'str' }]) {
      acc.feed(junk);
    }
    expect(acc.finalize()).toEqual([]);
  });

  it('never throws on hostile input', () => {
    const acc = new ToolCallAccumulator();
    const hostile = new Proxy(
      {},
      {
        get() {
          throw new Error('trap');
        },
        has() {
          throw new Error('trap');
        },
      },
    );
    expect(() => acc.feed(hostile)).not.toThrow();
    expect(() => acc.feed([hostile])).not.toThrow();
    expect(acc.finalize()).toEqual([]);
  });

  it('can finalize again after more fragments', () => {
    const acc = new ToolCallAccumulator();
    acc.feed([{ index: 0, id: 'a', function: { name: 'n', arguments: '{"a":' } }]);
    expect(acc.finalize()[0]).toHaveProperty('_invalid_arguments');
    acc.feed([{ index: 0, function: { arguments: '1}' } }]);
    expect(acc.finalize()).toEqual([{ id: 'a', name: 'n', arguments: { a: 1 } }]);
  });

  describe('snapshot()', () => {
    it('shows partial arguments while streaming', () => {
      const acc = new ToolCallAccumulator();
      acc.feed([{ index: 0, id: 'a', function: { name: 'write', arguments: '{"path": "a.txt", "content": "Hel' } }]);
      acc.feed({ id: 't', name: 'search', _index: 0, _phase: 'start' });
      acc.feed({ _index: 0, _phase: 'partial', partial_json: '{"q": [1, 2, tr' });
      acc.feed({ type: 'toolCallDelta', index: 0, text: '{"name": "ls", "arguments": {"dir": "/tm' });
      expect(acc.snapshot()).toEqual([
        { source: 'openai', id: 'a', name: 'write', arguments: { path: 'a.txt', content: 'Hel' }, complete: false },
        { source: 'anthropic', id: 't', name: 'search', arguments: { q: [1, 2] }, complete: false },
        { source: 'llamux', id: null, name: 'ls', arguments: { dir: '/tm' }, complete: false },
      ]);
      acc.feed([{ index: 0, function: { arguments: 'lo"}' } }]);
      acc.feed({ _index: 0, _phase: 'stop' });
      expect(acc.snapshot().slice(0, 2)).toEqual([
        { source: 'openai', id: 'a', name: 'write', arguments: { path: 'a.txt', content: 'Hello' }, complete: false },
        { source: 'anthropic', id: 't', name: 'search', arguments: { q: [1, 2] }, complete: true },
      ]);
      expect(acc.finalize()[0]).toEqual({ id: 'a', name: 'write', arguments: { path: 'a.txt', content: 'Hello' } });
    });

    it('does not change what finalize() returns', () => {
      const acc = new ToolCallAccumulator();
      acc.feed([{ index: 0, id: 'a', function: { name: 'n', arguments: '{"a"' } }]);
      acc.snapshot();
      acc.feed([{ index: 0, function: { arguments: ': 1' } }]);
      acc.snapshot();
      acc.feed([{ index: 0, function: { arguments: '}' } }]);
      expect(acc.snapshot()[0]!.arguments).toEqual({ a: 1 });
      expect(acc.finalize()).toEqual([{ id: 'a', name: 'n', arguments: { a: 1 } }]);
    });
  });

  describe('properties', () => {
    it('gives the same calls for any split of the OpenAI arguments', () => {
      fc.assert(
        fc.property(fc.array(jsonObject, { minLength: 1, maxLength: 3 }), fc.array(fc.nat(), { maxLength: 20 }), (objects, cuts) => {
          const whole = new ToolCallAccumulator();
          const split = new ToolCallAccumulator();
          objects.forEach((o, index) => {
            const text = JSON.stringify(o);
            whole.feed([{ index, id: `c${index}`, function: { name: `t${index}`, arguments: text } }]);
            split.feed([{ index, id: `c${index}`, function: { name: `t${index}` } }]);
            for (const piece of splitAt(text, cuts)) split.feed([{ index, function: { arguments: piece } }]);
          });
          expect(split.finalize()).toEqual(whole.finalize());
          expect(whole.finalize().map((c) => c.arguments)).toEqual(objects);
        }),
      );
    });

    it('gives the same calls for any split of the Anthropic partial_json', () => {
      fc.assert(
        fc.property(jsonObject, fc.array(fc.nat(), { maxLength: 20 }), (object, cuts) => {
          const text = JSON.stringify(object);
          const acc = new ToolCallAccumulator();
          acc.feed({ id: 'tu', name: 'n', _index: 0, _phase: 'start' });
          for (const piece of splitAt(text, cuts)) acc.feed({ _index: 0, _phase: 'partial', partial_json: piece });
          acc.feed({ _index: 0, _phase: 'stop' });
          expect(acc.finalize()).toEqual([{ id: 'tu', name: 'n', arguments: object }]);
        }),
      );
    });

    it('names the llamux call from any split of the deltas and reads the body of the end event', () => {
      fc.assert(
        fc.property(jsonObject, fc.array(fc.nat(), { maxLength: 20 }), (object, cuts) => {
          const body = JSON.stringify({ name: 'tool', arguments: object });
          const acc = new ToolCallAccumulator();
          for (const piece of splitAt(body, cuts)) acc.feed({ type: 'toolCallDelta', index: 0, text: piece });
          const snap = acc.snapshot()[0]!;
          expect(snap.name).toBe('tool');
          acc.feed({ type: 'toolCallEnd', index: 0, text: body, tokens: new Int32Array() });
          expect(acc.finalize()).toEqual([{ id: null, name: 'tool', arguments: object }]);
        }),
      );
    });

    it('never throws on malformed fragments and arguments', () => {
      fc.assert(
        fc.property(
          fc.array(
            fc.oneof(
              fc.anything(),
              fc.record({ index: fc.integer({ min: -2, max: 3 }), function: fc.record({ name: fc.string(), arguments: fc.string() }) }),
              fc.record({ _index: fc.nat(3), _phase: fc.constantFrom('start', 'partial', 'stop', 'x'), partial_json: fc.string() }),
              fc.record({ type: fc.constantFrom('toolCallDelta', 'toolCallEnd'), index: fc.nat(3), text: fc.string(), truncated: fc.boolean() }),
            ),
            { maxLength: 30 },
          ),
          (fragments) => {
            const acc = new ToolCallAccumulator();
            fragments.forEach((f, i) => {
              acc.feed(f);
              if (i % 3 === 0) acc.snapshot();
            });
            const calls = acc.finalize();
            for (const call of calls) {
              expect(typeof call.name).toBe('string');
              expect(typeof call.arguments).toBe('object');
            }
          },
        ),
      );
    });
  });
});

describe('parsePartialJson()', () => {
  it('closes what is open and drops what is unfinished', () => {
    expect(parsePartialJson('{"city": "Par')).toEqual({ city: 'Par' });
    expect(parsePartialJson('{"a": [1, 2, tr')).toEqual({ a: [1, 2] });
    expect(parsePartialJson('{"a": 1, "b')).toEqual({ a: 1 });
    expect(parsePartialJson('{"a": 1, "b":')).toEqual({ a: 1 });
    expect(parsePartialJson('{"s": "x\\')).toEqual({ s: 'x' });
    expect(parsePartialJson('{"s": "\\u00e9\\u00')).toEqual({ s: 'é' });
    expect(parsePartialJson('[{"a": {"b": [')).toEqual([{ a: { b: [] } }]);
    expect(parsePartialJson('-')).toBeUndefined();
    expect(parsePartialJson('')).toBeUndefined();
    expect(parsePartialJson('{"a": 1} trailing')).toEqual({ a: 1 });
    expect(parsePartialJson('{"a": nope}')).toEqual({});
    expect(parsePartialJson('{"__proto__": {"polluted": true}}')).toEqual(JSON.parse('{"__proto__": {"polluted": true}}'));
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('stops at a nesting depth of 1000 instead of overflowing the stack', () => {
    expect(() => parsePartialJson('['.repeat(100_000))).not.toThrow();
  });

  it('equals JSON.parse on complete JSON', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = JSON.stringify(value);
        expect(parsePartialJson(text)).toEqual(JSON.parse(text));
        expect(parsePartialJson(JSON.stringify(value, null, 2))).toEqual(JSON.parse(text));
      }),
    );
  });

  it('never throws on any prefix or any string', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.nat(), fc.string(), (value, cut, junk) => {
        const text = JSON.stringify(value);
        expect(() => parsePartialJson(text.slice(0, cut % (text.length + 1)))).not.toThrow();
        expect(() => parsePartialJson(junk)).not.toThrow();
      }),
    );
  });
});
