// Checkpoints for recurrent and hybrid memories (issue 24, item 3): a prompt that diverges
// after a checkpoint restores it and prefills only the rest, from a live sequence, a session,
// the RAM tier and the disk tier after a restart; the output equals a cold single-sequence run.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ZooModelDescription } from '../../src/gguf/index.js';
import { loadModel, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD } from '../helpers/models.js';
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
      report.push(`  live: diverging prompt of ${diverged.length} tokens: prefilled ${b.prefilledTokens} (cold: ${diverged.length})`);
    } finally {
      await ctx.dispose();
    }
  }, 60_000);
});
