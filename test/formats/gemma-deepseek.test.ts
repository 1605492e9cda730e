// Gemma 4 native calls (`call:NAME{…}`) and DeepSeek V3.1+ calls (`NAME<｜tool▁sep｜>{…}`):
// detection, grammars, parsing; Gemma on the zoo's gemma4 model (its real vocabulary and
// template; random weights, so only grammar-forced output is known).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate, parseToolCallSpan } from '../../src/chat/index.js';
import { ToolCallAccumulator } from '../../src/chat/accumulator.js';
import { gemmaArgsToJson } from '../../src/chat/xml-calls.js';
import { compileToolGrammar, loadModel, type Context, type Model } from '../../src/index.js';
import { zooGreedyChain } from '../../src/gguf/index.js';
import { zooModels } from '../helpers/zoo.js';

const TOOLS = [{ name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];

describe('Gemma 4 native call syntax', () => {
  let model: Model;
  let ctx: Context;
  beforeAll(async () => {
    const zoo = await zooModels(['gemma4']);
    model = await loadModel(zoo.gemma4.path);
    ctx = await model.createContext({ contextSize: 2048, sequences: 1, threads: 1 });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('is chosen from the template (call:), with the thought-channel reasoning markers', () => {
    expect(ctx.markers?.preset).toBe('gemma4-native');
    expect(ctx.reasoningMarkers?.preset).toBe('gemma4');
  });

  it('toolChoice required: the grammar forces call:get_weather{…} in Gemma syntax, parsed to JSON arguments', async () => {
    const t = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '<bos>', eosToken: '<eos>' });
    const prompt = t.render([{ role: 'user', content: 'Weather in Paris?' }], { tools: TOOLS });
    const r = await ctx.generate({ prompt, parseSpecial: true, temperature: 0, tools: TOOLS, toolChoice: 'required', parallelToolCalls: false, maxTokens: 120 }).result;
    const span = r.toolCalls[0] ?? r.truncatedToolCall;
    expect(span?.text.startsWith('call:get_weather{')).toBe(true);
    if (r.toolCalls.length === 1) {
      const [call] = parseToolCallSpan(r.toolCalls[0]!.text);
      expect(call!.name).toBe('get_weather');
      expect(call!.invalidArguments).toBeUndefined();
      expect(model.detokenize(r.toolCalls[0]!.tokens, { special: true })).toBe(`<|tool_call>${r.toolCalls[0]!.text}<tool_call|>`);
    }
  });

  it("the grammar follows the schema in Gemma syntax: declared keys in order, enums as quoted literals, integers bare", async () => {
    const tools = [
      {
        name: 'get_weather',
        parameters: {
          type: 'object',
          properties: { city: { type: 'string', enum: ['Paris', 'Lyon'] }, days: { type: 'integer', enum: [1, 2, 3] }, unit: { type: 'string', enum: ['c', 'f'] } },
          required: ['city', 'days'],
          additionalProperties: false,
        },
      },
    ];
    const t = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '<bos>', eosToken: '<eos>' });
    for (const q of ['Weather in Paris?', 'And in Lyon, for two days?']) {
      const prompt = t.render([{ role: 'user', content: q }], { tools });
      const r = await ctx.generate({ prompt, parseSpecial: true, temperature: 0, tools, toolChoice: 'required', parallelToolCalls: false, maxTokens: 120 }).result;
      expect(r.toolCalls).toHaveLength(1);
      const text = r.toolCalls[0]!.text;
      expect(text).toMatch(/^call:get_weather\{city:<\|"\|>(Paris|Lyon)<\|"\|>,days:[123](,unit:<\|"\|>[cf]<\|"\|>)?\}$/);
      const [call] = parseToolCallSpan(text);
      expect(call!.invalidArguments).toBeUndefined();
      expect(['Paris', 'Lyon']).toContain(call!.arguments.city);
      expect([1, 2, 3]).toContain(call!.arguments.days);
    }
  });

  it('optional keys never leave a stray comma; a key-less schema admits only {}', () => {
    const g = compileToolGrammar({
      tools: [
        { name: 'a', parameters: { type: 'object', properties: { x: { type: 'integer' }, y: { type: 'boolean' } } } },
        { name: 'b', parameters: { type: 'object', properties: {}, additionalProperties: false } },
      ],
      choice: 'auto',
      family: 'gemma4-native',
      start: [1],
      end: [2],
      endIsEog: false,
      parallel: false,
    });
    // x? then y?, each behind a comma only after a key was written
    expect(g.gbnf).toMatch(/t0-gemma-h0 ::= t0-gemma-x t0-gemma-t1 \| t0-gemma-h1/);
    expect(g.gbnf).toMatch(/t0-gemma-t1 ::= \("," t0-gemma-y\)\?/);
    expect(g.gbnf).toMatch(/t0-gemma-obj ::= "\{" t0-gemma-h0\? "\}"/);
    expect(g.gbnf).toMatch(/t1-call ::= "call:b" gemma-empty/);
  });

  it('the thought channel is reasoning: an opened channel starts inside, a budget forces <channel|>', async () => {
    const d = (await zooModels(['gemma4'])).gemma4;
    const t = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '<bos>', eosToken: '<eos>' });
    const prompt = model.tokenize(`${t.render([{ role: 'user', content: 'hi' }])}<|channel>thought`, { addSpecial: false, parseSpecial: true });
    const end = Array.from(ctx.reasoningMarkers!.end);
    const r = await ctx.generate({ prompt, temperature: 0, reasoningBudget: 3, maxTokens: 8, emitTokenIds: true }).result;
    const chain = zooGreedyChain(d.successors, prompt.at(-1)!, 3);
    expect(Array.from(r.reasoning!.tokens)).toEqual([...chain, ...end]);
    expect(r.text).toBe(model.detokenize(Int32Array.from(zooGreedyChain(d.successors, end.at(-1)!, 8 - 3 - end.length))));
  });

  it('parses Gemma values: quoted strings, numbers, booleans, nested objects and arrays', () => {
    expect(gemmaArgsToJson('{city:<|"|>Paris, FR<|"|>,days:3,ok:true,opt:{a:[1,<|"|>x<|"|>]}}')).toBe('{"city":"Paris, FR","days":3,"ok":true,"opt":{"a":[1,"x"]}}');
    expect(parseToolCallSpan('call:get_weather{city:<|"|>Paris<|"|>}')).toEqual([{ name: 'get_weather', arguments: { city: 'Paris' } }]);
    expect(parseToolCallSpan('call:get_weather{city:<|"|>Par')[0]!.invalidArguments).toBeDefined();
    const acc = new ToolCallAccumulator();
    acc.feed({ type: 'toolCallEnd', index: 0, text: 'call:get_weather{city:<|"|>Paris<|"|>}' });
    expect(acc.finalize()).toEqual([{ id: null, name: 'get_weather', arguments: { city: 'Paris' } }]);
  });
});

