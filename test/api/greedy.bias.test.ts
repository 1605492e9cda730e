// Greedy sampling with a logit bias and no grammar picks straight from the logits (native
// Sampler::ArgmaxBiased, without a candidate per vocabulary token). What it must pick is fixed by
// the model's own raw log-probabilities (`logprobs`, taken before the bias): the highest of
// logprob + bias, so a banned top token gives way to the second, and a token lifted past the top
// is picked, at every step.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeRandomModel } from '../../src/gguf/random.js';
import { loadModel, type Context, type Model } from '../../src/index.js';

let dir: string;
let model: Model;
let ctx: Context;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llamux-greedy-'));
  const path = join(dir, 'tiny.gguf');
  await writeRandomModel(path, { preset: 'tiny', type: 'F16', seed: 5 });
  model = await loadModel(path);
  ctx = await model.createContext({ contextSize: 1024, threads: 1, batchThreads: 1, toolCallMarkers: false, prefixCache: false });
}, 60_000);

afterAll(async () => {
  await ctx?.dispose();
  await model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe('greedy with a logit bias', () => {
  it('bans the top token and lifts another past it, step by step, for 12 prompts', async () => {
    let banned = 0;
    let lifted = 0;
    for (let i = 0; i < 12; i++) {
      const prompt = Array.from({ length: 8 + i }, (_, k) => 3 + ((k * 37 + i * 11) % 200));
      // The unbiased step: its top-5 raw log-probabilities.
      const plain = await ctx.complete({ prompt, maxTokens: 1, temperature: 0, logprobs: 5 });
      const top = plain.logprobs![0]!.top;
      expect(plain.logprobs![0]!.token).toBe(top[0]!.token);
      // Ban the top token: the second must come.
      const ban = await ctx.complete({ prompt, maxTokens: 1, temperature: 0, logprobs: 5, logitBias: { [top[0]!.token]: -Infinity } });
      expect(ban.logprobs![0]!.token).toBe(top[1]!.token);
      banned++;
      // Lift the fifth past the top by half a nat: it must be picked.
      const gap = top[0]!.logprob - top[4]!.logprob + 0.5;
      const lift = await ctx.complete({ prompt, maxTokens: 1, temperature: 0, logprobs: 5, logitBias: { [top[4]!.token]: gap, [top[2]!.token]: -1 } });
      expect(lift.logprobs![0]!.token).toBe(top[4]!.token);
      lifted++;
    }
    expect(banned + lifted).toBe(24);
  });

  it('a longer run: every token is the argmax of logprob + bias among the top-20 it saw', async () => {
    const bias: Record<string, number> = {};
    for (let t = 3; t < 200; t += 7) bias[String(t)] = ((t % 5) - 2) * 0.75; // small biases both ways
    for (const eog of model.vocab.eogTokens) bias[String(eog)] = -Infinity;
    const r = await ctx.complete({ prompt: [1, 5, 9, 13], maxTokens: 40, temperature: 0, logprobs: 20, logitBias: bias });
    expect(r.logprobs!.length).toBe(40);
    for (const step of r.logprobs!) {
      const score = (tok: number, lp: number) => lp + (bias[String(tok)] ?? 0);
      const best = step.top.reduce((a, b) => (score(b.token, b.logprob) > score(a.token, a.logprob) ? b : a));
      // the pick is the best biased entry of the top 20, or one lifted there from below it
      expect(score(step.token, step.logprob)).toBeGreaterThanOrEqual(score(best.token, best.logprob));
    }
  });
});
