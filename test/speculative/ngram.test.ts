// Speculative decoding with n-gram drafts (issue 27) on the scripted models: the output is the
// output without speculation, token for token (greedy: the script; sampled: the same draw for
// each seed), through markers, tool grammars, stops, maxTokens, aborts, sessions and reuse,
// while drafts copied from the prompt are really accepted.
import { afterAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, type Context, type ContextOptions, type GenerateResult, type GenerateTool, type Model } from '../../src/index.js';
import { TEST_MODEL_NAMES, testModelSpec } from '../../src/gguf/fixtures.js';
import { collectEvents, markersOf, ONE_THREAD, script, testModel, type TestModelName } from '../helpers/models.js';
import { zooModels } from '../helpers/zoo.js';
import { QWEN_ANSWER, QWEN_REASONING, QWEN_THINK_PROMPT, ensureFormatModel, qwenThinkSpec } from '../formats/fixtures.js';

const EXACT = { temperature: 1, topK: 0, topP: 1, minP: 0 } as const;
const SEEDS = Array.from({ length: 12 }, (_, i) => 17 + i * 7919);
const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);

const models = new Map<TestModelName, Model>();
async function model(name: TestModelName): Promise<Model> {
  let m = models.get(name);
  if (!m) {
    m = await loadModel(testModel(name).path);
    models.set(name, m);
  }
  return m;
}
afterAll(async () => {
  for (const m of models.values()) await m.dispose();
});

async function context(name: TestModelName, spec: boolean, extra: ContextOptions = {}): Promise<Context> {
  const m = await model(name);
  return m.createContext({ ...ONE_THREAD, contextSize: 4096, toolCallMarkers: false, speculative: spec ? 'ngram' : false, ...extra });
}

/** The script's prompt, its greedy output, then the prompt again (BOS once): the output copies text already in the prompt. */
function copying(name: TestModelName, scriptName = 'main'): number[] {
  const s = script(name, scriptName);
  return [...s.promptTokens, ...s.greedy, ...s.promptTokens.slice(1)];
}

const CASES: Array<[TestModelName, string]> = TEST_MODEL_NAMES.flatMap((name) =>
  Object.keys(testModel(name).description.scripts).map((s): [TestModelName, string] => [name, s]),
);

