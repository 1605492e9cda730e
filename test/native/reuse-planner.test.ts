import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { native, type NativeReuseInputs } from '../../src/native/binding.js';

const plan = (inputs: NativeReuseInputs) => native.testing.planReuse(inputs);

describe('native reuse planner (PlanReuse)', () => {
  it('plans a cold prefill when nothing shares the prompt', () => {
    expect(plan({ promptTokens: 100, liveTokens: 40, liveCommon: 0 })).toMatchObject({ source: 'none', common: 0, outcome: 'cold', tier: '' });
  });

  it('reuses the target sequence: partial, exact when all but the last token match, sticky when pinned', () => {
    expect(plan({ promptTokens: 100, liveTokens: 60, liveCommon: 50 })).toMatchObject({ source: 'live', common: 50, outcome: 'partial', tier: 'live' });
    expect(plan({ promptTokens: 100, liveTokens: 100, liveCommon: 100, kept: 99 })).toMatchObject({ source: 'live', outcome: 'exact' });
    expect(plan({ promptTokens: 100, liveTokens: 60, liveCommon: 60, pinned: true })).toMatchObject({ source: 'live', outcome: 'sticky' });
    expect(plan({ promptTokens: 100, liveTokens: 60, liveCommon: 50, pinned: true })).toMatchObject({ outcome: 'partial' });
  });

  it('copies another sequence only when it beats the best by minGain, and never from the target', () => {
    const base = { promptTokens: 100, liveTokens: 20, liveCommon: 20, target: 0 };
    expect(plan({ ...base, sequenceCommon: [20, 27] })).toMatchObject({ source: 'live', common: 20 });
    expect(plan({ ...base, sequenceCommon: [20, 28] })).toMatchObject({ source: 'shared', common: 28, shareFrom: 1, outcome: 'partial', tier: 'shared' });
    expect(plan({ ...base, liveCommon: 20, sequenceCommon: [90, 10] })).toMatchObject({ source: 'live' });
    expect(plan({ ...base, unifiedKv: false, sequenceCommon: [20, 90] })).toMatchObject({ source: 'live' });
  });

  it('restores a spilled session on any gain; whole states only when the memory cannot truncate', () => {
    expect(plan({ promptTokens: 100, sessionTokens: 80, sessionCommon: 21, liveCommon: 20, liveTokens: 30 })).toMatchObject({ source: 'session', common: 21, outcome: 'restored', tier: 'ram' });
    expect(plan({ promptTokens: 100, canTruncate: false, sessionTokens: 80, sessionCommon: 60 })).toMatchObject({ source: 'none' });
    expect(plan({ promptTokens: 100, canTruncate: false, sessionTokens: 80, sessionCommon: 80 })).toMatchObject({ source: 'session', common: 80 });
    // with checkpoints the commons are measured at restorable positions: partial reuse is fine
    expect(plan({ promptTokens: 100, canTruncate: false, checkpoints: true, sessionTokens: 80, sessionCommon: 60 })).toMatchObject({ source: 'session', common: 60 });
  });

  it('prefers the RAM tier over a shared copy when it gives minGain more, and a ready disk read over both', () => {
    const base = { promptTokens: 200, target: 0, sequenceCommon: [0, 40] };
    expect(plan({ ...base, ramCommon: 47 })).toMatchObject({ source: 'shared', common: 40 });
    expect(plan({ ...base, ramCommon: 48 })).toMatchObject({ source: 'ram', common: 48, outcome: 'restored', tier: 'ram' });
    expect(plan({ ...base, ramCommon: 48, diskReadyCommon: 56 })).toMatchObject({ source: 'disk', common: 56, tier: 'disk' });
    expect(plan({ ...base, ramCommon: 48, diskReadyCommon: 55 })).toMatchObject({ source: 'ram' });
  });

  it('asks for a disk read only when the disk beats every other source by minGain', () => {
    const base = { promptTokens: 200, liveCommon: 10, liveTokens: 10, target: 0, sequenceCommon: [10, 30], ramCommon: 20 };
    expect(plan({ ...base, diskCommon: 37 })).toMatchObject({ readDisk: false, source: 'shared' });
    expect(plan({ ...base, diskCommon: 38 })).toMatchObject({ readDisk: true, source: 'disk', common: 38 });
    expect(plan({ ...base, diskCommon: 100, canTruncate: false })).toMatchObject({ readDisk: false });
  });

  it('reuses nothing but the live KV when the prefix cache is off', () => {
    expect(plan({ enabled: false, promptTokens: 100, sequenceCommon: [0, 90], target: 0, ramCommon: 90, diskCommon: 90 })).toMatchObject({ source: 'none', readDisk: false });
  });

  it('never plans more tokens than the best source provides, and a kept count of 0 is cold', () => {
    fc.assert(fc.property(
      fc.record({
        promptTokens: fc.integer({ min: 1, max: 300 }),
        liveCommon: fc.integer({ min: 0, max: 300 }),
        sessionCommon: fc.option(fc.integer({ min: 0, max: 300 }), { nil: undefined }),
        sequenceCommon: fc.array(fc.integer({ min: 0, max: 300 }), { maxLength: 4 }),
        ramCommon: fc.option(fc.integer({ min: 0, max: 300 }), { nil: undefined }),
        diskReadyCommon: fc.option(fc.integer({ min: 0, max: 300 }), { nil: undefined }),
        canTruncate: fc.boolean(),
      }),
      (r) => {
        const inputs: NativeReuseInputs = { promptTokens: r.promptTokens, liveCommon: r.liveCommon, liveTokens: r.liveCommon, sequenceCommon: r.sequenceCommon, target: 0, canTruncate: r.canTruncate };
        if (r.sessionCommon !== undefined) Object.assign(inputs, { sessionCommon: r.sessionCommon, sessionTokens: r.sessionCommon });
        if (r.ramCommon !== undefined) inputs.ramCommon = r.ramCommon;
        if (r.diskReadyCommon !== undefined) inputs.diskReadyCommon = r.diskReadyCommon;
        const p = plan(inputs);
        const sources = [r.liveCommon, r.sessionCommon ?? 0, ...r.sequenceCommon.slice(1), r.ramCommon ?? 0, r.diskReadyCommon ?? 0];
        expect(p.common).toBeLessThanOrEqual(Math.max(...sources));
        expect(p.common).toBeGreaterThanOrEqual(r.liveCommon);
        expect(plan({ ...inputs, kept: 0 })).toMatchObject({ outcome: 'cold', tier: '' });
      },
    ));
  });

  it('recurrent/hybrid memories with checkpoints: live, shared, RAM and disk reuse up to a checkpoint', () => {
    const h = { promptTokens: 100, canTruncate: false, checkpoints: true } as const;
    expect(plan({ ...h, liveTokens: 90, liveCommon: 59 })).toMatchObject({ source: 'live', common: 59, outcome: 'partial' });
    expect(plan({ ...h, canTruncate: false, checkpoints: false, liveTokens: 90, liveCommon: 59 })).toMatchObject({ source: 'none' });
    expect(plan({ ...h, liveTokens: 0, liveCommon: 0, ramCommon: 40 })).toMatchObject({ source: 'ram', common: 40 });
    expect(plan({ ...h, liveTokens: 0, liveCommon: 0, diskCommon: 40 })).toMatchObject({ readDisk: true });
    expect(plan({ ...h, liveTokens: 10, liveCommon: 10, target: 0, sequenceCommon: [10, 90] })).toMatchObject({ source: 'shared', common: 90, shareFrom: 1 });
    expect(plan({ ...h, checkpoints: false, liveTokens: 10, liveCommon: 10, target: 0, sequenceCommon: [10, 90] })).toMatchObject({ source: 'live', common: 10 });
  });
});