describe('DeepSeek V3.1+ call syntax', () => {
  it('parses NAME<｜tool▁sep｜>{…}; a truncated body is invalid', () => {
    expect(parseToolCallSpan('get_weather<｜tool▁sep｜>{"city":"Paris"}')).toEqual([{ name: 'get_weather', arguments: { city: 'Paris' } }]);
    expect(parseToolCallSpan('get_weather<｜tool▁sep｜>{"city":')[0]!.invalidArguments).toBeDefined();
    const acc = new ToolCallAccumulator();
    acc.feed({ type: 'toolCallDelta', index: 0, text: 'get_weather<｜tool▁sep｜>{"city":"Pa' });
    expect(acc.snapshot()[0]).toMatchObject({ name: 'get_weather', arguments: { city: 'Pa' } });
  });

  it('the grammar names the tool, then the separator (by id when given), then schema JSON', () => {
    const g = compileToolGrammar({ tools: TOOLS, choice: 'auto', family: 'deepseek', start: [1], end: [2], endIsEog: false, parallel: true, specialTokens: { '<｜tool▁sep｜>': 9 } });
    expect(g.gbnf).toMatch(/"get_weather" <\[9\]> t0-args/);
  });

  it('the V3.1 template renders history in the syntax the preset parses', () => {
    const v31 = new ChatTemplate(readTpl('deepseek-ai-DeepSeek-V3.1'), { bosToken: '', eosToken: '' });
    expect(v31.render([{ role: 'user', content: 'hi' }, { role: 'assistant', content: null, toolCalls: [{ id: 'c1', name: 'get_weather', arguments: { city: 'Paris' } }] }], { tools: TOOLS })).toContain(
      '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>',
    );
  });
});

import { readTemplate as readTpl } from '../server/fixtures.js';
