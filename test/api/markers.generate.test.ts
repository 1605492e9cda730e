// Tool-call markers (issue 4) on the scripted models: exact span detection, streaming of
// spans, truncation, the greedy wrapper sampler, and KV bookkeeping after a tool-call turn.
import { afterAll, describe, expect, it } from 'vitest';
import {
  LlamuxError,
  loadModel,
  type Context,
  type ContextOptions,
  type GenerateEvent,
  type GenerateResult,
  type Model,
  type ToolCallEndEvent,
} from '../../src/index.js';
import { collectEvents, markersOf, ONE_THREAD, script, testModel, tokenId, type TestModelName } from '../helpers/models.js';

const EXACT = { temperature: 1, topK: 0, topP: 1, minP: 0 } as const;
const SEEDS = Array.from({ length: 20 }, (_, i) => 7 + i * 104729);
const ids = (t: Int32Array | undefined): number[] => Array.from(t ?? []);

const models = new Map<TestModelName, Model>();
async function context(name: TestModelName, options: ContextOptions = {}): Promise<Context> {
  let m = models.get(name);
  if (!m) {
    m = await loadModel(testModel(name).path);
    models.set(name, m);
  }
  return m.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 4, ...options, toolCallMarkers: 'toolCallMarkers' in options ? options.toolCallMarkers : markersOf(name) });
}
afterAll(async () => {
  for (const m of models.values()) await m.dispose();
});

function finalOf(events: GenerateEvent[]): GenerateResult {
  const f = events.at(-1);
  if (f?.type !== 'final') throw new Error('no final event');
  return f;
}

/** Every token the request sampled, in order, rebuilt from its events (text tokens and span tokens). */
function sampledTokens(events: GenerateEvent[]): number[] {
  const out: number[] = [];
  for (const e of events) {
    if (e.type === 'text') out.push(...ids(e.tokens));
    if (e.type === 'toolCallEnd' || e.type === 'toolCallTruncated') out.push(...ids(e.tokens));
  }
  return out;
}

/** Index in `seq` where `sub` starts, or -1. */
function indexOf(seq: readonly number[], sub: readonly number[], from = 0): number {
  for (let i = from; i + sub.length <= seq.length; i++) if (sub.every((t, j) => seq[i + j] === t)) return i;
  return -1;
}

/** Event types with consecutive text/delta events merged, for comparing event shapes. */
function shape(events: GenerateEvent[]): string[] {
  const out: string[] = [];
  for (const e of events) {
    const k = e.type === 'toolCallDelta' || e.type === 'toolCallStart' || e.type === 'toolCallEnd' ? `${e.type}#${e.index}` : e.type;
    if ((e.type === 'text' || e.type === 'toolCallDelta') && out.at(-1) === k) continue;
    out.push(k);
  }
  return out;
}