describe('speculative: n-gram drafts on scripted models (greedy)', () => {
  it.each(CASES)('%s (%s): a prompt that holds the output gives the output without speculation, with drafts accepted', async (name, scriptName) => {
    const s = script(name, scriptName);
    const prompt = copying(name, scriptName);
    const plain = await context(name, false);
    const spec = await context(name, true);
    try {
      expect(spec.settings?.speculative).toBe('ngram');
      const a = await plain.complete({ prompt, temperature: 0, emitTokenIds: true, renderSpecial: true });
      const b = await spec.complete({ prompt, temperature: 0, emitTokenIds: true, renderSpecial: true });
      expect(ids(b)).toEqual(ids(a));
      expect(b.text).toBe(a.text);
      expect(b.finishReason).toBe(a.finishReason);
      expect(a.timings.draftedTokens).toBe(0);
      // Flag models read the prompt (a flag token in the copy changes what follows); the others
      // repeat their script, drafted from the prompt.
      if (!testModelSpec(name).flags?.length) {
        expect(ids(b)).toEqual(s.greedy);
        if (s.greedy.length >= 4) expect(b.timings.acceptedTokens).toBeGreaterThan(0);
      }
      expect(b.timings.acceptedTokens).toBeLessThanOrEqual(b.timings.draftedTokens);
      // the plain prompt (no copy) too
      const c = await spec.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true });
      expect(ids(c)).toEqual(s.greedy);
    } finally {
      await plain.dispose();
      await spec.dispose();
    }
  });

  it('a prompt whose copy disagrees with the model: drafts are rejected, the output is the script', async () => {
    const s = script('long-script');
    // The script with every 5th token replaced: each n-gram drafts a wrong token within 4.
    const wrong = s.greedy.map((t, i) => (i % 5 === 4 ? s.greedy[(i + 50) % s.greedy.length]! : t));
    const prompt = [...s.promptTokens, ...wrong, ...s.promptTokens.slice(1)];
    const ctx = await context('long-script', true);
    try {
      const r = await ctx.complete({ prompt, temperature: 0, emitTokenIds: true });
      expect(ids(r)).toEqual(s.greedy);
      expect(r.timings.draftedTokens).toBeGreaterThan(r.timings.acceptedTokens);
      expect(r.timings.acceptedTokens).toBeGreaterThan(0);
      const stats = ctx.cacheStats();
      expect(stats.specDraftedTokens).toBe(r.timings.draftedTokens);
      expect(stats.specAcceptedTokens).toBe(r.timings.acceptedTokens);
      expect(stats.specVerifications).toBeGreaterThan(0);
    } finally {
      await ctx.dispose();
    }
  });

  it('a copied span after text whose drafts all miss: the pause does not hide the copy', async () => {
    const s = script('long-script');
    const g = s.greedy;
    // The first 150 tokens appear only with every bigram followed by a wrong token (each draft
    // misses at once: the request pauses); the last 150 appear exactly.
    const wrong: number[] = [];
    for (let i = 0; i + 1 < 150; i++) wrong.push(g[i]!, g[i + 1]!, g[(i + 50) % 150]!);
    const prompt = [...s.promptTokens, ...wrong, ...g.slice(150), ...s.promptTokens.slice(1)];
    const ctx = await context('long-script', true);
    try {
      const r = await ctx.complete({ prompt, temperature: 0, emitTokenIds: true });
      expect(ids(r)).toEqual(g);
      // the misses stayed few (a pause that doubles), and the copy was drafted almost whole
      expect(r.timings.draftedTokens - r.timings.acceptedTokens).toBeLessThan(40);
      expect(r.timings.acceptedTokens).toBeGreaterThan(110);  // 27 without the probes on long matches
    } finally {
      await ctx.dispose();
    }
  });

  it('per-request opt-out: speculative false drafts nothing and gives the same output', async () => {
    const s = script('long-script');
    const ctx = await context('long-script', true);
    try {
      const r = await ctx.complete({ prompt: copying('long-script'), temperature: 0, emitTokenIds: true, speculative: false });
      expect(ids(r)).toEqual(s.greedy);
      expect(r.timings.draftedTokens).toBe(0);
      expect(ctx.cacheStats().specDraftedTokens).toBe(0);
    } finally {
      await ctx.dispose();
    }
  });

  it('maxTokens and stop strings end at the same token, and the KV keeps what it would without speculation', async () => {
    const s = script('long-script');
    const prompt = copying('long-script');
    const plain = await context('long-script', false);
    const spec = await context('long-script', true);
    try {
      for (const maxTokens of [1, 2, 3, 7, 13, 64]) {
        const r = await spec.complete({ prompt, temperature: 0, maxTokens, emitTokenIds: true });
        expect(ids(r)).toEqual(s.greedy.slice(0, maxTokens));
        expect(r.finishReason).toBe('length');
      }
      const a = await plain.complete({ prompt, temperature: 0, stop: ['Stop here'], emitTokenIds: true });
      const b = await spec.complete({ prompt, temperature: 0, stop: ['Stop here'], emitTokenIds: true });
      expect(b.finishReason).toBe('stop');
      expect(b.text).toBe(a.text);
      expect(ids(b)).toEqual(ids(a));
      expect(b.text.trimEnd().endsWith('Hello world!')).toBe(true);
      expect(b.timings.acceptedTokens).toBeGreaterThan(10);
      // The next prompt extends the output: both contexts reuse exactly the same KV.
      const next = [...prompt, ...ids(a)];
      const a2 = await plain.complete({ prompt: next, temperature: 0, maxTokens: 8, emitTokenIds: true });
      const b2 = await spec.complete({ prompt: next, temperature: 0, maxTokens: 8, emitTokenIds: true });
      expect(ids(b2)).toEqual(ids(a2));
      expect(b2.cache).toEqual(a2.cache);
      expect(b2.reusedTokens).toBeGreaterThan(prompt.length);
    } finally {
      await plain.dispose();
      await spec.dispose();
    }
  });

  it('sessions: a turn continued after a speculative turn reuses the same KV and gives the script', async () => {
    const s = script('long-script');
    const prompt = copying('long-script');
    const results: GenerateResult[][] = [];
    for (const on of [false, true]) {
      const ctx = await context('long-script', on);
      try {
        const chat = ctx.createSession();
        const t1 = await chat.generate({ prompt, temperature: 0, maxTokens: 40, emitTokenIds: true }).result;
        const tail = s.greedy.slice(100, 104);
        const t2 = await chat.continue(tail, { temperature: 0, maxTokens: 30, emitTokenIds: true, expectCommitted: [...prompt, ...ids(t1)] }).result;
        expect(ids(t1)).toEqual(s.greedy.slice(0, 40));
        expect(ids(t2)).toEqual(s.greedy.slice(104, 134));
        expect(t2.cache.outcome).toBe('sticky');
        expect(t2.prefilledTokens).toBe(tail.length + 1);
        if (on) expect(t2.timings.acceptedTokens).toBeGreaterThan(0);
        results.push([t1, t2]);
        await chat.end();
      } finally {
        await ctx.dispose();
      }
    }
    expect(results[1]![1]!.cache).toEqual(results[0]![1]!.cache);
  });

  it('an abort mid-verification streams a prefix of the output, and the context goes on exactly', async () => {
    const s = script('long-script');
    const prompt = copying('long-script');
    const ctx = await context('long-script', true);
    try {
      const ac = new AbortController();
      const gen = ctx.generate({ prompt, temperature: 0, emitTokenIds: true, signal: ac.signal, highWaterMark: 4 });
      const seen: number[] = [];
      await expect(
        (async () => {
          for await (const ev of gen) {
            if (ev.type === 'text') seen.push(...(ev.tokens ?? []));
            if (seen.length >= 20) ac.abort();
          }
        })(),
      ).rejects.toMatchObject({ code: 'ABORTED' });
      expect(seen.length).toBeGreaterThanOrEqual(20);
      expect(seen).toEqual(s.greedy.slice(0, seen.length));
      const r = await ctx.complete({ prompt, temperature: 0, emitTokenIds: true });
      expect(ids(r)).toEqual(s.greedy);
    } finally {
      await ctx.dispose();
    }
  });

  it('concurrent sequences, some opted out, each give their own output', async () => {
    const s = script('long-script');
    const prompt = copying('long-script');
    const ctx = await context('long-script', true, { sequences: 4, speculative: { mode: 'ngram', maxSequences: 4 } });
    try {
      const runs = await Promise.all([
        ctx.complete({ prompt, temperature: 0, emitTokenIds: true }),
        ctx.complete({ prompt, temperature: 0, emitTokenIds: true, speculative: false }),
        ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, maxTokens: 90 }),
        ctx.complete({ prompt, temperature: 0, emitTokenIds: true, maxTokens: 150 }),
      ]);
      expect(ids(runs[0]!)).toEqual(s.greedy);
      expect(ids(runs[1]!)).toEqual(s.greedy);
      expect(ids(runs[2]!)).toEqual(s.greedy.slice(0, 90));
      expect(ids(runs[3]!)).toEqual(s.greedy.slice(0, 150));
      expect(runs[0]!.timings.acceptedTokens).toBeGreaterThan(0);
      expect(runs[1]!.timings.draftedTokens).toBe(0);
    } finally {
      await ctx.dispose();
    }
  });

  it('more decoding sequences than maxSequences: no drafts', async () => {
    const s = script('long-script');
    const prompt = copying('long-script');
    const ctx = await context('long-script', true, { sequences: 2, speculative: { mode: 'ngram', maxSequences: 1 } });
    try {
      // A long plain request decodes first; the second one starts beside it, so two sequences
      // decode on every tick of the second one.
      const long = ctx.generate({ prompt, temperature: 0, emitTokenIds: true, speculative: false });
      const it = long[Symbol.asyncIterator]();
      await it.next();
      const short = await ctx.complete({ prompt, temperature: 0, emitTokenIds: true, maxTokens: 30 });
      const first = await long.result;
      expect(ids(short)).toEqual(s.greedy.slice(0, 30));
      expect(ids(first)).toEqual(s.greedy);
      expect(first.generatedTokens).toBeGreaterThan(short.generatedTokens + 100);
      expect(short.timings.draftedTokens).toBe(0);
      // alone, the same request drafts
      const alone = await ctx.complete({ prompt, temperature: 0, emitTokenIds: true, maxTokens: 30 });
      expect(alone.timings.acceptedTokens).toBeGreaterThan(0);
    } finally {
      await ctx.dispose();
    }
  });
});

