// Speculative decoding with the model's own multi-token-prediction block (issue 27, mode 'mtp'):
// the zoo's glm4moe model carries one NextN block built to predict the trunk's next token (see
// src/gguf/zoo/glm4moe.ts); a variant with mtpAgreement 0.5 mispredicts after half the tokens.
// The output is always the target's: the greedy chain, and what a context without speculation
// writes, on every path the block's KV has to follow.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeZooModel, zooGreedyChain, type ZooModelDescription } from '../../src/gguf/index.js';
import { loadModel, setLogger, type Context, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD } from '../helpers/models.js';
import { llamaCppModelsDir } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
const dir = mkdtempSync(join(tmpdir(), 'llamux-mtp-'));
// The zoo model is tiny: its output head makes an MTP step cost about a decode step, and the
// length policy would rightly not draft. A cost as on a real model (a block against a trunk of
// dozens) makes it draft, which is what these tests are about.
const SPEC = { mode: 'mtp', draftCost: 0.05 } as const;
const BASE = { ...ONE_THREAD, toolCallMarkers: false } as const;

let d: ZooModelDescription;
let half: ZooModelDescription;
let model: Model; // loaded with its MTP block
let plainModel: Model; // the same file without it
let plain: Context;
let tok: (text: string) => number[];
// llama.cpp's errors: a block KV that lost track of its positions would show here (llama_decode
// refuses positions that do not follow on); an abort's own lines are expected.
const llamaErrors: string[] = [];
const unexpectedErrors = (): string[] => llamaErrors.filter((m) => !/ret = 2|compute status: 1|graph_compute/.test(m));

beforeAll(async () => {
  setLogger('error', (_level, message) => llamaErrors.push(message));
  d = (await zooModels(['glm4moe'])).glm4moe;
  half = await writeZooModel('glm4moe', join(dir, 'glm4moe-mtp50.gguf'), { vocabDir: llamaCppModelsDir, mtpAgreement: 0.5 });
  model = await loadModel(d.path, { mtp: true });
  plainModel = await loadModel(d.path);
  plain = await plainModel.createContext({ ...BASE, contextSize: 4096, sequences: 2 });
  tok = (text) => Array.from(model.tokenize(text, { addSpecial: false }));
}, 180_000);

