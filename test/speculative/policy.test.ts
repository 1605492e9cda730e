// The draft-length policy (native/speculative/speculative.cc), tick by tick through the testing hook: one
// tile first, longer drafts only once the evidence says the text keeps agreeing, pauses that
// double while drafts miss, and a context's history as a new request's first estimate.
// Expected lengths are worked out by hand from the cost model in speculative.h (a plain step 1,
// each tile of 4 verified rows 1.0 more, 0.005 per n-gram draft token, 0.035 per draft-model
// token) and the 2-accepted/1-miss prior.
import { describe, expect, it } from 'vitest';
import { native } from '../../src/native/binding.js';

const policy = native.testing.speculativePolicy;
const ticks = (n: number, agree: number): number[] => Array.from({ length: n }, () => agree);

describe('speculative draft-length policy', () => {
  it('a request whose drafts always stand: one tile, then 7, then 11 as the evidence grows', () => {
    // agreement estimates 2/3 → 3; 5/6 → 3 (7 yields 1.517 tokens per step, 3 1.541); 0.881 → 7;
    // 0.930 → 7 (11: 2.050, 7: 2.075); 0.948 → 11
    expect(policy(12, 0, 0, ticks(6, 100)).lengths).toEqual([3, 3, 7, 7, 11, 11]);
  });

  it("a draft model's own cost per token keeps drafts shorter: 11 drafts one tick later", () => {
    // at 0.948, 11 drafts yield 2.070 tokens per step and 7 drafts 2.057 (11 must win by 1 %)
    expect(policy(12, 0, 0, ticks(6, 100), true).lengths).toEqual([3, 3, 7, 7, 7, 11]);
  });

  it('draftMax caps every draft', () => {
    expect(policy(2, 0, 0, ticks(4, 100)).lengths).toEqual([2, 2, 2, 2]);
  });

  it('drafts that never stand: a pause after the first miss, then probes after pauses of 1, 2, 4, 8 ... 64 ticks', () => {
    const { lengths, misses, accepted } = policy(12, 0, 0, ticks(140, 0));
    const probes = lengths.flatMap((k, t) => (k > 0 ? [t] : []));
    // tick 0 drafts; tick 1 decides against (pause 1): probes at 3, 6, 11, 20, 37, 70, 135
    expect(probes).toEqual([0, 3, 6, 11, 20, 37, 70, 135]);
    expect(lengths.filter((k) => k > 0).every((k) => k === 3)).toBe(true);
    expect(accepted).toBe(0);
    expect(misses).toBeGreaterThan(5);
  });

  it('a context whose drafts missed starts a new request paused for 16 ticks', () => {
    const { lengths } = policy(12, 0, 10, ticks(20, 0));
    expect(lengths.slice(0, 16).every((k) => k === 0)).toBe(true);
    expect(lengths[16]).toBe(3);
  });

  it('a context whose drafts stood starts a new request at two tiles', () => {
    expect(policy(12, 100, 5, ticks(1, 100)).lengths).toEqual([7]);
  });

  it('a probe whose draft stands ends the pause', () => {
    // misses until tick 3 (the first probe), then every draft stands: drafting every tick from there
    const agree = [0, 0, 0, ...ticks(10, 100)];
    const { lengths } = policy(12, 0, 0, agree);
    expect(lengths.slice(0, 4)).toEqual([3, 0, 0, 3]);
    expect(lengths.slice(4).every((k) => k > 0)).toBe(true);
  });

  it('drafts that keep 2 of 3 go on at one tile (3 tokens per verification of ~1.96 steps)', () => {
    expect(policy(12, 0, 0, ticks(12, 2)).lengths).toEqual(ticks(12, 3));
  });

  it('drafts that keep none of 7 after a run of full ones: back to one tile, then a pause', () => {
    const { lengths } = policy(12, 0, 0, [...ticks(4, 100), ...ticks(10, 0)]);
    expect(lengths.slice(0, 5)).toEqual([3, 3, 7, 7, 11]);
    // each miss lowers the estimate (0.881, 0.814, 0.748, 0.685, 0.625, 0.570, then 0.520: below
    // the break-even of one tile)
    expect(lengths.slice(5, 12)).toEqual([7, 3, 3, 3, 3, 3, 0]);
  });
});