describe('speculative: sampled output (temperature 1)', () => {
  it('every seed draws the same tokens with and without speculation, drafts crossing the near tie', async () => {
    const s = script('near-tie');
    const prompt = copying('near-tie');
    const plain = await context('near-tie', false);
    const spec = await context('near-tie', true);
    try {
      const seen = new Set<string>();
      let accepted = 0;
      for (const seed of SEEDS) {
        const a = await plain.complete({ prompt, ...EXACT, seed, emitTokenIds: true });
        const b = await spec.complete({ prompt, ...EXACT, seed, emitTokenIds: true });
        expect(ids(b)).toEqual(ids(a));
        expect(b.text).toBe(a.text);
        seen.add(b.text);
        accepted += b.timings.acceptedTokens;
      }
      // both branches of the near tie were drawn: drafts were accepted on one and rejected on the other
      expect(seen.size).toBe(2);
      expect(s.branches.length).toBe(1);
      expect(accepted).toBeGreaterThan(0);
    } finally {
      await plain.dispose();
      await spec.dispose();
    }
  });
});

describe('speculative: tool-call spans and grammars', () => {
  const WEATHER: GenerateTool = {
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city', 'days'] },
  };
  const GOOD_CALL = '{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}';

  it('markers: the same spans and events, drafts accepted inside them', async () => {
    for (const name of ['single-marker', 'payload-marker', 'two-calls'] as const) {
      const prompt = copying(name);
      const plain = await context(name, false, { toolCallMarkers: markersOf(name) });
      const spec = await context(name, true, { toolCallMarkers: markersOf(name) });
      try {
        const a = await collectEvents(plain.generate({ prompt, temperature: 0, emitTokenIds: true }));
        const b = await collectEvents(spec.generate({ prompt, temperature: 0, emitTokenIds: true }));
        const strip = (evs: typeof a): unknown[] => evs.map((e) => (e.type === 'final' ? { ...e, timings: undefined, cache: undefined } : e));
        // Event boundaries may differ (several tokens per tick): the stream's content may not.
        const fa = a.at(-1)!, fb = b.at(-1)!;
        if (fa.type !== 'final' || fb.type !== 'final') throw new Error('no final');
        expect(fb.toolCalls).toEqual(fa.toolCalls);
        expect(fb.text).toBe(fa.text);
        expect(ids(fb)).toEqual(ids(fa));
        expect(fb.toolCalls.length).toBeGreaterThan(0);
        expect(b.filter((e) => e.type === 'toolCallStart').length).toBe(a.filter((e) => e.type === 'toolCallStart').length);
        expect(strip(b).filter((e) => (e as { type: string }).type === 'toolCallEnd')).toEqual(strip(a).filter((e) => (e as { type: string }).type === 'toolCallEnd'));
        if (name !== 'two-calls') expect(fb.timings.acceptedTokens).toBeGreaterThan(0);
      } finally {
        await plain.dispose();
        await spec.dispose();
      }
    }
  });

  it('drafts copied from a broken call are cut where the tool grammar refuses them; the valid call comes out', async () => {
    const prompt = copying('grammar-call');
    const ctx = await context('grammar-call', true, { toolCallMarkers: markersOf('grammar-call') });
    const plain = await context('grammar-call', false, { toolCallMarkers: markersOf('grammar-call') });
    try {
      const r = await ctx.complete({ prompt, temperature: 0, tools: [WEATHER], emitTokenIds: true });
      const a = await plain.complete({ prompt, temperature: 0, tools: [WEATHER], emitTokenIds: true });
      expect(r.toolCalls[0]!.text).toBe(GOOD_CALL);
      expect(ids(r)).toEqual(ids(a));
      // Each wrong token of the copied call is one the grammar refuses (the script's near ties
      // are exactly those): no verified draft token is one the grammar could not take.
      expect(r.timings.draftedTokens).toBe(r.timings.acceptedTokens);
      // without tools the same prompt drafts the broken call, and it is kept (it is the greedy output)
      const free = await ctx.complete({ prompt, temperature: 0, emitTokenIds: true });
      expect(free.toolCalls[0]!.text).toBe('{"name": "get_wether", "arguments": {"city": Rome, "days": "3"}}');
      expect(free.timings.acceptedTokens).toBeGreaterThan(r.timings.acceptedTokens);
      // with the valid call in the prompt, its drafts pass the grammar
      const good = [...prompt.slice(0, -script('grammar-call').promptTokens.length + 1), ...ids(r), ...script('grammar-call').promptTokens.slice(1)];
      const r2 = await ctx.complete({ prompt: good, temperature: 0, tools: [WEATHER], emitTokenIds: true });
      expect(r2.toolCalls[0]!.text).toBe(GOOD_CALL);
      expect(ids(r2)).toEqual(ids(r));
      expect(r2.timings.acceptedTokens).toBeGreaterThan(0);
    } finally {
      await ctx.dispose();
      await plain.dispose();
    }
  });
});