describe('Context#generate() with tool-call markers', () => {
  it('resolves string markers to the token ids of the description (single-token and four-token markers)', async () => {
    for (const name of ['single-marker', 'multi-marker', 'payload-marker'] as const) {
      const d = testModel(name).description;
      const ctx = await context(name, {
        toolCallMarkers: { start: '<tool_call>', end: '</tool_call>', ...(d.markers.argStart ? { payloadStart: '<arg>', payloadEnd: '</arg>' } : {}) },
      });
      const m = markersOf(name);
      expect(ids(ctx.markers!.start)).toEqual(m.start);
      expect(ids(ctx.markers!.end)).toEqual(m.end);
      if (m.payloadStart) expect(ids(ctx.markers!.payloadStart)).toEqual(m.payloadStart);
      await ctx.dispose();
    }
    expect(markersOf('multi-marker').start).toHaveLength(4);
  });

  it('single-marker: emits the text before the call once and in order, then the span as start, deltas and end', async () => {
    const s = script('single-marker');
    const start = tokenId('single-marker', '<tool_call>');
    const end = tokenId('single-marker', '</tool_call>');
    const open = s.greedy.indexOf(start);
    const close = s.greedy.indexOf(end);
    const ctx = await context('single-marker');
    const events = await collectEvents(ctx.generate({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true }));
    const final = finalOf(events);
    expect(shape(events)).toEqual(['text', 'toolCallStart#0', 'toolCallDelta#0', 'toolCallEnd#0', 'final']);

    const before = s.greedyText.slice(0, s.greedyText.indexOf('<tool_call>'));
    const inside = s.greedyText.slice(s.greedyText.indexOf('<tool_call>') + '<tool_call>'.length, s.greedyText.indexOf('</tool_call>'));
    const texts = events.filter((e) => e.type === 'text');
    expect(texts.map((e) => e.text).join('')).toBe(before);
    expect(texts.flatMap((e) => ids(e.tokens))).toEqual(s.greedy.slice(0, open));
    for (const e of texts) for (const piece of ['<tool_call>', '{', 'get_weather', 'Paris', '</tool_call>']) expect(e.text).not.toContain(piece);

    const deltas = events.filter((e) => e.type === 'toolCallDelta');
    const endEv = events.find((e): e is ToolCallEndEvent => e.type === 'toolCallEnd')!;
    expect(endEv.index).toBe(0);
    expect(endEv.text).toBe(inside);
    expect(deltas.map((e) => e.text).join('')).toBe(endEv.text);
    expect(ids(endEv.tokens)).toEqual(s.greedy.slice(open, close + 1));
    expect(JSON.parse(endEv.text)).toEqual({ name: 'get_weather', arguments: { city: 'Paris' } });

    expect(final.finishReason).toBe('eog');
    expect(final.text).toBe(before);
    expect(final.toolCalls).toHaveLength(1);
    expect(final.toolCalls[0]).toEqual({ index: 0, text: endEv.text, tokens: endEv.tokens });
    expect(final.truncatedToolCall).toBeUndefined();
    expect(final.generatedTokens).toBe(s.greedy.length);
    expect(sampledTokens(events)).toEqual(s.greedy);
    await ctx.dispose();
  });

  it('records every sampled token in result.tokens, span tokens included, in order', async () => {
    const s = script('single-marker');
    const ctx = await context('single-marker');
    const r = await ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true });
    expect(r.toolCalls).toHaveLength(1);
    expect(r.generatedTokens).toBe(s.greedy.length);
    expect(ids(r.tokens)).toEqual(s.greedy);
    await ctx.dispose();
  });

  it('multi-marker: detects the four-token start marker and releases the false start "<toolbox" as ordinary text', async () => {
    const s = script('multi-marker');
    const d = testModel('multi-marker').description;
    const startTokens = markersOf('multi-marker').start;
    const falseStart = d.markers.falseStart!.tokens;
    const open = indexOf(s.greedy, startTokens);
    expect(indexOf(s.greedy, falseStart)).toBeLessThan(open);
    const ctx = await context('multi-marker');
    const events = await collectEvents(ctx.generate({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true }));
    const final = finalOf(events);
    expect(shape(events)).toEqual(['text', 'toolCallStart#0', 'toolCallDelta#0', 'toolCallEnd#0', 'final']);
    expect(final.text).toBe(' First check the kit:<toolbox found. Now calling:');
    const texts = events.filter((e) => e.type === 'text');
    expect(texts.flatMap((e) => ids(e.tokens))).toEqual(s.greedy.slice(0, open));
    // The held-back false start comes out once, in place.
    expect(texts.map((e) => e.text).join('').split('<toolbox')).toHaveLength(2);
    expect(final.toolCalls).toHaveLength(1);
    const call = final.toolCalls[0]!;
    expect(ids(call.tokens)).toEqual(s.greedy.slice(open));
    expect(ids(call.tokens).slice(0, 4)).toEqual(startTokens);
    expect(call.text).toBe('{"name": "get_weather", "arguments": {"city": "Paris"}}');
    expect(events.filter((e) => e.type === 'toolCallDelta').map((e) => e.text).join('')).toBe(call.text);
    await ctx.dispose();
  });

  it('payload-marker: the span text keeps the payload markers and equals the deltas', async () => {
    const s = script('payload-marker');
    const ctx = await context('payload-marker');
    const events = await collectEvents(ctx.generate({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true }));
    const final = finalOf(events);
    expect(final.text).toBe(' Booking now.');
    expect(final.toolCalls.map((c) => c.text)).toEqual(['book_table<arg>{"party": 4}</arg>']);
    expect(events.filter((e) => e.type === 'toolCallDelta').map((e) => e.text).join('')).toBe(final.toolCalls[0]!.text);
    expect(sampledTokens(events)).toEqual(s.greedy);
    await ctx.dispose();
  });

  it('two-calls: two calls in one turn, with text before, between and after them', async () => {
    const s = script('two-calls');
    const ctx = await context('two-calls');
    const events = await collectEvents(ctx.generate({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true }));
    const final = finalOf(events);
    expect(shape(events)).toEqual([
      'text', 'toolCallStart#0', 'toolCallDelta#0', 'toolCallEnd#0',
      'text', 'toolCallStart#1', 'toolCallDelta#1', 'toolCallEnd#1',
      'text', 'final',
    ]);
    expect(final.finishReason).toBe('eog');
    expect(final.text).toBe(' Checking both.\n Both requested.');
    expect(final.toolCalls.map((c) => [c.index, JSON.parse(c.text)])).toEqual([
      [0, { name: 'get_weather', arguments: { city: 'Paris' } }],
      [1, { tool: 'get_time', args: { tz: 'CET' } }],
    ]);
    for (const i of [0, 1]) {
      const deltas = events.filter((e) => e.type === 'toolCallDelta' && e.index === i).map((e) => (e.type === 'toolCallDelta' ? e.text : ''));
      expect(deltas.join('')).toBe(final.toolCalls[i]!.text);
    }
    expect(sampledTokens(events)).toEqual(s.greedy);
    await ctx.dispose();
  });

  it.each(['single-marker', 'multi-marker', 'payload-marker', 'two-calls'] as const)(
    '%s: with toolCalls false, or a context without markers, the same output is plain text with no tool events',
    async (name) => {
      const s = script(name);
      const withMarkers = await context(name);
      const without = await context(name, { toolCallMarkers: false });
      for (const [ctx, opts] of [[withMarkers, { detectToolCalls: false }], [without, {}]] as const) {
        const events = await collectEvents(ctx.generate({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, ...opts }));
        const final = finalOf(events);
        expect(new Set(events.map((e) => e.type))).toEqual(new Set(['text', 'final']));
        expect(final.text).toBe(s.greedyText);
        expect(ids(final.tokens)).toEqual(s.greedy);
        expect(final.toolCalls).toEqual([]);
        expect(final.truncatedToolCall).toBeUndefined();
      }
      await withMarkers.dispose();
      await without.dispose();
    },
  );

  it('reports a span cut by maxTokens as toolCallTruncated, never as a complete call', async () => {
    const s = script('single-marker');
    const start = tokenId('single-marker', '<tool_call>');
    const open = s.greedy.indexOf(start);
    const close = s.greedy.indexOf(tokenId('single-marker', '</tool_call>'));
    const ctx = await context('single-marker');
    for (const maxTokens of [open + 1, open + 3, close]) {
      const events = await collectEvents(ctx.generate({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, maxTokens }));
      const final = finalOf(events);
      expect(final.finishReason).toBe('length');
      expect(events.some((e) => e.type === 'toolCallEnd')).toBe(false);
      const truncated = events.filter((e) => e.type === 'toolCallTruncated');
      expect(truncated).toHaveLength(1);
      expect(final.toolCalls).toEqual([]);
      expect(final.truncatedToolCall).toBeDefined();
      const t = final.truncatedToolCall!;
      expect(t.index).toBe(0);
      expect(ids(t.tokens)).toEqual(s.greedy.slice(open, maxTokens));
      expect(t.text).toBe(events.filter((e) => e.type === 'toolCallDelta').map((e) => (e.type === 'toolCallDelta' ? e.text : '')).join(''));
      const inside = s.greedyText.slice(s.greedyText.indexOf('<tool_call>') + '<tool_call>'.length);
      expect(inside.startsWith(t.text)).toBe(true);
      expect(final.text).toBe(s.greedyText.slice(0, s.greedyText.indexOf('<tool_call>')));
      expect(sampledTokens(events)).toEqual(s.greedy.slice(0, maxTokens));
    }
    await ctx.dispose();
  });

  it('never yields a complete call when the request is aborted inside a span', async () => {
    // Markers on long-script's own words: a span of nearly the whole 300-token script.
    const s = script('long-script');
    const start = tokenId('long-script', '▁quick');
    const end = tokenId('long-script', '▁end.');
    const spanLength = s.greedy.indexOf(end) - s.greedy.indexOf(start) + 1;
    const ctx = await context('long-script', { toolCallMarkers: { start: [start], end: [end] } });
    const ac = new AbortController();
    const gen = ctx.generate({ prompt: [...s.promptTokens], temperature: 0, signal: ac.signal, highWaterMark: 1 });
    const seen: GenerateEvent[] = [];
    const err = await (async () => {
      for await (const ev of gen) {
        seen.push(ev);
        if (ev.type === 'toolCallDelta') ac.abort(new Error('stop inside the span'));
      }
    })().then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(LlamuxError);
    expect((err as LlamuxError).code).toBe('ABORTED');
    expect(seen.some((e) => e.type === 'toolCallStart')).toBe(true);
    expect(seen.some((e) => e.type === 'toolCallEnd' || e.type === 'final')).toBe(false);
    // The open span is reported as truncated, with the tokens sampled so far.
    const truncated = seen.filter((e) => e.type === 'toolCallTruncated');
    expect(truncated).toHaveLength(1);
    if (truncated[0]?.type === 'toolCallTruncated') {
      const at = s.greedy.indexOf(start);
      expect(ids(truncated[0].tokens)).toEqual(s.greedy.slice(at, at + truncated[0].tokens.length));
    }
    expect(seen.filter((e) => e.type === 'toolCallDelta').length).toBeLessThan(spanLength - 1);
    await expect(gen.result).rejects.toMatchObject({ code: 'ABORTED' });
    // The context is fine afterwards: the whole span comes out as one complete call.
    const r = await ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true });
    expect(r.toolCalls).toHaveLength(1);
    expect(ids(r.toolCalls[0]!.tokens)).toHaveLength(spanLength);
    await ctx.dispose();
  });

  it('keeps the KV in step with the recorded tokens: the next turn reuses the prompt and every sampled token', async () => {
    for (const name of ['single-marker', 'two-calls', 'payload-marker'] as const) {
      const s = script(name);
      const ctx = await context(name, { sequences: 1 });
      const events = await collectEvents(ctx.generate({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true }));
      const first = finalOf(events);
      expect(first.toolCalls.length).toBeGreaterThan(0);
      const sampled = sampledTokens(events);
      expect(sampled).toHaveLength(first.generatedTokens);
      const next = [...s.promptTokens, ...sampled];
      const second = await ctx.complete({ prompt: next, temperature: 0 });
      expect(second.promptTokens).toBe(next.length);
      expect(second.reusedTokens).toBeGreaterThanOrEqual(first.promptTokens + first.generatedTokens - 1);
      expect(second.prefilledTokens).toBe(second.promptTokens - second.reusedTokens);
      // The script is over: the model ends at once.
      expect(second.generatedTokens).toBe(0);
      expect(second.finishReason).toBe('eog');
      await ctx.dispose();
    }
  });
});

