// Checkpoints for recurrent and hybrid memories (issue 24, item 3): a prompt that diverges
// after a checkpoint restores it and prefills only the rest, from a live sequence, a session,
// the RAM tier and the disk tier after a restart; the output equals a cold single-sequence run.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildZooSpec, encodeGguf, val, type ZooModelDescription } from '../../src/gguf/index.js';
import { LlamuxError, loadModel, type Context, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD } from '../helpers/models.js';
import { llamaCppModelsDir } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

const STEPS = 6;
const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
const report: string[] = [];

let d: ZooModelDescription;
let model: Model;
let base: number[];
let tail: number[];
const dirs: string[] = [];

function words(n: number, seed: number): string {
  const w = ['river', 'stone', 'light', 'paper', 'green', 'music', 'table', 'cloud', 'north', 'glass'];
  return Array.from({ length: n }, (_, i) => w[(i * 7 + seed * 3) % w.length]).join(' ');
}

beforeAll(async () => {
  d = (await zooModels(['qwen35']))['qwen35'];
  model = await loadModel(d.path);
  base = Array.from(model.tokenize(words(70, 1), { addSpecial: false }));
  tail = Array.from(model.tokenize(' ' + words(20, 2), { addSpecial: false }));
}, 120_000);

afterAll(async () => {
  await model?.dispose();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  if (report.length) console.log(`checkpoints (qwen35):\n${report.join('\n')}`);
});

async function cold(prompt: number[]): Promise<GenerateResult> {
  const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, cacheRamMb: 0 });
  try {
    return await ctx.complete({ prompt, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
  } finally {
    await ctx.dispose();
  }
}

/**
 * The top-1/top-2 logit gap of the first generated token, by bisection on a logitBias against
 * the greedy token, to 1/1024 logit: the logits of a restored state against a cold one. Every
 * probe goes through `ctx`'s reuse path again (an exact repeat: the checkpoint one token short
 * of the prompt). A weak probe on the zoo: its logits depend on the last tokens far more than
 * on the rest (the gap of qwen35 after these prompts is 7.8589 with or without one token 20
 * positions back), so it catches a state that is wrong near the end, not a subtle one.
 */
async function gap(ctx: Context, prompt: number[]): Promise<number> {
  const first = (await ctx.complete({ prompt, temperature: 0, maxTokens: 1, emitTokenIds: true })).tokens![0]!;
  let lo = 0;
  let hi = 16;
  while (hi - lo > 1 / 1024) {
    const mid = (lo + hi) / 2;
    const r = await ctx.complete({ prompt, temperature: 0, maxTokens: 1, emitTokenIds: true, logitBias: new Map([[first, -mid]]) });
    if (r.tokens![0] === first) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}
/** Same state, same logits: F32 blocks on one CPU thread differ by rounding only (about 1e-5). */
const GAP_TOLERANCE = 2 / 1024;

async function coldGap(prompt: number[]): Promise<number> {
  const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, prefixCache: false, cacheRamMb: 0 });
  try {
    return await gap(ctx, prompt);
  } finally {
    await ctx.dispose();
  }
}