describe('speculative: reasoning spans', () => {
  it('reasoning events and a spent reasoning budget (forced end marker) come out as without speculation', async () => {
    const m = await loadModel(await ensureFormatModel(qwenThinkSpec()));
    try {
      // the previous turn's reasoning and answer in the prompt: drafts for both
      const prompt = `${QWEN_THINK_PROMPT}${QWEN_REASONING}</think>${QWEN_ANSWER}<|im_end|>\n${QWEN_THINK_PROMPT}`;
      const plain = await m.createContext({ ...ONE_THREAD, contextSize: 2048, speculative: false });
      const spec = await m.createContext({ ...ONE_THREAD, contextSize: 2048, speculative: 'ngram' });
      try {
        for (const budget of [undefined, 2, 0]) {
          const o = { prompt, parseSpecial: true, temperature: 0, emitTokenIds: true, ...(budget !== undefined ? { reasoningBudget: budget } : {}) };
          const a = await plain.complete(o);
          const b = await spec.complete(o);
          expect(ids(b)).toEqual(ids(a));
          expect(b.reasoning).toEqual(a.reasoning);
          expect(b.text).toBe(QWEN_ANSWER);
          expect(b.reasoning?.text).toBe(budget === undefined ? QWEN_REASONING : budget === 2 ? ' Two plus' : '');
          if (budget === undefined) expect(b.timings.acceptedTokens).toBeGreaterThan(0);
        }
      } finally {
        await plain.dispose();
        await spec.dispose();
      }
    } finally {
      await m.dispose();
    }
  });
});

