// ggml's CPU flash attention as llamux builds it (scripts/llama-patches.mjs: the tiled kernel
// for 6+ query rows that see most of the KV, rewritten by fa-tiled-kt) against exact attention
// computed in double, on the mask shapes llama.cpp builds. Every CPU variant this machine can
// run is checked in a child process (LLAMUX_CPU_VARIANT), since each compiles the kernel for
// its own vector width.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { native, type FlashAttentionShape } from '../../src/native/binding.js';
import { systemInfo } from '../../src/index.js';
import { projectRoot } from '../helpers/paths.js';

// Shapes the tiled kernel takes (6+ rows that see most of the KV, or 64+ rows), with partial
// Q and KV tiles, GQA, head sizes that are not a multiple of 64, and every mask kind.
const tiled: FlashAttentionShape[] = [
  { queries: 64, kv: 256, mask: 'causal' },
  { queries: 248, kv: 1000, heads: 16, mask: 'causal' },
  { queries: 100, kv: 700, mask: 'sequences' },
  { queries: 80, kv: 300, mask: 'alibi' },
  { queries: 70, kv: 400, mask: 'holes' },
  { queries: 64, kv: 200, mask: 'none', softcap: 30 },
  { queries: 64, kv: 333, kvF32: true },
  { queries: 130, kv: 520, heads: 8, kvHeads: 2, headDim: 128 },
  { queries: 96, kv: 400, headDim: 80, valueDim: 64 },
  { queries: 6, kv: 900 },
  { queries: 13, kv: 650, heads: 4, kvHeads: 1 },
  { queries: 63, kv: 900, threads: 3 },
];
// Shapes that keep ggml's row kernel: too few rows, or rows that each see a small part of the KV.
const byRows: FlashAttentionShape[] = [
  { queries: 1, kv: 900 },
  { queries: 5, kv: 300 },
  { queries: 16, kv: 640, mask: 'sequences' },
  // masked runs the row kernel skips 32 cells at a time, and one-row steps over 512+ cells whose
  // KV split follows the visible cells (fa-masked-kv): an idle session's cells first, few
  // visible cells, more threads than visible cells
  { queries: 1, kv: 900, mask: 'holes' },
  { queries: 4, kv: 420, mask: 'holes' },
  { queries: 1, kv: 2100, mask: 'tail', threads: 4 },
  { queries: 1, kv: 600, mask: 'tail', threads: 3 },
  { queries: 1, kv: 700, mask: 'sparse', threads: 4 },
];

type Result = { kernel: number; reference: number; magnitude: number };

function expectExact(shape: FlashAttentionShape, r: Result, isTiled: boolean) {
  const what = JSON.stringify(shape);
  expect(r.magnitude, what).toBeGreaterThan(0.05); // the data is not degenerate
  // The reference is the kernel ggml's use_ref runs, deterministic mode's (det-fa-fixed: F32
  // scores, the softmax maximum first, the sums in 64-bit fixed point): 3e-8..2e-7 from exact
  // attention on these shapes. The tiled kernels compute in F32.
  expect(r.reference, what).toBeLessThan(1e-6);
  if (isTiled) {
    expect(r.kernel, what).toBeLessThan(1e-5);
  } else {
    // ggml's row kernel rounds Q to F16 and accumulates V in F16: 1e-4..1.5e-3 on these shapes;
    // deterministic mode's kernel is far more exact.
    expect(r.kernel, what).toBeLessThan(3e-3);
    expect(r.reference, what).toBeLessThan(r.kernel);
  }
}

describe('CPU flash attention', () => {
  it('matches exact attention for every mask kind, in the variant this CPU loads', () => {
    for (const s of tiled) expectExact(s, native.testing.flashAttentionCheck(s), true);
    for (const s of byRows) expectExact(s, native.testing.flashAttentionCheck(s), false);
  });

  it('matches it in every CPU variant this machine can run', () => {
    const variants = systemInfo().cpuVariants.filter((v) => v.score > 0).map((v) => v.name);
    expect(variants.length).toBeGreaterThan(0);
    const script = `
      const b = require('node-gyp-build')(process.argv[1]);
      const out = JSON.parse(process.argv[2]).map((s) => b.testing.flashAttentionCheck(s));
      process.stdout.write(JSON.stringify({ variant: b.systemInfo().cpuVariant, out }));`;
    const shapes = [...tiled, ...byRows];
    for (const variant of variants) {
      const r = spawnSync(process.execPath, ['-e', script, projectRoot, JSON.stringify(shapes)], {
        cwd: projectRoot,
        encoding: 'utf8',
        env: { ...process.env, LLAMUX_CPU_VARIANT: variant },
      });
      expect(r.status, `${variant}: ${r.stderr}`).toBe(0);
      const { variant: loaded, out } = JSON.parse(r.stdout) as { variant: string; out: Result[] };
      expect(loaded).toBe(variant);
      shapes.forEach((s, i) => expectExact({ ...s, variant } as FlashAttentionShape, out[i]!, i < tiled.length));
    }
  });

  it('rejects shapes it cannot build, with a RangeError', () => {
    expect(() => native.testing.flashAttentionCheck({ queries: 10, kv: 5 })).toThrow(RangeError);
    expect(() => native.testing.flashAttentionCheck({ queries: 8, kv: 64, heads: 6, kvHeads: 4 })).toThrow(/multiple of kvHeads/);
    expect(() => native.testing.flashAttentionCheck({ queries: 8, kv: 64, mask: 'diagonal' as never })).toThrow(/mask must be/);
  });
});