describe('checkpoints on a hybrid model (qwen35)', () => {
  it('a live sequence: a prompt diverging after the first prompt restores its checkpoint', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, cacheRamMb: 0 });
    try {
      const a = await ctx.complete({ prompt: base, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
      expect(a.cache.outcome).toBe('cold');
      const diverged = [...base, ...tail];
      const b = await ctx.complete({ prompt: diverged, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
      expect(b.cache).toMatchObject({ outcome: 'partial', tier: 'live', reusedTokens: base.length - 1, checkpoint: base.length - 1 });
      expect(b.prefilledTokens).toBe(diverged.length - (base.length - 1));
      expect(ids(b)).toEqual(ids(await cold(diverged)));
      const again = await ctx.complete({ prompt: base, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
      expect(again.cache).toMatchObject({ reusedTokens: base.length - 1, checkpoint: base.length - 1 });
      expect(ids(again)).toEqual(ids(a));
      const g = await gap(ctx, diverged);
      expect(Math.abs(g - (await coldGap(diverged)))).toBeLessThanOrEqual(GAP_TOLERANCE);
      report.push(`  live: diverging prompt of ${diverged.length} tokens: prefilled ${b.prefilledTokens} (cold: ${diverged.length})`);
    } finally {
      await ctx.dispose();
    }
  }, 60_000);

  it('a session: a new prompt diverging from its transcript restores a checkpoint of its own sequence', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 2, cacheRamMb: 0 });
    try {
      const chat = ctx.createSession({ id: 'chat' });
      const a = await chat.generate({ prompt: base, temperature: 0, maxTokens: STEPS, emitTokenIds: true }).result;
      // continue(): the transcript extends, the whole state is kept (sticky)
      const c = await chat.continue(tail, { temperature: 0, maxTokens: STEPS, emitTokenIds: true }).result;
      expect(c.cache.outcome).toBe('sticky');
      expect(c.cache.checkpoint).toBeUndefined();
      expect(ids(c)).toEqual(ids(await cold([...base, ...ids(a).slice(0, STEPS - 1), ...tail])));
      // a prompt that rewrites the conversation after the first prompt
      const other = Array.from(model.tokenize(' ' + words(12, 5), { addSpecial: false }));
      const rewritten = [...base, ...other];
      const b = await chat.generate({ prompt: rewritten, temperature: 0, maxTokens: STEPS, emitTokenIds: true }).result;
      expect(b.cache).toMatchObject({ tier: 'live', checkpoint: base.length - 1, reusedTokens: base.length - 1 });
      expect(ids(b)).toEqual(ids(await cold(rewritten)));
      const stats = ctx.cacheStats();
      expect(stats.checkpoints).toBeGreaterThan(0);
      expect(stats.checkpoints).toBeLessThanOrEqual(4 * 2);
      expect(stats.checkpointRestores).toBeGreaterThanOrEqual(1);
      report.push(`  session: rewritten prompt of ${rewritten.length} tokens: prefilled ${b.prefilledTokens} (cold: ${rewritten.length}); ${stats.checkpoints} checkpoints, ${stats.checkpointBytes} bytes`);
    } finally {
      await ctx.dispose();
    }
  }, 60_000);

  it('the RAM tier: a saved state carries its checkpoints, under the budget', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, cacheRamMb: 16 });
    try {
      const a = await ctx.complete({ prompt: base, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
      expect(a.cache.outcome).toBe('cold');
      // an unrelated prompt takes the only sequence: the first one's state goes to the RAM tier
      const unrelated = Array.from(model.tokenize(words(40, 9), { addSpecial: false }));
      await ctx.complete({ prompt: unrelated, temperature: 0, maxTokens: 2 });
      expect(ctx.cacheStats().ramEntries).toBeGreaterThan(0);
      const diverged = [...base, ...tail];
      const b = await ctx.complete({ prompt: diverged, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
      expect(b.cache).toMatchObject({ outcome: 'restored', tier: 'ram', reusedTokens: base.length - 1, checkpoint: base.length - 1 });
      expect(ids(b)).toEqual(ids(await cold(diverged)));
      const stats = ctx.cacheStats();
      expect(stats.ramBytes).toBeLessThanOrEqual(stats.ramBudget);
      expect(Math.abs((await gap(ctx, diverged)) - (await coldGap(diverged)))).toBeLessThanOrEqual(GAP_TOLERANCE);
      report.push(`  ram: diverging prompt of ${diverged.length} tokens: prefilled ${b.prefilledTokens}; RAM tier ${stats.ramEntries} entries, ${stats.ramBytes} of ${stats.ramBudget} bytes`);
    } finally {
      await ctx.dispose();
    }
  }, 60_000);

  it('the disk tier after a restart: the state file carries its checkpoints', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llamux-ckpt-'));
    dirs.push(dir);
    const first = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, cacheRamMb: 0, cacheDir: dir });
    await first.complete({ prompt: base, temperature: 0, maxTokens: STEPS });
    await first.dispose();
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, cacheRamMb: 0, cacheDir: dir });
    try {
      expect(ctx.cacheStats().diskEntries).toBeGreaterThan(0);
      const diverged = [...base, ...tail];
      const b = await ctx.complete({ prompt: diverged, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
      expect(b.cache).toMatchObject({ outcome: 'restored', tier: 'disk', reusedTokens: base.length - 1, checkpoint: base.length - 1 });
      expect(ids(b)).toEqual(ids(await cold(diverged)));
      const stats = ctx.cacheStats();
      expect(stats.diskBytes).toBeLessThanOrEqual(stats.diskBudget);
      expect(Math.abs((await gap(ctx, diverged)) - (await coldGap(diverged)))).toBeLessThanOrEqual(GAP_TOLERANCE);
      report.push(`  disk: diverging prompt of ${diverged.length} tokens after a restart: prefilled ${b.prefilledTokens}`);
    } finally {
      await ctx.dispose();
    }
  }, 60_000);

  it('an abort mid-prefill or mid-generation on a session leaves a state that continues exactly', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 2, cacheRamMb: 0, batchSize: 32, microBatchSize: 16 });
    try {
      const chat = ctx.createSession({ id: 'aborted' });
      await chat.generate({ prompt: base, temperature: 0, maxTokens: 2 }).result;
      const long = [...base, ...Array.from(model.tokenize(' ' + words(300, 7), { addSpecial: false }))];
      for (const delayMs of [2, 15, 40]) {
        const ac = new AbortController();
        setTimeout(() => ac.abort(), delayMs);
        await chat.generate({ prompt: long, temperature: 0, maxTokens: 30, signal: ac.signal }).result.catch(() => undefined);
        const again = await chat.generate({ prompt: long, temperature: 0, maxTokens: STEPS, emitTokenIds: true }).result;
        expect(ids(again), `abort after ${delayMs} ms`).toEqual(ids(await cold(long)));
      }
    } finally {
      await ctx.dispose();
    }
  }, 60_000);

  it('keeps at most 4 checkpoints per sequence', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 1, cacheRamMb: 0 });
    try {
      const chat = ctx.createSession({ id: 'long' });
      await chat.generate({ prompt: base, temperature: 0, maxTokens: 2 }).result;
      for (let i = 0; i < 4; i++) await chat.continue(tail, { temperature: 0, maxTokens: 2 }).result;
      const stats = ctx.cacheStats();
      expect(stats.checkpoints).toBe(4);
      expect(stats.checkpointBytes).toBeGreaterThan(0);
    } finally {
      await ctx.dispose();
    }
  }, 60_000);

  it('kvCheckpoints bounds them per sequence; 0: none, and a diverging prompt is recomputed', async () => {
    for (const kvCheckpoints of [2, 0]) {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 1, cacheRamMb: 0, kvCheckpoints });
      try {
        const chat = ctx.createSession({ id: 'bounded' });
        await chat.generate({ prompt: base, temperature: 0, maxTokens: 2 }).result;
        for (let i = 0; i < 3; i++) await chat.continue(tail, { temperature: 0, maxTokens: 2 }).result;
        expect(ctx.cacheStats().checkpoints).toBe(kvCheckpoints);
        const diverged = [...base, ...tail];
        const b = await chat.generate({ prompt: diverged, temperature: 0, maxTokens: STEPS, emitTokenIds: true }).result;
        expect(ids(b)).toEqual(ids(await cold(diverged)));
        if (kvCheckpoints === 0) expect(b.cache).toMatchObject({ outcome: 'cold', reusedTokens: 0 });
        else expect(b.reusedTokens).toBe(0); // the two newest checkpoints lie past base: recomputed
      } finally {
        await ctx.dispose();
      }
    }
  }, 60_000);
});

describe('a model without a vocabulary', () => {
  it('is refused at load with UNSUPPORTED, and the process lives on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llamux-novocab-'));
    dirs.push(dir);
    const built = await buildZooSpec('llama', { vocabDir: llamaCppModelsDir });
    const metadata = [...built.spec.metadata].filter(([k]) => !k.startsWith('tokenizer.'));
    metadata.push(['tokenizer.ggml.model', val.string('none')]);
    const path = join(dir, 'no-vocab.gguf');
    writeFileSync(path, encodeGguf({ ...built.spec, metadata }));
    const e = await loadModel(path).then(() => undefined, (err: unknown) => err);
    expect(e).toBeInstanceOf(LlamuxError);
    expect((e as LlamuxError).code).toBe('UNSUPPORTED');
    expect((e as LlamuxError).message).toMatch(/no vocabulary/);
    // the same file with its vocabulary runs
    const ok = await cold(base);
    expect(ok.tokens?.length).toBe(STEPS);
  }, 60_000);
});