describe('speculative: options and memories', () => {
  it('rejects bad options with INVALID_ARGUMENT', async () => {
    const m = await model('near-tie');
    await expect(m.createContext({ ...ONE_THREAD, speculative: { mode: 'ngram', ngramMin: 4, ngramMax: 2 } })).rejects.toBeInstanceOf(LlamuxError);
    await expect(m.createContext({ ...ONE_THREAD, speculative: { mode: 'ngram', draftMax: 0 } })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(m.createContext({ ...ONE_THREAD, speculative: 'draft' as never })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    const ctx = await m.createContext({ ...ONE_THREAD, contextSize: 512 });
    expect(ctx.settings?.speculative).toBe('off');
    expect(() => ctx.generate({ prompt: 'x', speculative: 'yes' as never })).toThrow(LlamuxError);
    await ctx.dispose();
  });

  it('a hybrid memory without rollback snapshots in llama.cpp (granitehybrid) does not speculate and says why', async () => {
    const d = (await zooModels(['granitehybrid']))['granitehybrid'];
    const m = await loadModel(d.path);
    try {
      const ctx = await m.createContext({ ...ONE_THREAD, contextSize: 1024, speculative: 'ngram' });
      expect(ctx.settings?.speculative).toBe('off');
      expect(ctx.settings?.speculativeOff).toMatch(/recurrent or hybrid/);
      const words = m.tokenize('one two three four one two three four one two', { addSpecial: false });
      const r = await ctx.complete({ prompt: words, temperature: 0, maxTokens: 6 });
      expect(r.generatedTokens).toBeGreaterThan(0);
      expect(r.timings.draftedTokens).toBe(0);
      await ctx.dispose();
    } finally {
      await m.dispose();
    }
  });
});