describe('Context#generate() greedy tool-call syntax', () => {
  it('payload-marker: at temperature 1 the wrapper is the same in every span and only the payload varies', async () => {
    const s = script('payload-marker');
    const tok = (p: string) => tokenId('payload-marker', p);
    const ctx = await context('payload-marker', { contextSize: 8192, sequences: SEEDS.length });
    const runs = await Promise.all(SEEDS.map((seed) => ctx.complete({ prompt: [...s.promptTokens], ...EXACT, seed, emitTokenIds: true })));
    const spans = runs.flatMap((r) => r.toolCalls);
    expect(spans.length).toBeGreaterThan(0);
    for (const r of runs) {
      // A span, once open, always closes: the end marker is never given up for "▁Thanks.".
      expect(r.truncatedToolCall).toBeUndefined();
      expect(r.finishReason).toBe('eog');
    }
    const payloads = new Set<number>();
    for (const span of spans) {
      const t = ids(span.tokens);
      expect(t).toHaveLength(7);
      expect([t[0], t[1], t[2], t[3], t[5], t[6]]).toEqual([tok('<tool_call>'), tok('book_table'), tok('<arg>'), tok('{"party":'), tok('</arg>'), tok('</tool_call>')]);
      payloads.add(t[4]!);
    }
    // The payload keeps the request's sampler: both sides of its near tie appear.
    expect([...payloads].sort()).toEqual([tok('▁4}'), tok('▁5}')].sort());
    await ctx.dispose();
  });

  it('payload-marker: with greedyToolSyntax false the same seeds vary the wrapper too', async () => {
    const s = script('payload-marker');
    const tok = (p: string) => tokenId('payload-marker', p);
    const ctx = await context('payload-marker', { contextSize: 8192, sequences: SEEDS.length });
    const runs = await Promise.all(
      SEEDS.map((seed) => ctx.complete({ prompt: [...s.promptTokens], ...EXACT, seed, emitTokenIds: true, greedyToolSyntax: false })),
    );
    // Some span gave up its end marker for "▁Thanks." and never closed.
    const truncated = runs.filter((r) => r.truncatedToolCall !== undefined);
    expect(truncated.length).toBeGreaterThan(0);
    for (const r of truncated) expect(ids(r.truncatedToolCall!.tokens)).toContain(tok('▁Thanks.'));
    await ctx.dispose();
  });

  it('single-marker: a span without payload markers is all wrapper, sampled greedily unless greedyToolSyntax is false', async () => {
    const s = script('single-marker');
    const greedySpan = s.greedy.slice(s.greedy.indexOf(tokenId('single-marker', '<tool_call>')));
    const ctx = await context('single-marker', { contextSize: 8192, sequences: SEEDS.length });
    const on = await Promise.all(SEEDS.map((seed) => ctx.complete({ prompt: [...s.promptTokens], ...EXACT, seed, emitTokenIds: true })));
    const off = await Promise.all(SEEDS.map((seed) => ctx.complete({ prompt: [...s.promptTokens], ...EXACT, seed, emitTokenIds: true, greedyToolSyntax: false })));
    // On: whether to call is the model's (sampled) choice in text; once a span opens it is the script's.
    const opened = on.filter((r) => r.toolCalls.length + (r.truncatedToolCall ? 1 : 0) > 0);
    expect(opened.length).toBeGreaterThan(0);
    expect(opened.length).toBeLessThan(SEEDS.length);
    for (const r of opened) {
      expect(r.truncatedToolCall).toBeUndefined();
      expect(ids(r.toolCalls[0]!.tokens)).toEqual(greedySpan);
    }
    // Off: "▁\"Lyon\"" or "▁Done." inside a span.
    const offSpans = off.flatMap((r) => [...r.toolCalls, ...(r.truncatedToolCall ? [r.truncatedToolCall] : [])]);
    expect(offSpans.some((span) => ids(span.tokens).join() !== greedySpan.join())).toBe(true);
    await ctx.dispose();
  });

  it('markers on or off give the same output for a model whose output has no markers', async () => {
    // near-tie at temperature 1: markers made of tokens the script never produces.
    const nt = script('near-tie');
    const d = testModel('near-tie').description;
    const unused = [d.unk];
    const on = await context('near-tie', { contextSize: 8192, sequences: SEEDS.length, toolCallMarkers: { start: unused, end: [d.bos] } });
    const off = await context('near-tie', { contextSize: 8192, sequences: SEEDS.length, toolCallMarkers: false });
    const run = (ctx: Context) => Promise.all(SEEDS.map((seed) => ctx.complete({ prompt: [...nt.promptTokens], ...EXACT, seed, emitTokenIds: true })));
    const [a, b] = [await run(on), await run(off)];
    expect(a.map((r) => [r.text, ids(r.tokens)])).toEqual(b.map((r) => [r.text, ids(r.tokens)]));
    expect(new Set(a.map((r) => r.text)).size).toBe(2);
    await Promise.all([on.dispose(), off.dispose()]);

    // long-script greedy: a two-token start marker whose first token the script does write
    // ("▁Hello" then "▁world!", not "▁there"): partial matches are held back and released.
    const ls = script('long-script');
    const hello = tokenId('long-script', '▁Hello');
    const held = await context('long-script', { toolCallMarkers: { start: [hello, tokenId('long-script', '▁quick')], end: [tokenId('long-script', '▁fox')] } });
    const events = await collectEvents(held.generate({ prompt: [...ls.promptTokens], temperature: 0, emitTokenIds: true }));
    const final = finalOf(events);
    expect(new Set(events.map((e) => e.type))).toEqual(new Set(['text', 'final']));
    expect(final.text).toBe(ls.greedyText);
    expect(events.filter((e) => e.type === 'text').flatMap((e) => ids(e.tokens))).toEqual(ls.greedy);
    await held.dispose();
  });
});
