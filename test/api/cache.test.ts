import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, type Context, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

async function rejection(p: Promise<unknown>): Promise<LlamuxError> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(LlamuxError);
  return e as LlamuxError;
}

describe('KV-prefix cache and sessions (tiny Llama 2 model)', () => {
  let model: Model;
  let noEos: Record<string, number>;
  const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => ['alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta'][(i * 7 + seed) % 6]).join(' ');

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('reuses the longest common prefix of an idle sequence: prefilled = prompt - reused, exactly', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 2 });
    const base = model.tokenize(words(60, 1));
    const a = await ctx.complete({ prompt: base, maxTokens: 4, temperature: 0, logitBias: noEos });
    expect(a.cache.outcome).toBe('cold');
    expect(a.reusedTokens).toBe(0);
    expect(a.prefilledTokens).toBe(base.length);
    const extended = Int32Array.from([...base.subarray(0, 40), ...model.tokenize(' something else entirely', { addSpecial: false })]);
    const b = await ctx.complete({ prompt: extended, maxTokens: 4, temperature: 0, logitBias: noEos });
    expect(b.reusedTokens).toBe(40);
    expect(b.prefilledTokens).toBe(extended.length - 40);
    expect(b.cache).toMatchObject({ outcome: 'partial', tier: 'live', reusedTokens: 40 });
    const c = await ctx.complete({ prompt: extended, maxTokens: 4, temperature: 0, logitBias: noEos });
    expect(c.cache.outcome).toBe('exact');
    expect(c.reusedTokens).toBe(extended.length - 1);
    expect(c.prefilledTokens).toBe(1);
    expect(c.text).toBe(b.text);
    await ctx.dispose();
  });

  it('cacheScope keeps KV reuse inside a scope: live sequences, shared prefixes and the RAM tier', async () => {
    const opts = { maxTokens: 3, temperature: 0, logitBias: noEos } as const;
    const prompt = model.tokenize(words(60, 21));
    const other = model.tokenize(words(60, 22));
    // Live and shared KV (3 sequences, one per scope): only the same scope reuses it.
    const live = await model.createContext({ contextSize: 2048, sequences: 3, cacheRamMb: 0 });
    const a1 = await live.complete({ prompt, ...opts, cacheScope: 'alice' });
    expect(a1.cache.outcome).toBe('cold');
    const b1 = await live.complete({ prompt, ...opts, cacheScope: 'bob' });
    expect(b1.reusedTokens).toBe(0);
    expect(b1.cache.outcome).toBe('cold');
    const shared = await live.complete({ prompt, ...opts });
    expect(shared.reusedTokens).toBe(0);
    const a2 = await live.complete({ prompt, ...opts, cacheScope: 'alice' });
    expect(a2.reusedTokens).toBe(prompt.length - 1);
    expect(a2.text).toBe(a1.text);
    expect(b1.text).toBe(a1.text); // same output, computed separately
    await live.dispose();
    // RAM tier (1 sequence, so each prompt pushes the last one out): a scoped prompt never
    // enters the shared prefix tier; an unscoped one does and comes back restored.
    const ram = await model.createContext({ contextSize: 2048, sequences: 1 });
    await ram.complete({ prompt, ...opts, cacheScope: 'alice' });
    await ram.complete({ prompt: other, ...opts, cacheScope: 'alice' });
    expect(ram.cacheStats().ramEntries).toBe(0);
    const again = await ram.complete({ prompt, ...opts, cacheScope: 'alice' });
    let common = 0;
    while (prompt[common] === other[common]) common++;
    expect(again.reusedTokens).toBe(common); // only what the live sequence still shares
    expect(again.cache.tier).not.toBe('ram');
    await ram.complete({ prompt, ...opts });
    await ram.complete({ prompt: other, ...opts });
    expect(ram.cacheStats().ramEntries).toBe(1);
    const back = await ram.complete({ prompt, ...opts });
    expect(back.cache).toMatchObject({ outcome: 'restored', tier: 'ram' });
    await ram.dispose();
  });

  it('idle KV leaves a busy unified cache for the RAM tier (no attention tax), and its session comes back exactly', async () => {
    const opts = { temperature: 0, logitBias: noEos, emitTokenIds: true } as const;
    const long = model.tokenize(words(400, 31));
    const short = model.tokenize(words(10, 32));
    const run = async (idleKvSpillMs: number) => {
      const ctx = await model.createContext({ contextSize: 4096, sequences: 2, idleKvSpillMs });
      const t1 = await ctx.complete({ prompt: long, maxTokens: 4, ...opts, sessionId: 'idle' });
      await new Promise((r) => setTimeout(r, 150));
      const cellsIdle = ctx.cacheStats().kvCellsUsed;
      await ctx.complete({ prompt: short, maxTokens: 40, ...opts });
      const stats = ctx.cacheStats();
      const t2 = await ctx.complete({ prompt: Int32Array.from([...long, ...t1.tokens!, ...short]), maxTokens: 4, ...opts, sessionId: 'idle' });
      await ctx.dispose();
      return { cellsIdle, stats, t2 };
    };
    const spilled = await run(100);
    expect(spilled.stats.idleSpills).toBe(1);
    expect(spilled.stats.spills).toBe(1); // a session: it comes back by its id
    expect(spilled.stats.kvCellsUsed).toBeLessThan(spilled.cellsIdle); // the 400+ idle cells are gone
    expect(spilled.t2.cache).toMatchObject({ outcome: 'restored', tier: 'ram' });
    const kept = await run(0);
    expect(kept.stats.idleSpills).toBe(0);
    expect(kept.stats.kvCellsUsed).toBeGreaterThan(kept.cellsIdle);
    expect(kept.t2.cache.outcome).toBe('sticky');
    expect(Array.from(spilled.t2.tokens!)).toEqual(Array.from(kept.t2.tokens!));
  });

  it('with prefixCache off every prompt is prefilled in full', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 2, prefixCache: false });
    const prompt = model.tokenize(words(40, 12));
    const a = await ctx.complete({ prompt, maxTokens: 3, temperature: 0, logitBias: noEos });
    const b = await ctx.complete({ prompt, maxTokens: 3, temperature: 0, logitBias: noEos, sessionId: 'off' });
    const c = await ctx.complete({ prompt, maxTokens: 3, temperature: 0, logitBias: noEos, sessionId: 'off' });
    for (const r of [a, b, c]) {
      expect(r.cache.outcome).toBe('cold');
      expect(r.prefilledTokens).toBe(prompt.length);
    }
    expect(b.text).toBe(a.text);
    await ctx.dispose();
  });

  it('sticky sessions prefill only the new tokens (+1) and diverging prompts keep the common prefix', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 2 });
    const p1 = model.tokenize(words(50, 2));
    const t1 = await ctx.complete({ prompt: p1, maxTokens: 6, temperature: 0, emitTokenIds: true, logitBias: noEos, sessionId: 's1' });
    expect(t1.cache.outcome).toBe('cold');
    const tail = model.tokenize(' and then more words', { addSpecial: false });
    const p2 = Int32Array.from([...p1, ...t1.tokens!, ...tail]);
    const t2 = await ctx.complete({ prompt: p2, maxTokens: 6, temperature: 0, emitTokenIds: true, logitBias: noEos, sessionId: 's1' });
    expect(t2.cache.outcome).toBe('sticky');
    expect(t2.prefilledTokens).toBe(tail.length + 1);
    expect(t2.reusedTokens).toBe(p2.length - tail.length - 1);
    // diverging: keep only the common prefix
    const p3 = Int32Array.from([...p1.subarray(0, 20), ...model.tokenize(' different', { addSpecial: false })]);
    const t3 = await ctx.complete({ prompt: p3, maxTokens: 3, temperature: 0, logitBias: noEos, sessionId: 's1' });
    expect(t3.reusedTokens).toBe(20);
    expect(t3.cache.outcome).toBe('partial');
    await ctx.dispose();
  });

  it('continue() extends a session with a tail and verifies the committed tokens', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 2 });
    const p1 = model.tokenize(words(30, 3));
    const t1 = await ctx.complete({ prompt: p1, maxTokens: 5, temperature: 0, emitTokenIds: true, logitBias: noEos, sessionId: 'c' });
    const committed = [...p1, ...t1.tokens!];
    const tail = model.tokenize(' next part', { addSpecial: false });
    const t2 = await ctx.continue('c', tail, { maxTokens: 4, temperature: 0, logitBias: noEos, expectCommitted: committed }).result;
    expect(t2.cache.outcome).toBe('sticky');
    expect(t2.promptTokens).toBe(committed.length + tail.length);
    expect(t2.prefilledTokens).toBe(tail.length + 1);
    const wrong = [...committed];
    wrong[5] = (wrong[5]! + 1) % 32000;
    const e = await rejection(ctx.continue('c', tail, { maxTokens: 2, expectCommitted: wrong }).result);
    expect(e.code).toBe('TRANSCRIPT_MISMATCH');
    expect(e.message).toMatch(/differ from the expected ones at token 5/);
    const unknown = await rejection(ctx.continue('nope', tail, { maxTokens: 2 }).result);
    expect(unknown.code).toBe('INVALID_ARGUMENT');
    await ctx.dispose();
  });

  it('gives SESSION_BUSY for a second request on a busy session, or waits when asked', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 2 });
    const long = ctx.generate({ prompt: 'busy session', maxTokens: 400, temperature: 0, logitBias: noEos, sessionId: 'b' });
    const e = await rejection(ctx.complete({ prompt: 'busy session again', maxTokens: 2, sessionId: 'b' }));
    expect(e.code).toBe('SESSION_BUSY');
    const waited = await ctx.complete({ prompt: 'busy session again', maxTokens: 2, sessionId: 'b', waitForSession: true, logitBias: noEos });
    expect((await long.result).generatedTokens).toBe(400);
    expect(waited.generatedTokens).toBe(2);
    await ctx.dispose();
  });

  it('forks a session: the fork starts from the same KV', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 3 });
    const p1 = model.tokenize(words(40, 4));
    const t1 = await ctx.complete({ prompt: p1, maxTokens: 5, temperature: 0, emitTokenIds: true, logitBias: noEos, sessionId: 'orig' });
    await ctx.forkSession('orig', 'copy');
    const tail = model.tokenize(' branch', { addSpecial: false });
    const a = await ctx.continue('copy', tail, { maxTokens: 4, temperature: 0, logitBias: noEos }).result;
    const b = await ctx.continue('orig', tail, { maxTokens: 4, temperature: 0, logitBias: noEos }).result;
    expect(a.cache.outcome).toBe('sticky');
    expect(a.reusedTokens).toBe(p1.length + t1.tokens!.length - 1);
    expect(a.text).toBe(b.text);
    expect((await rejection(ctx.forkSession('missing', 'x'))).code).toBe('INVALID_ARGUMENT');
    expect((await rejection(ctx.forkSession('orig', 'copy'))).code).toBe('INVALID_ARGUMENT');
    await ctx.dispose();
  });

  it('spills the least recently used idle session to RAM when every sequence is pinned, and restores it', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 2 });
    const prompts = [0, 1, 2].map((i) => model.tokenize(words(64, 10 + i)));
    const first = await ctx.complete({ prompt: prompts[0]!, maxTokens: 4, temperature: 0, emitTokenIds: true, logitBias: noEos, sessionId: 'A' });
    await ctx.complete({ prompt: prompts[1]!, maxTokens: 4, temperature: 0, logitBias: noEos, sessionId: 'B' });
    await ctx.complete({ prompt: prompts[2]!, maxTokens: 4, temperature: 0, logitBias: noEos, sessionId: 'C' }); // spills A
    const stats = ctx.cacheStats();
    expect(stats.spills).toBeGreaterThanOrEqual(1);
    expect(stats.sessions).toBe(3);
    const again = Int32Array.from([...prompts[0]!, ...first.tokens!, ...model.tokenize(' more', { addSpecial: false })]);
    const back = await ctx.complete({ prompt: again, maxTokens: 4, temperature: 0, logitBias: noEos, sessionId: 'A' });
    expect(back.cache).toMatchObject({ outcome: 'restored', tier: 'ram' });
    expect(back.reusedTokens).toBe(prompts[0]!.length + first.tokens!.length - 1);
    expect(back.cache.restoreMs).toBeGreaterThanOrEqual(0);
    await ctx.dispose();
  });

  it('expires idle sessions after sessionTtlMs', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 1, sessionTtlMs: 200 });
    await ctx.complete({ prompt: 'expire me', maxTokens: 2, sessionId: 'e', logitBias: noEos });
    expect(ctx.cacheStats().sessions).toBe(1);
    await new Promise((r) => setTimeout(r, 1100));
    await ctx.complete({ prompt: 'tick', maxTokens: 1, logitBias: noEos });
    expect(ctx.cacheStats().sessions).toBe(0);
    expect(ctx.cacheStats().pinnedSequences).toBe(0);
    await ctx.dispose();
  });

  it('endSession() releases the pinned sequence', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 1 });
    await ctx.complete({ prompt: 'end me', maxTokens: 2, sessionId: 'x', logitBias: noEos });
    expect(ctx.cacheStats().pinnedSequences).toBe(1);
    await ctx.endSession('x');
    expect(ctx.cacheStats()).toMatchObject({ sessions: 0, pinnedSequences: 0 });
    await ctx.dispose();
  });

  it('prefillOnly() warms a prefix under a content-addressed key that generate({ parentKey }) resumes', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 2 });
    const system = model.tokenize(words(80, 5));
    const warm = await ctx.prefillOnly(system);
    expect(warm.key).toMatch(/^[0-9a-f]{64}$/);
    expect(warm.prefilledTokens).toBe(system.length);
    expect((await ctx.prefillOnly(system)).key).toBe(warm.key);
    const r = await ctx.complete({ parentKey: warm.key, prompt: ' question one', maxTokens: 3, temperature: 0, logitBias: noEos });
    expect(r.reusedTokens).toBe(system.length);
    expect(r.promptTokens).toBe(system.length + model.tokenize(' question one', { addSpecial: false }).length);
    const unknownKey = 'f'.repeat(64);
    expect(() => ctx.generate({ parentKey: unknownKey, prompt: 'x' })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    // another model (different fingerprint) gives a different key for the same tokens
    const other = await loadModel(tinyModelPath);
    const octx = await other.createContext({ contextSize: 2048, unifiedKv: false, sequences: 2 });
    expect((await octx.prefillOnly(system)).key).not.toBe(warm.key);
    await other.dispose();
    await ctx.dispose();
  });

  it('a parentKey whose entry was evicted falls back to cold, not an error', async () => {
    const ctx = await model.createContext({ contextSize: 2048, sequences: 1, cacheRamMb: 0 });
    const prefix = model.tokenize(words(40, 6));
    const { key } = await ctx.prefillOnly(prefix);
    // overwrites the only sequence (no BOS: shares no token with the warmed prefix)
    await ctx.complete({ prompt: model.tokenize(words(40, 7) + ' unrelated', { addSpecial: false }), maxTokens: 2, logitBias: noEos });
    const r = await ctx.complete({ parentKey: key, prompt: ' tail', maxTokens: 2, temperature: 0, logitBias: noEos });
    expect(r.cache.outcome).toBe('cold');
    expect(r.reusedTokens).toBe(0);
    expect(r.generatedTokens).toBe(2);
    await ctx.dispose();
  });

  it('restores a saved prefix from the RAM tier into another sequence', async () => {
    const ctx = await model.createContext({ contextSize: 4096, sequences: 1 });
    const prefix = model.tokenize(words(96, 8));
    const warm = await ctx.prefillOnly(prefix);
    await ctx.complete({ prompt: model.tokenize(words(50, 9) + ' other'), maxTokens: 2, logitBias: noEos }); // slot reused
    const r = await ctx.complete({ parentKey: warm.key, prompt: ' tail words', maxTokens: 3, temperature: 0, logitBias: noEos });
    expect(r.cache).toMatchObject({ outcome: 'restored', tier: 'ram' });
    expect(r.reusedTokens).toBe(prefix.length);
    await ctx.dispose();
  });

  it('shares a warmed prefix between concurrent sequences (seq_cp, no recompute)', async () => {
    const ctx = await model.createContext({ contextSize: 4096, sequences: 4 });
    const system = model.tokenize(words(100, 11));
    const long = ctx.generate({ prompt: system, maxTokens: 300, temperature: 0, logitBias: noEos });
    await new Promise((r) => setTimeout(r, 20));
    const tail = model.tokenize(' user asks', { addSpecial: false });
    const other = await ctx.complete({ prompt: Int32Array.from([...system, ...tail]), maxTokens: 3, temperature: 0, logitBias: noEos });
    expect(other.cache).toMatchObject({ outcome: 'partial', tier: 'shared' });
    expect(other.reusedTokens).toBe(system.length);
    expect(ctx.cacheStats().sharedPrefixes).toBeGreaterThanOrEqual(1);
    await long.result;
    await ctx.dispose();
  });

  it('reports KV cells in use: 4 sequences sharing a prefix hold it once, 4 copies hold it 4 times', async () => {
    const system = model.tokenize(words(120, 13));
    const run = async (prefixCache: boolean) => {
      const ctx = await model.createContext({ contextSize: 4096, sequences: 4, prefixCache });
      expect(ctx.cacheStats().kvCellsUsed).toBe(0);
      await ctx.prefillOnly(system);
      // A session each: every sequence keeps its request's KV, however the four are scheduled
      // (without, a request admitted after another finished could take over its sequence).
      await Promise.all([0, 1, 2, 3].map((i) => ctx.complete({ prompt: Int32Array.from([...system, ...model.tokenize(` user ${i}`, { addSpecial: false })]), maxTokens: 4, temperature: 0, logitBias: noEos, sessionId: `user-${i}` })));
      const st = ctx.cacheStats();
      await ctx.dispose();
      return st;
    };
    const shared = await run(true);
    const copies = await run(false);
    expect(shared.kvCellsTotal).toBe(4096);
    expect(shared.kvCellsUsed).toBeGreaterThanOrEqual(system.length);
    expect(shared.kvCellsUsed).toBeLessThan(system.length * 2);
    expect(copies.kvCellsUsed).toBeGreaterThanOrEqual(system.length * 4);
  });

  it('never exceeds the RAM budget over 1,000 prompts with shared prefixes', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 2, cacheRamMb: 0.02 });
    const budget = ctx.cacheStats().ramBudget;
    expect(budget).toBe(Math.floor(0.02 * 1024 * 1024));
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
    const stems = Array.from({ length: 12 }, (_, i) => model.tokenize(words(24 + i * 4, i)));
    let maxBytes = 0;
    for (let i = 0; i < 1000; i++) {
      const stem = stems[rand(stems.length)]!;
      const prompt = Int32Array.from([...stem, ...model.tokenize(` q${rand(50)}`, { addSpecial: false })]);
      const r = await ctx.complete({ prompt, maxTokens: 1, temperature: 0, logitBias: noEos });
      expect(r.prefilledTokens).toBe(r.promptTokens - r.reusedTokens);
      const st = ctx.cacheStats();
      expect(st.ramBytes).toBeLessThanOrEqual(budget);
      maxBytes = Math.max(maxBytes, st.ramBytes);
    }
    const st = ctx.cacheStats();
    expect(maxBytes).toBeGreaterThan(0);
    expect(st.ramEvictions).toBeGreaterThan(0);
    await ctx.dispose();
  });
});
