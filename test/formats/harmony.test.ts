// Harmony (gpt-oss): preset detection from the template, the call grammar on a real BPE
// vocabulary (the zoo's gpt-oss model: random weights, so only grammar-forced output is known),
// and parsing of both header orders gpt-oss writes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate, parseToolCallSpan } from '../../src/chat/index.js';
import { ToolCallAccumulator } from '../../src/chat/accumulator.js';
import { compileToolGrammar, loadModel, type Context, type Model } from '../../src/index.js';
import { zooGreedyChain } from '../../src/gguf/index.js';
import { zooModels } from '../helpers/zoo.js';

const TOOLS = [{ name: 'get_weather', parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Lyon'] } }, required: ['city'], additionalProperties: false } }];

describe('Harmony (gpt-oss) channels', () => {
  let model: Model;
  let ctx: Context;
  beforeAll(async () => {
    const zoo = await zooModels(['gpt-oss']);
    model = await loadModel(zoo['gpt-oss'].path);
    ctx = await model.createContext({ contextSize: 2048, sequences: 1, threads: 1 });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('detects the harmony call preset and reasoning markers from the template', () => {
    expect(ctx.markers?.preset).toBe('harmony');
    expect(ctx.reasoningMarkers?.preset).toBe('harmony');
    expect(ctx.reasoningMarkers?.drop).toHaveLength(3);
  });

  it('reasoning_effort reaches the template', () => {
    const t = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '', eosToken: '<|return|>' });
    const msgs = [{ role: 'user' as const, content: 'hi' }];
    expect(t.render(msgs, { variables: { reasoning_effort: 'high' } })).toContain('Reasoning: high');
    expect(t.render(msgs)).toContain('Reasoning: medium');
  });

  it('toolChoice required: the grammar forces a Harmony call the parser reads back', async () => {
    const t = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '', eosToken: '<|return|>' });
    const prompt = t.render([{ role: 'user', content: 'Weather in Paris?' }], { tools: TOOLS });
    expect(prompt.endsWith('<|start|>assistant')).toBe(true);
    const r = await ctx.generate({ prompt, parseSpecial: true, temperature: 0, tools: TOOLS, toolChoice: 'required', maxTokens: 200 }).result;
    expect(r.toolCalls).toHaveLength(1);
    const span = r.toolCalls[0]!;
    expect(r.finishReason).toBe('eog'); // <|call|> ends the turn
    expect(span.text).toMatch(/^get_weather(<\|channel\|>commentary json| <\|constrain\|>json)<\|message\|>/);
    const [call] = parseToolCallSpan(span.text);
    expect(call!.name).toBe('get_weather');
    expect(['Paris', 'Lyon']).toContain(call!.arguments.city);
    expect(model.detokenize(span.tokens, { special: true })).toBe(` to=functions.${span.text}<|call|>`);
  });

  it('the analysis channel is reasoning: a prompt that opened it starts inside; a budget forces <|end|> and the output goes on', async () => {
    const d = (await zooModels(['gpt-oss']))['gpt-oss'];
    const t = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '', eosToken: '<|return|>' });
    const text = `${t.render([{ role: 'user', content: 'hi' }])}<|channel|>analysis<|message|>`;
    const prompt = model.tokenize(text, { addSpecial: false, parseSpecial: true });
    const end = model.tokenize('<|end|>', { addSpecial: false, parseSpecial: true });
    expect(end.length).toBe(1);
    const r = await ctx.generate({ prompt, temperature: 0, reasoningBudget: 4, maxTokens: 10, emitTokenIds: true }).result;
    const chain = zooGreedyChain(d.successors, prompt.at(-1)!, 4);
    expect(Array.from(r.reasoning!.tokens)).toEqual([...chain, end[0]!]);
    expect(r.reasoning!.text).toBe(model.detokenize(Int32Array.from(chain)));
    const after = zooGreedyChain(d.successors, end[0]!, 5);
    expect(Array.from(r.tokens!)).toEqual([...chain, end[0]!, ...after]);
    expect(r.text).toBe(model.detokenize(Int32Array.from(after)));
  });

  it('parses both header orders; a truncated or unknown body is invalid', () => {
    expect(parseToolCallSpan('get_weather<|channel|>commentary json<|message|>{"city":"Paris"}')).toEqual([{ name: 'get_weather', arguments: { city: 'Paris' } }]);
    expect(parseToolCallSpan('get_weather <|constrain|>json<|message|>{"city":"Lyon"}')).toEqual([{ name: 'get_weather', arguments: { city: 'Lyon' } }]);
    expect(parseToolCallSpan('get_weather <|constrain|>json<|message|>{"city":')[0]!.invalidArguments).toBeDefined();
    const acc = new ToolCallAccumulator();
    acc.feed({ type: 'toolCallDelta', index: 0, text: 'get_weather<|channel|>commentary json<|message|>{"city":"Pa' });
    expect(acc.snapshot()[0]).toMatchObject({ name: 'get_weather', arguments: { city: 'Pa' }, complete: false });
    acc.feed({ type: 'toolCallEnd', index: 0, text: 'get_weather<|channel|>commentary json<|message|>{"city":"Paris"}' });
    expect(acc.finalize()).toEqual([{ id: null, name: 'get_weather', arguments: { city: 'Paris' } }]);
  });

  it('the grammar names the tool and offers both header orders', () => {
    const g = compileToolGrammar({ tools: TOOLS, choice: 'auto', family: 'harmony', start: [1, 2], end: [3], endIsEog: true, parallel: true });
    expect(g.gbnf).toContain('"get_weather"');
    expect(g.gbnf).toContain('"<|channel|>" "commentary json" "<|message|>" | " " "<|constrain|>" "json" "<|message|>"');
    const ids = compileToolGrammar({ tools: TOOLS, choice: 'auto', family: 'harmony', start: [1, 2], end: [3], endIsEog: true, parallel: true, specialTokens: { '<|channel|>': 7, '<|constrain|>': 8, '<|message|>': 9 } });
    expect(ids.gbnf).toContain('<[7]> "commentary json" <[9]> | " " <[8]> "json" <[9]>');
  });
});
