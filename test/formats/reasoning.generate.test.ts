import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Context, type GenerateEvent, type Model } from '../../src/index.js';
import { QWEN_ANSWER, QWEN_REASONING, QWEN_THINK_PROMPT, ensureFormatModel, qwenThinkSpec } from './fixtures.js';

describe('reasoning spans (Qwen3.5 template, <think> markers)', () => {
  let model: Model;
  let ctx: Context;
  beforeAll(async () => {
    model = await loadModel(await ensureFormatModel(qwenThinkSpec()));
    ctx = await model.createContext({ contextSize: 2048, sequences: 2, threads: 1 });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await model?.dispose();
  });

  it('detects the markers from the template and splits reasoning from text', async () => {
    expect(ctx.reasoningMarkers?.preset).toBe('think');
    const events: GenerateEvent[] = [];
    const gen = ctx.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0, emitTokenIds: true });
    for await (const ev of gen) events.push(ev);
    const r = await gen.result;
    expect(r.reasoning?.text).toBe(QWEN_REASONING);
    expect(r.text).toBe(QWEN_ANSWER);
    const reasoningEvents = events.filter((e) => e.type === 'reasoning');
    expect(reasoningEvents.map((e) => e.text).join('')).toBe(QWEN_REASONING);
    expect(events.filter((e) => e.type === 'text').map((e) => e.text).join('')).toBe(QWEN_ANSWER);
    // reasoning tokens (end marker included) + text tokens = every generated token, in order
    const endTok = model.tokenize('</think>', { addSpecial: false, parseSpecial: true });
    expect(r.reasoning!.tokens.at(-1)).toBe(endTok[0]);
    expect(model.detokenize(r.reasoning!.tokens, { special: true })).toBe(`${QWEN_REASONING}</think>`);
    expect(Array.from(r.tokens!)).toEqual([...r.reasoning!.tokens, ...model.tokenize(QWEN_ANSWER, { addSpecial: false })].slice(0, r.tokens!.length));
    expect(r.generatedTokens).toBe(r.tokens!.length);
    // every reasoning event comes before the first text event
    const firstText = events.findIndex((e) => e.type === 'text' && e.text !== '');
    const lastReasoning = events.map((e) => e.type).lastIndexOf('reasoning');
    expect(lastReasoning).toBeLessThan(firstText);
  });

  it('reasoningBudget forces the end marker and generation goes on', async () => {
    const r = await ctx.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0, reasoningBudget: 2 }).result;
    expect(r.reasoning?.text).toBe(' Two plus');
    expect(model.detokenize(r.reasoning!.tokens, { special: true })).toBe(' Two plus</think>');
    expect(r.text).toBe(QWEN_ANSWER);
    const zero = await ctx.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0, reasoningBudget: 0 }).result;
    expect(zero.reasoning?.text).toBe('');
    expect(zero.text).toBe(QWEN_ANSWER);
  });

  it('detectReasoning: false and reasoningMarkers: false keep the old text path', async () => {
    const r = await ctx.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0, detectReasoning: false }).result;
    expect(r.reasoning).toBeUndefined();
    expect(r.text).toBe(`${QWEN_REASONING}</think>${QWEN_ANSWER}`);
    const plain = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1, reasoningMarkers: false });
    try {
      expect(plain.reasoningMarkers).toBeUndefined();
      const p = await plain.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0 }).result;
      expect(p.text).toBe(`${QWEN_REASONING}</think>${QWEN_ANSWER}`);
    } finally {
      await plain.dispose();
    }
  });

  it('drop: channel headers (token sequences) leave the text, their tokens stay with the text token ids', async () => {
    const full = await ctx.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0, emitTokenIds: true }).result;
    const textTokens = Array.from(full.tokens!.slice(full.reasoning!.tokens.length));
    const header = textTokens.slice(0, 2); // " The answer"
    const c = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1, reasoningMarkers: { start: '<think>', end: '</think>', drop: [header, [header[0]!, 5, 6]] } });
    try {
      const r = await c.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0, emitTokenIds: true }).result;
      expect(r.reasoning?.text).toBe(QWEN_REASONING);
      expect(r.text).toBe(' equals 4.');
      expect(Array.from(r.tokens!)).toEqual(Array.from(full.tokens!));
    } finally {
      await c.dispose();
    }
  });

  it('a span the model opens itself: single- and multi-token start markers, and a false start released as text', async () => {
    const ids = (text: string): number[] => Array.from(model.tokenize(text, { addSpecial: false, parseSpecial: true })).slice(-1);
    const two = ids(' Two')[0]!;
    const plus = ids(' plus')[0]!;
    const end = ids('</think>')[0]!;
    const run = async (start: number[]) => {
      const c = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1, reasoningMarkers: { start, end: [end] } });
      try {
        return await c.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0, reasoningOpen: false }).result;
      } finally {
        await c.dispose();
      }
    };
    const single = await run([two]);
    expect(single.reasoning?.text).toBe(' plus two is four.');
    expect(single.text).toBe(QWEN_ANSWER);
    const multi = await run([two, plus]);
    expect(multi.reasoning?.text).toBe(' two is four.');
    expect(multi.text).toBe(QWEN_ANSWER);
    // ' Two' is held as a possible start, ' two' breaks it: both go on as text, in order
    const falseStart = await run([two, two]);
    expect(falseStart.reasoning).toBeUndefined();
    expect(falseStart.text).toBe(`${QWEN_REASONING}</think>${QWEN_ANSWER}`);
  });

  it('reasoning that never closes is reported as reasoning, with finishReason length', async () => {
    const r = await ctx.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 0, maxTokens: 3 }).result;
    expect(r.finishReason).toBe('length');
    expect(r.reasoning?.text).toBe(' Two plus two');
    expect(r.text).toBe('');
  });

  it('the near tie inside the reasoning stays reasoning at temperature 1', async () => {
    const seen = new Set<string>();
    for (let seed = 1; seed <= 12 && seen.size < 2; seed++) {
      const r = await ctx.generate({ prompt: QWEN_THINK_PROMPT, parseSpecial: true, temperature: 1, seed, topK: 0, topP: 1, minP: 0 }).result;
      seen.add(r.reasoning!.text);
      expect(r.text).toBe(QWEN_ANSWER);
    }
    expect(seen).toEqual(new Set([QWEN_REASONING, ' Two plus two is 4!']));
  });
});
