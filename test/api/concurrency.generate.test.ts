// Concurrency, stop strings and limits (issue 3), checked against the scripts of the
// scripted models: whatever the batching, every request must see exactly its own script.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Context, type GenerateEvent, type GenerateOptions, type GenerateResult, type Model } from '../../src/index.js';
import { collectEvents, ONE_THREAD, piecesText, script, testModel, type TestModelName } from '../helpers/models.js';

const EXACT = { temperature: 1, topK: 0, topP: 1, minP: 0 } as const;
const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
/** What a result shows of a request: enough to compare two runs exactly. */
const outcome = (r: GenerateResult) => ({ tokens: ids(r), text: r.text, finishReason: r.finishReason, stop: r.stop, generatedTokens: r.generatedTokens });

describe('Context#generate() with concurrent requests', () => {
  const models = new Map<TestModelName, Model>();
  const load = async (name: TestModelName): Promise<Model> => {
    let m = models.get(name);
    if (!m) {
      m = await loadModel(testModel(name).path);
      models.set(name, m);
    }
    return m;
  };
  afterAll(async () => {
    for (const m of models.values()) await m.dispose();
  });

  it('a request preempted by a full KV cache continues its script exactly, and its stream neither repeats nor skips', async () => {
    const s = script('long-script');
    const model = await load('long-script');
    // 4 points of the 300-token script in 512 shared cells: together they need about 1,200.
    const starts = [0, 10, 20, 30];
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 512, sequences: 4, toolCallMarkers: false });
    const streamed = starts.map(() => [] as number[]);
    const results = await Promise.all(
      starts.map(async (k, i) => {
        const gen = ctx.generate({ prompt: [...s.promptTokens, ...s.greedy.slice(0, k)], ...EXACT, seed: 7 + i, emitTokenIds: true });
        for await (const ev of gen) if (ev.type === 'text') streamed[i]!.push(...(ev.tokens ?? []));
        return gen.result;
      }),
    );
    results.forEach((r, i) => {
      expect(ids(r)).toEqual(s.greedy.slice(starts[i]));
      expect(r.finishReason).toBe('eog');
      expect(streamed[i]).toEqual(ids(r));
    });
    expect(ctx.cacheStats().preemptions).toBeGreaterThan(0);
    await ctx.dispose();
  });

  it('runs 16 concurrent greedy requests on one context exactly as it runs them one at a time', async () => {
    const s = script('long-script');
    const model = await load('long-script');
    // 16 different points of the script (and so 16 different prompt lengths and outputs),
    // with a mix of limits and stop strings.
    const requests: GenerateOptions[] = Array.from({ length: 16 }, (_, i) => {
      const k = i * 17;
      const o: GenerateOptions = { prompt: [...s.promptTokens, ...s.greedy.slice(0, k)], temperature: 0, emitTokenIds: true };
      if (i % 4 === 1) o.maxTokens = 5 + i;
      if (i % 4 === 2) o.stop = [' Stop here', ' This is'];
      return o;
    });
    const concurrentCtx = await model.createContext({ ...ONE_THREAD, contextSize: 8192, sequences: 16, toolCallMarkers: false });
    expect(concurrentCtx.settings.sequences).toBe(16);
    const concurrent = await Promise.all(requests.map((o) => concurrentCtx.complete(o)));
    await concurrentCtx.dispose();

    const serialCtx = await model.createContext({ ...ONE_THREAD, contextSize: 8192, sequences: 1, toolCallMarkers: false });
    const serial: GenerateResult[] = [];
    for (const o of requests) serial.push(await serialCtx.complete(o));
    await serialCtx.dispose();

    expect(concurrent.map(outcome)).toEqual(serial.map(outcome));
    // And both are the script: request i continues from script position 17·i.
    concurrent.forEach((r, i) => {
      const rest = s.greedy.slice(i * 17);
      expect(rest.slice(0, r.generatedTokens)).toEqual(ids(r));
      if (i % 4 === 0 || i % 4 === 3) {
        expect(ids(r)).toEqual(rest);
        expect(r.finishReason).toBe('eog');
      }
      if (i % 4 === 1) expect(r.finishReason).toBe('length');
    });
  });

  it('keeps each request on its own sampler: 16 concurrent seeded requests at temperature 1 match one-at-a-time runs', async () => {
    const s = script('single-marker');
    const model = await load('single-marker');
    const requests: GenerateOptions[] = Array.from({ length: 16 }, (_, i) => ({
      prompt: [...s.promptTokens],
      ...(i % 5 === 4 ? { temperature: 0 } : EXACT),
      seed: 500 + i,
      emitTokenIds: true,
    }));
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 16, toolCallMarkers: false });
    const concurrent = await Promise.all(requests.map((o) => ctx.complete(o)));
    const serial: GenerateResult[] = [];
    for (const o of requests) serial.push(await ctx.complete(o));
    await ctx.dispose();
    expect(concurrent.map(outcome)).toEqual(serial.map(outcome));
    const outcomes = s.outcomes.map((o) => o.tokens.join(','));
    for (const r of concurrent) expect(outcomes).toContain(ids(r).join(','));
    // The seeds really sampled: more than one outcome among the 16.
    expect(new Set(concurrent.map((r) => ids(r).join(','))).size).toBeGreaterThan(1);
  });

  it('streams tool calls of 16 concurrent requests exactly as one at a time', async () => {
    const model = await load('two-calls');
    const s = script('two-calls');
    const d = testModel('two-calls').description;
    const markers = { start: [...d.markers.toolCallStart!.tokens], end: [...d.markers.toolCallEnd!.tokens] };
    // Whole prompts, prompts that end inside the first call, and limits that cut a span.
    const requests: GenerateOptions[] = Array.from({ length: 16 }, (_, i) => ({
      prompt: [...s.promptTokens, ...s.greedy.slice(0, i % 4 === 3 ? 5 : 0)],
      temperature: 0,
      emitTokenIds: true,
      ...(i % 4 === 1 ? { maxTokens: 4 + i } : {}),
      ...(i % 4 === 2 ? { stop: [' Both'] } : {}),
    }));
    const view = async (gen: AsyncIterable<GenerateEvent>) => {
      const events = await collectEvents(gen);
      const final = events.at(-1);
      if (final?.type !== 'final') throw new Error('no final event');
      return {
        // Event boundaries may differ with batching; the order of event kinds may not.
        kinds: events.map((e) => e.type).filter((t, i, a) => t !== a[i - 1]),
        deltas: [0, 1].map((i) => events.map((e) => (e.type === 'toolCallDelta' && e.index === i ? e.text : '')).join('')),
        text: final.text,
        finishReason: final.finishReason,
        toolCalls: final.toolCalls.map((c) => ({ index: c.index, text: c.text, tokens: Array.from(c.tokens) })),
        truncated: final.truncatedToolCall?.text,
      };
    };
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 16, toolCallMarkers: markers });
    const concurrent = await Promise.all(requests.map((o) => view(ctx.generate(o))));
    const serial = [];
    for (const o of requests) serial.push(await view(ctx.generate(o)));
    await ctx.dispose();
    expect(concurrent).toEqual(serial);
    expect(concurrent[0]!.toolCalls).toHaveLength(2);
    expect(concurrent[0]!.text).toBe(' Checking both.\n Both requested.');
    expect(concurrent[2]!.text).toBe(' Checking both.\n');
    expect(concurrent[2]!.toolCalls).toHaveLength(2);
  });

  it('runs requests on several models and contexts at once, each giving its own script', async () => {
    const names: TestModelName[] = ['near-tie', 'two-calls', 'payload-marker', 'two-turn'];
    const ctxs = await Promise.all(names.map(async (n) => (await load(n)).createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 4, toolCallMarkers: false })));
    const jobs = names.flatMap((n, j) =>
      Object.values(testModel(n).description.scripts).flatMap((s) =>
        [0, 1, 2, 3].map(async () => ({ s, r: await ctxs[j]!.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, renderSpecial: true }) })),
      ),
    );
    const done = await Promise.all(jobs);
    expect(done).toHaveLength(20);
    for (const { s, r } of done) {
      expect(ids(r)).toEqual(s.greedy);
      expect(r.text).toBe(s.greedyText);
      expect(r.finishReason).toBe('eog');
    }
    await Promise.all(ctxs.map((c) => c.dispose()));
  });
});

