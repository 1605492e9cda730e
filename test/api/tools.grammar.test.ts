// Tool grammars (issue 16) on the scripted models: constrained tool-call spans that keep the
// exact-token guarantees (deltas = stored bytes, replay = a full KV hit), toolChoice,
// parallelToolCalls: false, and the errors raised before decoding starts.
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { LlamuxError, loadModel, type Context, type GenerateEvent, type GenerateResult, type GenerateTool, type Model } from '../../src/index.js';
import { parseToolCallSpan } from '../../src/chat/tool-calls.js';
import { collectEvents, markersOf, ONE_THREAD, script, testModel, type TestModelName } from '../helpers/models.js';
import { tinyModelPath } from '../helpers/paths.js';

const EXACT = { temperature: 1, topK: 0, topP: 1, minP: 0 } as const;
const SEEDS = Array.from({ length: 20 }, (_, i) => 11 + i * 7919);

const WEATHER: GenerateTool = {
  name: 'get_weather',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city', 'days'] },
};
const MULTIPLY: GenerateTool = {
  name: 'multiply',
  parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
};
const GOOD_CALL = '{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}';

const models = new Map<TestModelName, Model>();
async function context(name: TestModelName): Promise<Context> {
  let m = models.get(name);
  if (!m) {
    m = await loadModel(testModel(name).path);
    models.set(name, m);
  }
  return m.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 2, toolCallMarkers: markersOf(name) });
}
afterAll(async () => {
  for (const m of models.values()) await m.dispose();
});

const prompt = (name: TestModelName): number[] => [...script(name).promptTokens];
function finalOf(events: GenerateEvent[]): GenerateResult {
  const f = events.at(-1);
  if (f?.type !== 'final') throw new Error('no final event');
  return f;
}

describe('generate({ tools }) on a model that writes a broken call', () => {
  it('writes the known valid call under the grammar where greedy decoding writes an unknown tool, invalid JSON and a wrong type', async () => {
    const ctx = await context('grammar-call');
    const free = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0 }).result;
    expect(free.toolCalls[0]!.text).toBe('{"name": "get_wether", "arguments": {"city": Rome, "days": "3"}}');
    expect(() => JSON.parse(free.toolCalls[0]!.text)).toThrow();
    const r = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, tools: [WEATHER] }).result;
    expect(r.toolCalls).toHaveLength(1);
    expect(r.toolCalls[0]!.text).toBe(GOOD_CALL);
    expect(parseToolCallSpan(r.toolCalls[0]!.text)).toEqual([{ name: 'get_weather', arguments: { city: 'Rome', days: 3 } }]);
    expect(r.finishReason).toBe('eog');
    await ctx.dispose();
  });

  it('takes zod parameters like the tool layer does', async () => {
    const ctx = await context('grammar-call');
    const tool: GenerateTool = { name: 'get_weather', parameters: z.object({ city: z.string(), days: z.number().int() }) };
    const r = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, tools: [tool] }).result;
    expect(r.toolCalls[0]!.text).toBe(GOOD_CALL);
    await ctx.dispose();
  });

  it('fixes only what the schema rules out: a known tool name and a string field stay as sampled', async () => {
    const ctx = await context('grammar-call');
    const loose: GenerateTool = { name: 'get_wether', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'string' } } } };
    const r = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, tools: [loose] }).result;
    expect(r.toolCalls[0]!.text).toBe('{"name": "get_wether", "arguments": {"city": "Rome", "days": "3"}}');
    const typed = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, tools: [loose, WEATHER] }).result;
    expect(typed.toolCalls[0]!.text).toBe('{"name": "get_wether", "arguments": {"city": "Rome", "days": "3"}}');
    await ctx.dispose();
  });

  it('a named toolChoice forces that tool where the model prefers another', async () => {
    const ctx = await context('grammar-call');
    const wether: GenerateTool = { ...WEATHER, name: 'get_wether' };
    const auto = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, tools: [wether, WEATHER] }).result;
    expect(parseToolCallSpan(auto.toolCalls[0]!.text)[0]!.name).toBe('get_wether');
    const named = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, tools: [wether, WEATHER], toolChoice: { name: 'get_weather' } }).result;
    expect(named.toolCalls[0]!.text).toBe(GOOD_CALL);
    await ctx.dispose();
  });

  it('streams deltas that concatenate to the stored bytes, and replaying the stored tokens is a full KV hit', async () => {
    const ctx = await context('grammar-call');
    const p = prompt('grammar-call');
    const events = await collectEvents(ctx.generate({ prompt: p, temperature: 0, tools: [WEATHER], emitTokenIds: true }));
    const end = events.find((e) => e.type === 'toolCallEnd');
    if (end?.type !== 'toolCallEnd') throw new Error('no toolCallEnd');
    const deltas = events.filter((e) => e.type === 'toolCallDelta').map((e) => (e.type === 'toolCallDelta' ? e.text : ''));
    expect(deltas.join('')).toBe(end.text);
    expect(end.text).toBe(GOOD_CALL);
    expect(ctx.model.detokenize(end.tokens, { special: true })).toBe(`<tool_call>${GOOD_CALL}</tool_call>`);
    const r = finalOf(events);
    const replay = await ctx.generate({ prompt: [...p, ...Array.from(r.tokens!)], temperature: 0, maxTokens: 1 }).result;
    expect(replay.reusedTokens).toBeGreaterThanOrEqual(replay.promptTokens - 1);
    expect(replay.cache.outcome).toBe('exact');
    await ctx.dispose();
  });

  it('is valid on every one of 20 seeds at temperature 1 with the payload sampled (greedyToolSyntax off)', async () => {
    const ctx = await context('grammar-call');
    const p = prompt('grammar-call');
    let invalidWithout = 0;
    for (const seed of SEEDS) {
      const r = await ctx.generate({ prompt: p, ...EXACT, seed, greedyToolSyntax: false, tools: [WEATHER] }).result;
      expect(r.toolCalls[0]?.text).toBe(GOOD_CALL);
      const free = await ctx.generate({ prompt: p, ...EXACT, seed, greedyToolSyntax: false }).result;
      if (free.toolCalls[0]?.text !== GOOD_CALL) invalidWithout++;
    }
    // Without the grammar each of the three near ties goes wrong 55 % of the time.
    expect(invalidWithout).toBeGreaterThan(10);
    await ctx.dispose();
  });
});

