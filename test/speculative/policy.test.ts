// The adaptive draft length (issue 27, native/speculative.h): a draft is as long as pays for
// its rows, from the context's measured step costs and the request's measured acceptance. The
// policy's inputs are timings, so it is checked here on given timings (testing hook over the
// same C++ the scheduler calls), and end to end only for what timing cannot change: the output.
import { afterAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { native } from '../../src/binding.js';
import { ONE_THREAD, script, testModel } from '../helpers/models.js';

const length = native.testing.speculativeLength;

/** Steps of a target where a verified row costs little (the bench's ~170 M target: 1 row 6.9 ms, 5 rows 8.2, 9 rows 8.8). */
const cheapRows: Array<[number, number]> = Array.from({ length: 30 }, (_, i): [number, number][] => [
  [1, 6.9],
  [5, 8.2 + (i % 3) * 0.05],
  [9, 8.8],
]).flat();
/** Steps of a compute-bound target: every row costs a step. */
const dearRows: Array<[number, number]> = Array.from({ length: 30 }, (_, i): [number, number][] => [
  [1, 1],
  [3, 3 + (i % 2) * 0.01],
  [5, 5],
]).flat();
/** Verifications of 8-token drafts at ~80 % per-token acceptance. */
const eighty: Array<[number, number]> = [
  [8, 8],
  [8, 3],
  [8, 5],
  [8, 8],
  [8, 2],
  [8, 6],
  [8, 8],
  [8, 4],
];

describe('speculative: the adaptive draft length', () => {
  it('fits the cost line of the steps it saw', () => {
    const r = length({ steps: cheapRows, maxLen: 12 });
    expect(r.perRow).toBeGreaterThan(0.1);
    expect(r.perRow).toBeLessThan(0.4);
    expect(r.fixed).toBeGreaterThan(6);
    expect(r.fixed).toBeLessThan(7.5);
    const d = length({ steps: dearRows, maxLen: 12 });
    expect(d.perRow).toBeGreaterThan(0.9);
    expect(d.fixed).toBeLessThan(0.2);
  });

  it('drafts long where rows are cheap and drafts are kept, short at first, never where rows cost a step', () => {
    const first = length({ maxLen: 12 });
    expect(first.acceptance).toBe(0.5);
    expect(first.length).toBeGreaterThanOrEqual(1);
    expect(first.length).toBeLessThanOrEqual(4);
    const good = length({ steps: cheapRows, verifications: eighty, maxLen: 12 });
    expect(good.acceptance).toBeGreaterThan(0.7);
    expect(good.acceptance).toBeLessThan(0.9);
    expect(good.length).toBeGreaterThanOrEqual(6);
    const perfect = length({ steps: cheapRows, verifications: Array(10).fill([8, 8]), maxLen: 12 });
    expect(perfect.length).toBe(12);
    // a verified row costs what a step does: no acceptance short of 1 pays for it
    expect(length({ steps: dearRows, verifications: eighty, maxLen: 12 }).length).toBe(0);
  });

  it('stops after misses and tries again after a while; eight sequences need better drafts than one', () => {
    const misses = Array(12).fill([2, 0]) as Array<[number, number]>;
    const bad = length({ steps: cheapRows, verifications: misses, maxLen: 12 });
    expect(bad.acceptance).toBeLessThan(0.03);
    expect(bad.length).toBe(0);
    const later = length({ steps: cheapRows, verifications: misses, idleTicks: 40, maxLen: 12 });
    expect(later.acceptance).toBeGreaterThan(0.2);
    expect(later.length).toBeGreaterThanOrEqual(1);
    expect(later.length).toBeLessThanOrEqual(3);
    const one = length({ steps: cheapRows, verifications: eighty, maxLen: 12, tokens: 1 });
    const eight = length({ steps: cheapRows, verifications: eighty, maxLen: 12, tokens: 8 });
    expect(eight.length).toBeLessThan(one.length);
  });

  it('counts what a draft token costs to make', () => {
    const free = length({ steps: cheapRows, verifications: eighty, maxLen: 12 });
    const dear = length({ steps: cheapRows, verifications: eighty, draftMs: [[4, 8]], maxLen: 12 });
    expect(dear.perDraftToken).toBe(2);
    expect(dear.length).toBeLessThan(free.length);
  });
});

describe('speculative: adaptive drafting end to end', () => {
  let m: Model | undefined;
  afterAll(async () => {
    await m?.dispose();
  });

  it('gives the output of no speculation, token for token, whatever lengths it chose', async () => {
    m = await loadModel(testModel('long-script').path);
    const s = script('long-script', 'main');
    const prompt = [...s.promptTokens, ...s.greedy, ...s.promptTokens.slice(1)];
    const ctx = await m.createContext({ ...ONE_THREAD, contextSize: 4096, toolCallMarkers: false, speculative: 'ngram' });
    try {
      const r = await ctx.complete({ prompt, temperature: 0, emitTokenIds: true });
      expect(Array.from(r.tokens ?? [])).toEqual(s.greedy);
      expect(r.timings.acceptedTokens).toBeLessThanOrEqual(r.timings.draftedTokens);
    } finally {
      await ctx.dispose();
    }
  });
});