describe('Context#generate() stop strings, limits and end of generation', () => {
  const s = script('long-script');
  let model: Model;
  let ctx: Context;
  beforeAll(async () => {
    model = await loadModel(testModel('long-script').path);
    ctx = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 4, toolCallMarkers: false });
  });
  afterAll(async () => {
    await model.dispose();
  });

  it.each([
    [' Stop here', 'two whole tokens'],
    ['lo world! St', 'the end of one token, a whole token and the start of the next'],
    ['ere ple', 'the end of one token and the start of the next'],
    ['quick', 'the inside of one token'],
    [' The', 'the first token'],
  ])('ends before the stop string %j (%s) and never emits text from it onwards', async (stop) => {
    const at = s.greedyText.indexOf(stop);
    expect(at).toBeGreaterThanOrEqual(0);
    const events = await collectEvents(ctx.generate({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, stop: ['never-in-the-script', stop] }));
    const final = events.at(-1)!;
    if (final.type !== 'final') throw new Error('no final event');
    expect(final.finishReason).toBe('stop');
    expect(final.stop).toBe(stop);
    expect(final.text).toBe(s.greedyText.slice(0, at));
    const texts = events.filter((e) => e.type === 'text');
    expect(texts.map((e) => e.text).join('')).toBe(final.text);
    // The tokens sampled are the script up to (at least) the token that completed the stop.
    const n = final.tokens!.length;
    expect(Array.from(final.tokens!)).toEqual(s.greedy.slice(0, n));
    expect(piecesText(s.greedyPieces.slice(0, n)).length).toBeGreaterThanOrEqual(at + stop.length);
    expect(piecesText(s.greedyPieces.slice(0, n - 1)).length).toBeLessThan(at + stop.length);
  });

  it('ends with length after exactly maxTokens tokens', async () => {
    for (const maxTokens of [1, 37, 299]) {
      const r = await ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, maxTokens });
      expect(r.finishReason).toBe('length');
      expect(r.generatedTokens).toBe(maxTokens);
      expect(ids(r)).toEqual(s.greedy.slice(0, maxTokens));
      expect(r.text).toBe(piecesText(s.greedyPieces.slice(0, maxTokens)));
    }
    // One more than the script: the script ends first.
    const r = await ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, maxTokens: s.greedy.length + 1 });
    expect(r.finishReason).toBe('eog');
    expect(r.generatedTokens).toBe(s.greedy.length);
  });

  it("ends with eog at once on another fixture's prompt, which this script does not know", async () => {
    const other = script('near-tie').prompt;
    const r = await ctx.complete({ prompt: other, temperature: 0, emitTokenIds: true });
    expect(r.finishReason).toBe('eog');
    expect(r.generatedTokens).toBe(0);
    expect(r.text).toBe('');
    expect(r.promptTokens).toBe(model.tokenize(other).length);
    // Likewise at temperature 1: EOS dominates every unscripted token.
    const hot = await ctx.complete({ prompt: other, ...EXACT, seed: 3 });
    expect(hot.generatedTokens).toBe(0);
  });

  it('ends with eog at once when the prompt already holds the whole script', async () => {
    const r = await ctx.complete({ prompt: [...s.promptTokens, ...s.greedy], temperature: 0, emitTokenIds: true });
    expect(r.finishReason).toBe('eog');
    expect(r.generatedTokens).toBe(0);
    expect(r.text).toBe('');
  });
});
