// Reasoning on a real vocabulary and template: the zoo's qwen35 model (llama.cpp's qwen35 vocab
// with Qwen3's added tokens, the Qwen3.5 chat template; random weights whose greedy output is a
// known successor chain). The template opens `<think>\n`, so the chain is reasoning until a budget
// forces `</think>`; the chain then goes on from `</think>` as text.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate } from '../../src/chat/index.js';
import { zooGreedyChain, type ZooModelDescription } from '../../src/gguf/index.js';
import { loadModel, type Context, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { openaiFor } from '../server/clients.js';
import { zooModels } from '../helpers/zoo.js';

describe('reasoning on the real qwen35 vocabulary (zoo model)', () => {
  let d: ZooModelDescription;
  let model: Model;
  let ctx: Context;
  let prompt: Int32Array;
  let thinkEnd: number;
  beforeAll(async () => {
    d = (await zooModels(['qwen35'])).qwen35;
    model = await loadModel(d.path);
    ctx = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1 });
    const text = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '', eosToken: '<|im_end|>' }).render([{ role: 'user', content: 'What is 2+2?' }]);
    expect(text.endsWith('<think>\n')).toBe(true);
    prompt = model.tokenize(text, { addSpecial: false, parseSpecial: true });
    const ids = model.tokenize('</think>', { addSpecial: false, parseSpecial: true });
    expect(ids.length).toBe(1);
    thinkEnd = ids[0]!;
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('single-token <think> markers from the real vocabulary; the prompt opens the span', () => {
    expect(ctx.reasoningMarkers?.preset).toBe('think');
    expect(ctx.reasoningMarkers?.start.length).toBe(1);
    expect(ctx.markers?.preset).toBe('qwen-xml');
  });

  it('a budget of 5: five chain tokens of reasoning, the forced </think>, then the chain from </think> as text', async () => {
    const r = await ctx.generate({ prompt, temperature: 0, maxTokens: 12, reasoningBudget: 5, emitTokenIds: true }).result;
    const chain = zooGreedyChain(d.successors, prompt.at(-1)!, 5);
    expect(Array.from(r.reasoning!.tokens)).toEqual([...chain, thinkEnd]);
    expect(r.reasoning!.text).toBe(model.detokenize(Int32Array.from(chain)));
    const after = zooGreedyChain(d.successors, thinkEnd, 6);
    expect(Array.from(r.tokens!)).toEqual([...chain, thinkEnd, ...after]);
    expect(r.text).toBe(model.detokenize(Int32Array.from(after)));
  });

  it('without a budget the span never closes: everything is reasoning, finishReason length', async () => {
    const r = await ctx.generate({ prompt, temperature: 0, maxTokens: 8 }).result;
    expect(r.finishReason).toBe('length');
    expect(r.text).toBe('');
    expect(Array.from(r.reasoning!.tokens)).toEqual(zooGreedyChain(d.successors, prompt.at(-1)!, 8));
  });

  it('through the server: reasoning_content, then content after the budget', async () => {
    const server: LlamuxServer = await createServer({ model, port: 0, ctx: 1024, parallel: 1, threads: 1 });
    try {
      const openai = openaiFor(server);
      const r = await openai.chat.completions.create({ model: 'q', messages: [{ role: 'user', content: 'What is 2+2?' }], temperature: 0, max_tokens: 12, reasoning_budget: 5 } as never);
      const msg = (r as { choices: Array<{ message: { content: string; reasoning_content?: string } }> }).choices[0]!.message;
      expect(msg.reasoning_content).toBe(model.detokenize(Int32Array.from(zooGreedyChain(d.successors, prompt.at(-1)!, 5))));
      expect(msg.content).toBe(model.detokenize(Int32Array.from(zooGreedyChain(d.successors, thinkEnd, 6))).trimStart());
    } finally {
      await server.close();
    }
  });
});

describe('Qwen XML calls on the real qwen35 vocabulary (zoo model)', () => {
  const TOOLS = [
    {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Lyon'] }, days: { type: 'integer', enum: [1, 2, 3] } }, required: ['city', 'days'] },
    },
  ];
  let model: Model;
  let ctx: Context;
  beforeAll(async () => {
    model = await loadModel((await zooModels(['qwen35'])).qwen35.path);
    ctx = await model.createContext({ contextSize: 2048, sequences: 1, threads: 1 });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it("toolChoice 'required' after a reasoning budget: the grammar forces an XML call; raw string enum, JSON integer", async () => {
    const text = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '', eosToken: '<|im_end|>' }).render([{ role: 'user', content: 'Weather?' }], { tools: TOOLS });
    const prompt = model.tokenize(text, { addSpecial: false, parseSpecial: true });
    const deltas: string[] = [];
    const gen = ctx.generate({ prompt, temperature: 0, tools: TOOLS, toolChoice: 'required', parallelToolCalls: false, reasoningBudget: 3, maxTokens: 300 });
    for await (const ev of gen) if (ev.type === 'toolCallDelta') deltas.push(ev.text);
    const r = await gen.result;
    expect(r.reasoning!.tokens.length).toBe(4); // 3 + the forced </think>
    expect(r.finishReason).toBe('toolCall');
    const span = r.toolCalls[0]!;
    expect(deltas.join('')).toBe(span.text);
    expect(span.text).toMatch(/^\n<function=get_weather>\n<parameter=city>\n(Paris|Lyon)\n<\/parameter>\n<parameter=days>\n[123]\n<\/parameter>\n<\/function>\n$/);
    const { parseToolCallSpan, xmlParamTypes } = await import('../../src/chat/tool-calls.js');
    const [call] = parseToolCallSpan(span.text, xmlParamTypes(TOOLS));
    expect(call!.name).toBe('get_weather');
    expect(typeof call!.arguments.city).toBe('string');
    expect(typeof call!.arguments.days).toBe('number');
    expect(model.detokenize(span.tokens, { special: true })).toBe(`<tool_call>${span.text}</tool_call>`);
  });

  it('parallel calls allowed: the forced span still closes after one function (random weights would repeat functions if the grammar let them)', async () => {
    const text = new ChatTemplate(model.metadata.chatTemplate!, { bosToken: '', eosToken: '<|im_end|>' }).render([{ role: 'user', content: 'Weather?' }], { tools: TOOLS });
    const prompt = model.tokenize(text, { addSpecial: false, parseSpecial: true });
    const r = await ctx.generate({ prompt, temperature: 0, tools: TOOLS, toolChoice: 'required', reasoningBudget: 3, maxTokens: 120 }).result;
    expect(r.truncatedToolCall).toBeUndefined();
    expect(r.toolCalls.length).toBeGreaterThanOrEqual(1);
    for (const c of r.toolCalls) expect(c.text).toMatch(/^\n<function=get_weather>\n<parameter=city>\n(Paris|Lyon)\n<\/parameter>\n<parameter=days>\n[123]\n<\/parameter>\n<\/function>\n$/);
  });
});