afterAll(async () => {
  setLogger('warn');
  await plain?.dispose();
  await plainModel?.dispose();
  await model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const words = (n: number, from = 0): string =>
  Array.from({ length: n }, (_, i) => ['river', 'stone', 'cloud', 'garden', 'silver', 'window', 'market', 'forest'][(i * 5 + from) % 8]).join(' ');

describe('speculative: multi-token prediction (MTP) blocks', () => {
  it('reports and loads the block only when asked', () => {
    expect(model.metadata.mtpLayers).toBe(1);
    expect(model.metadata.mtpLoaded).toBe(true);
    expect(plainModel.metadata.mtpLayers).toBe(1);
    expect(plainModel.metadata.mtpLoaded).toBe(false);
    expect(model.metadata.layers).toBe(d.nLayer);
  });

  it('an agreeing block: the greedy chain on 4 sequences at once, nearly every draft accepted', async () => {
    const ctx = await model.createContext({ ...BASE, contextSize: 4096, sequences: 4, speculative: SPEC });
    try {
      expect(ctx.settings.speculative).toBe('mtp');
      const prompts = [0, 1, 2, 3].map((k) => tok(' ' + words(12 + k, k)));
      const rs = await Promise.all(prompts.map((prompt) => ctx.complete({ prompt, temperature: 0, maxTokens: 48, emitTokenIds: true })));
      rs.forEach((r, k) => {
        expect(ids(r)).toEqual(zooGreedyChain(d.successors, prompts[k]!.at(-1)!, 48));
        expect(r.timings.draftedTokens).toBeGreaterThan(20);
        expect(r.timings.acceptedTokens).toBe(r.timings.draftedTokens);
      });
    } finally {
      await ctx.dispose();
    }
  });

  it('a block that agrees after half the tokens: rejected drafts, the same output as without speculation', async () => {
    const m = await loadModel(half.path, { mtp: true });
    const ref = await loadModel(half.path);
    try {
      const ctx = await m.createContext({ ...BASE, contextSize: 4096, sequences: 2, speculative: SPEC });
      const base = await ref.createContext({ ...BASE, contextSize: 4096, sequences: 2 });
      const prompts = [tok(' ' + words(20, 3)), tok(' ' + words(9, 6))];
      const got = await Promise.all(prompts.map((prompt) => ctx.complete({ prompt, temperature: 0, maxTokens: 80, emitTokenIds: true })));
      for (let k = 0; k < 2; k++) {
        const want = await base.complete({ prompt: prompts[k]!, temperature: 0, maxTokens: 80, emitTokenIds: true });
        expect(ids(got[k]!)).toEqual(ids(want));
        expect(ids(want)).toEqual(zooGreedyChain(half.successors, prompts[k]!.at(-1)!, 80));
        expect(got[k]!.timings.acceptedTokens).toBeGreaterThan(0);
        expect(got[k]!.timings.draftedTokens).toBeGreaterThan(got[k]!.timings.acceptedTokens);
      }
      await ctx.dispose();
      await base.dispose();
    } finally {
      await m.dispose();
      await ref.dispose();
    }
  });

  it('follows every reuse path: a long prompt in chunks, an extended prompt, a diverging one, a session, an abort', async () => {
    const ctx = await model.createContext({ ...BASE, contextSize: 4096, sequences: 2, speculative: SPEC });
    const same = async (prompt: number[], n = 40): Promise<GenerateResult> => {
      const r = await ctx.complete({ prompt, temperature: 0, maxTokens: n, emitTokenIds: true });
      const want = await plain.complete({ prompt, temperature: 0, maxTokens: n, emitTokenIds: true });
      expect(ids(r)).toEqual(ids(want));
      return r;
    };
    try {
      // 700 prompt tokens: the trunk's h rows join the block's KV in several chunks
      const long = tok(' ' + words(700, 1));
      expect(long.length).toBeGreaterThan(600);
      const first = await same(long);
      expect(first.timings.acceptedTokens).toBeGreaterThan(20);
      // the prompt plus its answer plus more: the sequence is reused, the block's KV follows
      const extended = [...long, ...ids(first), ...tok(' ' + words(5, 2))];
      const second = await same(extended);
      expect(second.reusedTokens).toBeGreaterThan(long.length);
      expect(second.timings.acceptedTokens).toBe(second.timings.draftedTokens);
      // diverging half-way: the block's KV is cut back to the common part
      const diverged = [...long.slice(0, 300), ...tok(' ' + words(40, 4))];
      const third = await same(diverged);
      expect(third.reusedTokens).toBeGreaterThanOrEqual(300);
      expect(third.timings.acceptedTokens).toBe(third.timings.draftedTokens);
      // a session: two turns, the second continues the first's KV
      const chat = ctx.createSession();
      const p1 = tok(' ' + words(30, 5));
      const t1 = await chat.generate({ prompt: p1, temperature: 0, maxTokens: 24, emitTokenIds: true }).result;
      const more = tok(' ' + words(4, 6));
      const t2 = await chat.continue(more, { temperature: 0, maxTokens: 24, emitTokenIds: true }).result;
      expect(ids(t1)).toEqual(zooGreedyChain(d.successors, p1.at(-1)!, 24));
      expect(ids(t2)).toEqual(zooGreedyChain(d.successors, more.at(-1)!, 24));
      expect(t2.prefilledTokens).toBe(more.length + 1);
      await chat.end();
      // an abort mid-generation leaves the context serving exactly
      const ac = new AbortController();
      const stream = ctx.generate({ prompt: tok(' ' + words(25, 7)), temperature: 0, maxTokens: 400, signal: ac.signal });
      let n = 0;
      await expect(
        (async () => {
          for await (const _ of stream) if (++n === 5) ac.abort();
        })(),
      ).rejects.toMatchObject({ code: 'ABORTED' });
      await same(tok(' ' + words(25, 7)));
      await new Promise((r) => setTimeout(r, 50)); // log lines arrive in batches
      expect(unexpectedErrors()).toEqual([]);
    } finally {
      await ctx.dispose();
    }
  }, 120_000);

  it('sampled runs draw the same tokens with and without the block, seed by seed', async () => {
    const ctx = await model.createContext({ ...BASE, contextSize: 2048, sequences: 1, speculative: SPEC });
    try {
      const prompt = tok(' ' + words(16, 2));
      const texts = new Set<string>();
      let rejected = 0;
      for (let seed = 1; seed <= 8; seed++) {
        const o = { prompt, temperature: 6, topK: 0, topP: 1, minP: 0, seed, maxTokens: 32, emitTokenIds: true } as const;
        const a = await plain.complete(o);
        const b = await ctx.complete(o);
        expect(ids(b)).toEqual(ids(a));
        texts.add(a.text);
        rejected += b.timings.draftedTokens - b.timings.acceptedTokens;
      }
      expect(texts.size).toBeGreaterThan(1);
      expect(rejected).toBeGreaterThan(0);
      await new Promise((r) => setTimeout(r, 50));
      expect(unexpectedErrors()).toEqual([]);
    } finally {
      await ctx.dispose();
    }
  });

  it('refuses mode mtp on a model loaded without its block, on a model without one, and without a unified KV', async () => {
    await expect(plainModel.createContext({ ...BASE, speculative: { mode: 'mtp' } })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringMatching(/load it with loadModel\(path, \{ mtp: true \}\)/),
    });
    const llama = await loadModel((await zooModels(['llama'])).llama.path, { mtp: true });
    try {
      expect(llama.metadata.mtpLayers).toBe(0);
      expect(llama.metadata.mtpLoaded).toBe(false);
      await expect(llama.createContext({ ...BASE, speculative: { mode: 'mtp' } })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        message: expect.stringMatching(/has no multi-token-prediction blocks/),
      });
    } finally {
      await llama.dispose();
    }
    await expect(model.createContext({ ...BASE, unifiedKv: false, sequences: 2, speculative: { mode: 'mtp' } })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    // the context still works after the refusals
    const ctx = await model.createContext({ ...BASE, contextSize: 1024, speculative: SPEC });
    const prompt = tok(' ' + words(8));
    expect(ids(await ctx.complete({ prompt, temperature: 0, maxTokens: 10, emitTokenIds: true }))).toEqual(zooGreedyChain(d.successors, prompt.at(-1)!, 10));
    await ctx.dispose();
  });
});

describe('speculative: the MTP block of a hybrid model (qwen35: rollback snapshots)', () => {
  it('drafts with the block, rolls rejected drafts back, and writes what a context without speculation writes', async () => {
    const q = (await zooModels(['qwen35'])).qwen35;
    const m = await loadModel(q.path, { mtp: true });
    const ref = await loadModel(q.path);
    try {
      expect(m.metadata.isHybrid).toBe(true);
      expect(m.metadata.mtpLayers).toBe(1);
      const ctx = await m.createContext({ ...BASE, contextSize: 4096, sequences: 2, speculative: SPEC });
      const base = await ref.createContext({ ...BASE, contextSize: 4096, sequences: 2 });
      expect(ctx.settings.speculative).toBe('mtp');
      const t = (text: string): number[] => Array.from(m.tokenize(text, { addSpecial: false }));
      const prompts = [t(' ' + words(40, 1)), t(' ' + words(11, 2))];
      const got = await Promise.all(prompts.map((prompt) => ctx.complete({ prompt, temperature: 0, maxTokens: 60, emitTokenIds: true })));
      for (let k = 0; k < 2; k++) {
        expect(ids(got[k]!)).toEqual(zooGreedyChain(q.successors, prompts[k]!.at(-1)!, 60));
        expect(got[k]!.timings.acceptedTokens).toBeGreaterThan(20);
      }
      // sampled: drafts are rejected, the recurrent state rolls back, the tokens are the plain run's
      let rejected = 0;
      for (let seed = 1; seed <= 6; seed++) {
        const o = { prompt: prompts[0]!, temperature: 2, topK: 0, topP: 1, minP: 0, seed, maxTokens: 40, emitTokenIds: true } as const;
        const r = await ctx.complete(o);
        expect(ids(r)).toEqual(ids(await base.complete(o)));
        rejected += r.timings.draftedTokens - r.timings.acceptedTokens;
      }
      expect(rejected).toBeGreaterThan(0);
      // a session's second turn continues the rolled-back state
      const chat = ctx.createSession();
      const t1 = await chat.generate({ prompt: prompts[1]!, temperature: 0, maxTokens: 20, emitTokenIds: true }).result;
      const more = t(' ' + words(3, 5));
      const t2 = await chat.continue(more, { temperature: 0, maxTokens: 20, emitTokenIds: true }).result;
      expect(ids(t1)).toEqual(zooGreedyChain(q.successors, prompts[1]!.at(-1)!, 20));
      expect(ids(t2)).toEqual(zooGreedyChain(q.successors, more.at(-1)!, 20));
      await chat.end();
      await ctx.dispose();
      await base.dispose();
      await new Promise((r) => setTimeout(r, 50));
      expect(unexpectedErrors()).toEqual([]);
    } finally {
      await m.dispose();
      await ref.dispose();
    }
  }, 120_000);
});