describe('toolChoice', () => {
  it("'required' makes a model that would answer in text call a tool first", async () => {
    const ctx = await context('grammar-text');
    const p = prompt('grammar-text');
    const text = await ctx.generate({ prompt: p, temperature: 0, tools: [MULTIPLY] }).result;
    expect(text.text).toBe(' It is 42.');
    expect(text.toolCalls).toHaveLength(0);
    const r = await ctx.generate({ prompt: p, temperature: 0, tools: [MULTIPLY], toolChoice: 'required' }).result;
    expect(r.text).toBe('');
    expect(r.toolCalls.map((c) => c.text)).toEqual(['{"name": "multiply", "arguments": {"a": 6, "b": 7}}']);
    await ctx.dispose();
  });

  it("'none' turns span detection off: the markers come back as text", async () => {
    const ctx = await context('grammar-call');
    const r = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, tools: [WEATHER], toolChoice: 'none', renderSpecial: true }).result;
    expect(r.toolCalls).toHaveLength(0);
    expect(r.text).toContain('get_wether');
    await ctx.dispose();
  });
});

describe('parallelToolCalls: false', () => {
  it('ends generation when the first span closes, with and without tools', async () => {
    const ctx = await context('two-calls');
    const p = prompt('two-calls');
    const all = await ctx.generate({ prompt: p, temperature: 0 }).result;
    expect(all.toolCalls).toHaveLength(2);
    const city: GenerateTool = { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };
    for (const tools of [undefined, [city]]) {
      const r = await ctx.generate({ prompt: p, temperature: 0, parallelToolCalls: false, emitTokenIds: true, ...(tools ? { tools } : {}) }).result;
      expect(r.finishReason).toBe('toolCall');
      expect(r.toolCalls.map((c) => c.text)).toEqual([all.toolCalls[0]!.text]);
      // Nothing sampled after the end marker.
      expect(Array.from(r.tokens!).at(-1)).toBe(markersOf('two-calls').end[0]);
    }
    await ctx.dispose();
  });
});

