// Speculative decoding with a draft model (issue 27): a second scripted model with the target's
// vocabulary drafts greedily; agreement is set by swapping rows of its output head (each swap
// makes two of its tokens predict each other's successors). The output is always the target's.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildScriptedModel, encodeGguf, writeBytesAtomic, type GgufTensorSpec } from '../../src/gguf/index.js';
import { testModelSpec } from '../../src/gguf/fixtures.js';
import { loadModel, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD, script, testModel } from '../helpers/models.js';

const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
const dir = mkdtempSync(join(tmpdir(), 'llamux-draft-'));
const EXACT = { temperature: 1, topK: 0, topP: 1, minP: 0 } as const;

/** The fixture rebuilt with `swaps` pairs of output-head rows exchanged (the same vocabulary). */
async function draftOf(name: 'long-script' | 'near-tie', swaps: Array<[number, number]>): Promise<string> {
  const built = buildScriptedModel(testModelSpec(name));
  const tensors = built.gguf.tensors.map((t): GgufTensorSpec => {
    if (t.name !== 'output.weight' || swaps.length === 0) return t;
    const [D] = t.shape as [number, number];
    const data = Float32Array.from(t.data as Float32Array);
    for (const [a, b] of swaps) {
      const rowA = data.slice(a * D, (a + 1) * D);
      data.copyWithin(a * D, b * D, (b + 1) * D);
      data.set(rowA, b * D);
    }
    return { ...t, data };
  });
  const path = join(dir, `${name}-${swaps.length}.gguf`);
  await writeBytesAtomic(path, encodeGguf({ ...built.gguf, tensors }));
  return path;
}

let target: Model;
const drafts: Model[] = [];
beforeAll(async () => {
  target = await loadModel(testModel('long-script').path);
});
afterAll(async () => {
  for (const d of drafts) await d.dispose();
  await target?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function draftModel(name: 'long-script' | 'near-tie', swaps: Array<[number, number]>): Promise<Model> {
  const m = await loadModel(await draftOf(name, swaps));
  drafts.push(m);
  return m;
}

describe('speculative: a draft model', () => {
  it('a draft that agrees everywhere: the script, nearly every token accepted', async () => {
    const s = script('long-script');
    const draft = await draftModel('long-script', []);
    const ctx = await target.createContext({ ...ONE_THREAD, contextSize: 2048, toolCallMarkers: false, speculative: { mode: 'draft', model: draft } });
    try {
      expect(ctx.settings.speculative).toBe('draft');
      const r = await ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true });
      expect(ids(r)).toEqual(s.greedy);
      expect(r.timings.acceptedTokens).toBeGreaterThan(s.greedy.length * 0.8);
      const m = await ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, maxTokens: 23, stop: ['Stop here'] });
      expect(ids(m)).toEqual(s.greedy.slice(0, 23));
    } finally {
      await ctx.dispose();
    }
  });

  it('long prompts on 2 sequences (the draft context prefills in several batches): every draft of a faithful draft model is right', async () => {
    const s = script('long-script');
    const draft = await draftModel('long-script', []);
    const ctx = await target.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 2, toolCallMarkers: false, speculative: { mode: 'draft', model: draft } });
    try {
      // 700 prompt tokens each (more than the draft context's 512-token batch), different tails
      const long = (k: number): number[] => [...s.promptTokens, ...s.greedy, ...s.greedy, ...s.greedy.slice(0, 100 + k), ...s.promptTokens.slice(1)];
      const [a, b] = await Promise.all([0, 7].map((k) => ctx.complete({ prompt: long(k), temperature: 0, emitTokenIds: true, maxTokens: 60 })));
      for (const r of [a!, b!]) {
        expect(ids(r)).toEqual(s.greedy.slice(0, 60));
        expect(r.timings.acceptedTokens).toBeGreaterThan(30);
        expect(r.timings.acceptedTokens).toBe(r.timings.draftedTokens);
      }
    } finally {
      await ctx.dispose();
    }
  });

  it('a draft that disagrees on a fifth of the script: rejected drafts, the same output, also with 2 sequences', async () => {
    const s = script('long-script');
    const g = s.greedy;
    // swap the rows of successors 20 positions apart: the draft then mispredicts at both
    const swaps: Array<[number, number]> = [];
    for (let i = 5; i + 20 < g.length && swaps.length < 30; i += 10) swaps.push([g[i]!, g[i + 20]!]);
    const draft = await draftModel('long-script', swaps);
    const ctx = await target.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 2, toolCallMarkers: false, speculative: { mode: 'draft', model: draft } });
    try {
      const [a, b] = await Promise.all([
        ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true }),
        ctx.complete({ prompt: [...s.promptTokens], temperature: 0, emitTokenIds: true, maxTokens: 150 }),
      ]);
      expect(ids(a)).toEqual(g);
      expect(ids(b)).toEqual(g.slice(0, 150));
      expect(a.timings.draftedTokens).toBeGreaterThan(a.timings.acceptedTokens);
      expect(a.timings.acceptedTokens).toBeGreaterThan(0);
      // a session's second turn on the same context: the draft KV follows the new prompt
      const chat = ctx.createSession();
      const t1 = await chat.generate({ prompt: [...s.promptTokens], temperature: 0, maxTokens: 40, emitTokenIds: true }).result;
      const t2 = await chat.continue(g.slice(100, 104), { temperature: 0, maxTokens: 30, emitTokenIds: true }).result;
      expect(ids(t1)).toEqual(g.slice(0, 40));
      expect(ids(t2)).toEqual(g.slice(104, 134));
      expect(t2.prefilledTokens).toBe(5);
    } finally {
      await ctx.dispose();
    }
  });

  it('sampled runs draw the same tokens with and without the draft model, seed by seed', async () => {
    const s = script('near-tie');
    const t = await loadModel(testModel('near-tie').path);
    const draft = await draftModel('near-tie', []);
    try {
      const plain = await t.createContext({ ...ONE_THREAD, contextSize: 1024, toolCallMarkers: false });
      const spec = await t.createContext({ ...ONE_THREAD, contextSize: 1024, toolCallMarkers: false, speculative: { mode: 'draft', model: draft } });
      const texts = new Set<string>();
      for (let seed = 1; seed <= 12; seed++) {
        const a = await plain.complete({ prompt: [...s.promptTokens], ...EXACT, seed, emitTokenIds: true });
        const b = await spec.complete({ prompt: [...s.promptTokens], ...EXACT, seed, emitTokenIds: true });
        expect(ids(b)).toEqual(ids(a));
        texts.add(b.text);
      }
      expect(texts.size).toBe(2);
      await plain.dispose();
      await spec.dispose();
    } finally {
      await t.dispose();
    }
  });

  it('refuses a draft model with another vocabulary, and options that do not fit', async () => {
    const other = await loadModel(testModel('near-tie').path);
    drafts.push(other);
    await expect(target.createContext({ ...ONE_THREAD, contextSize: 1024, speculative: { mode: 'draft', model: other } })).rejects.toThrow(/vocabulary differs/);
    await expect(target.createContext({ ...ONE_THREAD, speculative: { mode: 'draft' } })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(target.createContext({ ...ONE_THREAD, speculative: { mode: 'ngram', model: other } })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});
