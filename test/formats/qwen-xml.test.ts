// Qwen's XML call syntax: preset detection, the span grammar with typed parameters, parsing,
// and the OpenAI / Anthropic clients reading reasoning and the call.
import type Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate, parseToolCallSpan } from '../../src/chat/index.js';
import { compileToolGrammar, loadModel, type Context, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { ToolCallAccumulator } from '../../src/chat/accumulator.js';
import { anthropicFor, openaiFor } from '../server/clients.js';
import { WEATHER_QUESTION, XML_REASONING, XML_SPAN, XML_TOOLS, ensureFormatModel, qwenXmlSpec } from './fixtures.js';

describe('Qwen XML tool calls (Qwen3.5 template)', () => {
  let model: Model;
  let ctx: Context;
  let prompt: string;
  beforeAll(async () => {
    const spec = qwenXmlSpec();
    model = await loadModel(await ensureFormatModel(spec));
    ctx = await model.createContext({ contextSize: 4096, sequences: 2, threads: 1 });
    prompt = new ChatTemplate(spec.chatTemplate!, { bosToken: '', eosToken: '<|im_end|>' }).render([{ role: 'user', content: WEATHER_QUESTION }], { tools: XML_TOOLS });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('picks the qwen-xml preset from the template and the think reasoning markers', () => {
    expect(ctx.markers?.preset).toBe('qwen-xml');
    expect(ctx.reasoningMarkers?.preset).toBe('think');
  });

  it('reasoning, then an exact span; deltas equal the stored bytes; the grammar allows it; replay tokens detokenize to it', async () => {
    const deltas: string[] = [];
    const gen = ctx.generate({ prompt, parseSpecial: true, temperature: 0, tools: XML_TOOLS, emitTokenIds: true });
    for await (const ev of gen) if (ev.type === 'toolCallDelta') deltas.push(ev.text);
    const r = await gen.result;
    expect(r.reasoning?.text).toBe(XML_REASONING);
    expect(r.text).toBe('');
    expect(r.toolCalls).toHaveLength(1);
    expect(r.toolCalls[0]!.text).toBe(XML_SPAN);
    expect(deltas.join('')).toBe(XML_SPAN);
    expect(model.detokenize(r.toolCalls[0]!.tokens, { special: true })).toBe(`<tool_call>${XML_SPAN}</tool_call>`);
    expect(parseToolCallSpan(r.toolCalls[0]!.text, (_t, k) => (k === 'city' ? 'string' : 'integer'))).toEqual([{ name: 'get_weather', arguments: { city: 'Paris', days: 3 } }]);
    const acc = new ToolCallAccumulator();
    acc.feed({ type: 'toolCallEnd', index: 0, text: r.toolCalls[0]!.text });
    expect(acc.finalize()).toEqual([{ id: null, name: 'get_weather', arguments: { city: 'Paris', days: 3 } }]);
  });

  it('the near tie inside a string parameter: greedy by default (a span without payload markers is wrapper syntax), sampled with greedyToolSyntax false', async () => {
    for (let seed = 1; seed <= 4; seed++) {
      const r = await ctx.generate({ prompt, parseSpecial: true, temperature: 1, seed, topK: 0, topP: 1, minP: 0, tools: XML_TOOLS }).result;
      expect(parseToolCallSpan(r.toolCalls[0]!.text)[0]!.arguments.city).toBe('Paris');
    }
    const cities = new Set<unknown>();
    for (let seed = 1; seed <= 16 && cities.size < 2; seed++) {
      const r = await ctx.generate({ prompt, parseSpecial: true, temperature: 1, seed, topK: 0, topP: 1, minP: 0, tools: XML_TOOLS, greedyToolSyntax: false }).result;
      cities.add(parseToolCallSpan(r.toolCalls[0]!.text)[0]!.arguments.city);
    }
    expect(cities).toEqual(new Set(['Paris', 'Lyon']));
  });

  it("toolChoice 'required' with the prompt's open reasoning span: the reasoning comes first, then the forced call", async () => {
    const r = await ctx.generate({ prompt, parseSpecial: true, temperature: 0, tools: XML_TOOLS, toolChoice: 'required', parallelToolCalls: false }).result;
    expect(r.reasoning?.text).toBe(XML_REASONING);
    expect(r.toolCalls.map((c) => c.text)).toEqual([XML_SPAN]);
    expect(r.finishReason).toBe('toolCall');
    // a budget ends the reasoning early; the grammar then forces the call at once
    const b = await ctx.generate({ prompt, parseSpecial: true, temperature: 0, tools: XML_TOOLS, toolChoice: 'required', parallelToolCalls: false, reasoningBudget: 1 }).result;
    expect(b.reasoning?.text).toBe(' Need');
    expect(parseToolCallSpan(b.toolCalls[0]!.text)[0]!.name).toBe('get_weather');
  });

  it('the grammar types parameters by the schema: strings raw, integers as JSON', () => {
    const g = compileToolGrammar({ tools: XML_TOOLS, choice: 'auto', family: 'qwen-xml', start: [1], end: [2], endIsEog: false, parallel: true });
    expect(g.gbnf).toContain('"<parameter=city>\\n" xml-text "\\n</parameter>\\n"');
    expect(g.gbnf).toMatch(/"<parameter=days>\\n" json-integer/);
    expect(g.gbnf).toContain('"get_weather>\\n"');
    // one function per <tool_call> block, parallel calls or not (Qwen renders each call in its own block)
    expect(g.gbnf).toMatch(/^llamux-tool-span ::= <\[1\]> xml-call <\[2\]>$/m);
  });


  it('malformed bodies: a duplicated parameter, an unclosed function, text between blocks are invalid', () => {
    expect(parseToolCallSpan('\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n</function>\n')[0]!.invalidArguments).toBeDefined();
    expect(parseToolCallSpan('\n<function=f>\n<parameter=a>\n1\n</parameter>\n')[0]).toMatchObject({ name: 'f', arguments: {} });
    expect(parseToolCallSpan('\n<function=f>\n<parameter=a>\n1\n</parameter>\n')[0]!.invalidArguments).toBeDefined();
    expect(parseToolCallSpan('\n<function=f>\n</function>\njunk')[0]!.invalidArguments).toBeDefined();
    expect(parseToolCallSpan('\n<function=f>\n</function>\n<function=g>\n<parameter=x>\nhi\n</parameter>\n</function>\n')).toEqual([
      { name: 'f', arguments: {} },
      { name: 'g', arguments: { x: 'hi' } },
    ]);
  });

  describe('through the server', () => {
    let server: LlamuxServer;
    beforeAll(async () => {
      server = await createServer({ model, port: 0, ctx: 4096, parallel: 1, threads: 1 });
    });
    afterAll(async () => {
      await server?.close();
    });
    const tools = XML_TOOLS.map((t) => ({ type: 'function' as const, function: t }));

    it('OpenAI: reasoning_content and tool_calls, streamed and not', async () => {
      const openai: OpenAI = openaiFor(server);
      const messages = [{ role: 'user' as const, content: WEATHER_QUESTION }];
      const r = await openai.chat.completions.create({ model: 'q', messages, tools, temperature: 0 });
      const msg = r.choices[0]!.message as OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string };
      expect(msg.reasoning_content).toBe(XML_REASONING);
      expect(r.choices[0]!.finish_reason).toBe('tool_calls');
      const call = msg.tool_calls![0]!;
      expect(call.type === 'function' && [call.function.name, JSON.parse(call.function.arguments)]).toEqual(['get_weather', { city: 'Paris', days: 3 }]);
      const stream = await openai.chat.completions.create({ model: 'q', messages, tools, temperature: 0, stream: true });
      let reasoning = '';
      let args = '';
      for await (const chunk of stream) {
        const d = chunk.choices[0]?.delta as { reasoning_content?: string; tool_calls?: Array<{ function?: { arguments?: string } }> } | undefined;
        reasoning += d?.reasoning_content ?? '';
        for (const t of d?.tool_calls ?? []) args += t.function?.arguments ?? '';
      }
      expect(reasoning).toBe(XML_REASONING);
      expect(JSON.parse(args)).toEqual({ city: 'Paris', days: 3 });
    });

    it('malformed output: reasoning that never closes, a truncated span', async () => {
      const openai: OpenAI = openaiFor(server);
      const messages = [{ role: 'user' as const, content: WEATHER_QUESTION }];
      const open = await openai.chat.completions.create({ model: 'q', messages, tools, temperature: 0, max_tokens: 2 });
      expect(open.choices[0]!.finish_reason).toBe('length');
      expect((open.choices[0]!.message as { reasoning_content?: string }).reasoning_content).toBe(' Need the');
      expect(open.choices[0]!.message.content).toBe('');
      expect(open.choices[0]!.message.tool_calls).toBeUndefined();
      // 3 reasoning tokens, </think>, <tool_call>, then 3 of the span's tokens: never a call
      const cut = await openai.chat.completions.create({ model: 'q', messages, tools, temperature: 0, max_tokens: 8 });
      expect(cut.choices[0]!.finish_reason).toBe('length');
      expect(cut.choices[0]!.message.tool_calls).toBeUndefined();
      expect((cut.choices[0]!.message as { reasoning_content?: string }).reasoning_content).toBe(XML_REASONING);
    });

    it('Anthropic: a thinking block, then tool_use', async () => {
      const anthropic: Anthropic = anthropicFor(server);
      const r = await anthropic.messages.create({
        model: 'q',
        max_tokens: 128,
        messages: [{ role: 'user', content: WEATHER_QUESTION }],
        tools: XML_TOOLS.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters as Anthropic.Tool.InputSchema })),
        ...({ temperature: 0 } as unknown as Record<string, never>),
      });
      expect(r.content.map((b) => b.type)).toEqual(['thinking', 'tool_use']);
      expect((r.content[0] as Anthropic.ThinkingBlock).thinking).toBe(XML_REASONING);
      expect(r.content[1]).toMatchObject({ type: 'tool_use', name: 'get_weather', input: { city: 'Paris', days: 3 } });
      expect(r.stop_reason).toBe('tool_use');
    });
  });
});