describe('errors before decoding starts', () => {
  it('refuses an unsatisfiable schema, an unknown named tool and required without tools with INVALID_ARGUMENT', async () => {
    const ctx = await context('grammar-call');
    const p = prompt('grammar-call');
    const bad: GenerateTool[][] = [
      [{ name: 'x', parameters: { type: 'object', properties: { a: { type: 'string', enum: [1, 2] } }, required: ['a'] } }],
      [{ name: 'x', parameters: { type: 'object', properties: { a: false }, required: ['a'] } }],
      [{ name: 'x', parameters: { type: 'object', properties: { a: { type: 'array', minItems: 3, maxItems: 2 } } } }],
      [{ name: 'x', parameters: { type: 'object', required: ['b'], additionalProperties: false } }],
      [{ name: 'x', parameters: { type: 'string' } }],
    ];
    for (const tools of bad) {
      let err: unknown;
      try {
        ctx.generate({ prompt: p, tools });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(LlamuxError);
      expect((err as LlamuxError).code).toBe('INVALID_ARGUMENT');
      expect((err as LlamuxError).message).toMatch(/Tool "x"/);
    }
    expect(() => ctx.generate({ prompt: p, tools: [WEATHER], toolChoice: { name: 'nope' } })).toThrow(/not one of the tools/);
    expect(() => ctx.generate({ prompt: p, toolChoice: 'required' })).toThrow(/needs tools/);
    expect(() => ctx.generate({ prompt: p, tools: [WEATHER], grammar: 'root ::= "a"' })).toThrow(/cannot be combined/);
    expect(() => ctx.generate({ prompt: p, tools: [WEATHER, WEATHER] })).toThrow(/given twice/);
    await ctx.dispose();
  });

  it('a grammar that allows no token mid-span ends the request with GRAMMAR_FAILED, and the context goes on', async () => {
    const ctx = await context('grammar-call');
    const eos = testModel('grammar-call').description.eos;
    // The body waits for the EOS token, which llama.cpp's grammar only allows once it is complete.
    const gen = ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, toolCallGrammar: `root ::= <[${eos}]>`, toolChoice: 'required' });
    await expect(gen.result).rejects.toMatchObject({ code: 'GRAMMAR_FAILED' });
    const r = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, tools: [WEATHER] }).result;
    expect(r.toolCalls[0]!.text).toBe(GOOD_CALL);
    await ctx.dispose();
  });

  it('refuses tools on a context without markers', async () => {
    const m = models.get('grammar-call') ?? (await loadModel(testModel('grammar-call').path));
    models.set('grammar-call', m);
    const ctx = await m.createContext({ ...ONE_THREAD, contextSize: 512, toolCallMarkers: false });
    expect(() => ctx.generate({ prompt: prompt('grammar-call'), tools: [WEATHER] })).toThrow(/markers/);
    await ctx.dispose();
  });

  it('a caller grammar for the span body (custom markers) is applied between the markers', async () => {
    const ctx = await context('grammar-call');
    const body = `root ::= "{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\":" (" \\"Rome\\"," | " \\"Paris\\",") " \\"days\\": " [0-9] "}}"`;
    const r = await ctx.generate({ prompt: prompt('grammar-call'), temperature: 0, toolCallGrammar: body }).result;
    expect(r.toolCalls[0]!.text).toBe(GOOD_CALL);
    await ctx.dispose();
  });
});

describe('the mistral family: a list of calls ended by EOS', () => {
  const TOOLS: GenerateTool[] = [
    { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
    { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string', enum: ['CET', 'UTC'] } }, required: ['tz'] } },
  ];
  const BOTH = '[{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "get_time", "arguments": {"tz": "CET"}}]';

  it('keeps a valid list, and parallelToolCalls: false allows one element, closed by the EOS end marker', async () => {
    const m = models.get('grammar-list') ?? (await loadModel(testModel('grammar-list').path));
    models.set('grammar-list', m);
    const ctx = await m.createContext({ ...ONE_THREAD, contextSize: 1024, toolCallMarkers: 'mistral' });
    expect(ctx.markers?.preset).toBe('mistral');
    const p = prompt('grammar-list');
    const free = await ctx.generate({ prompt: p, temperature: 0 }).result;
    expect(free.toolCalls.map((c) => c.text)).toEqual([BOTH]);
    const all = await ctx.generate({ prompt: p, temperature: 0, tools: TOOLS }).result;
    expect(all.toolCalls.map((c) => c.text)).toEqual([BOTH]);
    expect(all.finishReason).toBe('eog');
    const one = await ctx.generate({ prompt: p, temperature: 0, tools: TOOLS, parallelToolCalls: false }).result;
    expect(one.toolCalls.map((c) => c.text)).toEqual(['[{"name": "get_weather", "arguments": {"city": "Rome"}}]']);
    expect(one.finishReason).toBe('eog');
    expect(parseToolCallSpan(one.toolCalls[0]!.text)).toEqual([{ name: 'get_weather', arguments: { city: 'Rome' } }]);
    await ctx.dispose();
  });
});

describe('the greedy shortcut', () => {
  it('picks what a full mask picks: greedy spans equal topK 1 on the sampled path, on a random model', async () => {
    const m = await loadModel(tinyModelPath);
    const V = m.vocab.size;
    // Rare tokens as markers: toolChoice required makes the grammar write them.
    const ctx = await m.createContext({ ...ONE_THREAD, contextSize: 1024, toolCallMarkers: { start: [V - 1, V - 2], end: [V - 3] } });
    const bias = Object.fromEntries(m.vocab.eogTokens.map((t) => [String(t), -Infinity]));
    const tools: GenerateTool[] = [
      WEATHER,
      { name: 'search', parameters: { type: 'object', properties: { q: { type: 'string', maxLength: 12 }, n: { type: 'integer' }, tags: { type: 'array', items: { enum: ['a', 'b'] } } }, required: ['q', 'n'] } },
    ];
    for (const start of [1, 500, 7000]) {
      const p = Array.from({ length: 16 }, (_, i) => 3 + ((start + i * 131) % (V - 3)));
      const base = { prompt: p, tools, toolChoice: 'required' as const, maxTokens: 48, logitBias: bias, emitTokenIds: true };
      const greedy = await ctx.generate({ ...base, temperature: 0 }).result;
      const masked = await ctx.generate({ ...base, temperature: 1, topK: 1, greedyToolSyntax: false, seed: 1 }).result;
      expect(Array.from(greedy.tokens!)).toEqual(Array.from(masked.tokens!));
      expect(greedy.generatedTokens).toBeGreaterThan(3);
    }
    await ctx.dispose();
    await m.dispose();
  });
});
