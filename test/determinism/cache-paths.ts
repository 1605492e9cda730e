// Issue 26's cache-path suite, shared by test/determinism/paths*.test.ts: with
// `deterministic: true` the logits of every position are bit-identical whatever path produced
// them (cold, chunked prefill, 8 concurrent sequences, live prefix, shared prefix, session
// continue, fork, RAM tier, disk tier, KV-full preemption). The logits come from the scheduler
// through the testing tap (native/testing/logits_tap.h), keyed by each request's seed. The same paths in
// default mode report the largest deviation they saw (the test can see a difference).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native/binding.js';
import { loadModel, type Context, type ContextOptions, type GenerateOptions, type GenerateResult, type Model } from '../../src/index.js';

const PROMPTS = 20;
const STEPS = 4;
const AUX = 100_000; // seeds of helper requests, never compared
const THREADS = { threads: 2, batchThreads: 2 } as const;
const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
const dirs: string[] = [];
const report: string[] = [];

function words(n: number, seed: number): string {
  const w = ['river', 'stone', 'light', 'paper', 'green', 'music', 'table', 'cloud', 'north', 'glass', 'water', 'house', 'amber', 'quiet'];
  return Array.from({ length: n }, (_, i) => w[(i * 7 + seed * 5 + ((i * seed) % 3)) % w.length]).join(' ');
}

type Logits = Map<number, Map<number, Float32Array>>; // seed -> step -> logits

function take(): Logits {
  const out: Logits = new Map();
  for (const r of native.testing.takeLogits()) {
    if (r.seed >= AUX) continue;
    if (!out.has(r.seed)) out.set(r.seed, new Map());
    out.get(r.seed)!.set(r.step, r.logits);
  }
  return out;
}

afterAll(() => {
  native.testing.logitsTap(false);
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  if (report.length) console.log(`determinism (path: positions compared, max |logit difference|, bitwise-different positions):\n${report.join('\n')}`);
});

export function describeCachePaths(label: string, modelPath: () => string, modes: readonly boolean[], timeoutMs = 120_000): void {
  describe.each(modes.map((m) => [m]))(`${label}, deterministic: %s`, (deterministic) => {
    let model: Model;
    let coldCtx: Context;
    const tok = (text: string): number[] => Array.from(model.tokenize(text, { addSpecial: false }));
    const ctxOpts = (o: Partial<ContextOptions>): ContextOptions =>
      ({ ...THREADS, contextSize: 2048, sequences: 1, cacheRamMb: 0, toolCallMarkers: false, deterministic, ...o }) as ContextOptions;
    const opts = (prompt: number[], seed: number, extra: Partial<GenerateOptions> = {}): GenerateOptions =>
      ({ prompt, temperature: 0, maxTokens: STEPS, emitTokenIds: true, seed, ...extra });
    const bases = Array.from({ length: PROMPTS }, (_, i) => i + 1); // seeds (0 would draw a random one)
    const base = (i: number) => tok(words(24 + (i % 9), i + 1));
    const tail = (i: number) => tok(' ' + words(6 + (i % 5), i + 40));

    /** Runs `run` with the tap on; returns its results and logits. */
    async function tapped<T>(run: () => Promise<T>): Promise<[T, Logits]> {
      native.testing.logitsTap(true);
      try {
        const r = await run();
        return [r, take()];
      } finally {
        native.testing.logitsTap(false);
      }
    }

    /** The cold run of each (seed, tokens): one sequence, no cache. */
    async function cold(prompts: Map<number, number[]>, maxTokens = STEPS): Promise<[Map<number, GenerateResult>, Logits]> {
      return tapped(async () => {
        const out = new Map<number, GenerateResult>();
        for (const [seed, p] of prompts) out.set(seed, await coldCtx.complete(opts(p, seed, { maxTokens })));
        return out;
      });
    }

    /** Compares a path's logits with the cold ones, step by step while the tokens before agree. */
    function compare(path: string, want: [Map<number, GenerateResult>, Logits], got: [Map<number, GenerateResult>, Logits]): void {
      let positions = 0;
      let differ = 0;
      let maxDev = 0;
      for (const [seed, wantRes] of want[0]) {
        const gotRes = got[0].get(seed);
        expect(gotRes, `${path}: seed ${seed} ran`).toBeDefined();
        const wt = ids(wantRes);
        const gt = ids(gotRes!);
        for (let step = 0; step < wt.length; step++) {
          if (step > 0 && wt[step - 1] !== gt[step - 1]) break;
          const a = want[1].get(seed)?.get(step);
          const b = got[1].get(seed)?.get(step);
          expect(a && b, `${path}: seed ${seed} step ${step} has logits`).toBeTruthy();
          positions++;
          if (!Buffer.from(a!.buffer, a!.byteOffset, a!.byteLength).equals(Buffer.from(b!.buffer, b!.byteOffset, b!.byteLength))) {
            differ++;
            for (let k = 0; k < a!.length; k++) maxDev = Math.max(maxDev, Math.abs(a![k]! - b![k]!));
          }
        }
        if (deterministic) expect(gt, `${path}: seed ${seed} tokens`).toEqual(wt);
      }
      report.push(`  ${deterministic ? 'deterministic' : 'default'} ${path}: ${positions}, ${maxDev.toExponential(2)}, ${differ}`);
      expect(positions).toBeGreaterThanOrEqual(PROMPTS);
      if (deterministic) expect(differ, `${path}: positions whose logits differ (max ${maxDev})`).toBe(0);
    }

    beforeAll(async () => {
      model = await loadModel(modelPath());
      coldCtx = await model.createContext(ctxOpts({ prefixCache: false }));
    }, timeoutMs);

    afterAll(async () => {
      await coldCtx?.dispose();
      await model?.dispose();
    });

    it('chunked prefill, 8 concurrent sequences, KV-full preemption', async () => {
      const prompts = new Map(bases.map((i) => [i, [...base(i), ...tail(i)]]));
      const want = await cold(prompts);
      const chunked = await model.createContext(ctxOpts({ prefillChunk: 7, prefixCache: false }));
      try {
        compare('chunked-7', want, await tapped(async () => {
          const out = new Map<number, GenerateResult>();
          for (const [seed, p] of prompts) out.set(seed, await chunked.complete(opts(p, seed)));
          return out;
        }));
      } finally {
        await chunked.dispose();
      }
      const eight = await model.createContext(ctxOpts({ sequences: 8, prefixCache: false }));
      try {
        compare('8-concurrent', want, await tapped(async () => {
          const rs = await Promise.all([...prompts].map(([seed, p]) => eight.complete(opts(p, seed))));
          return new Map(rs.map((r, k) => [[...prompts.keys()][k]!, r]));
        }));
      } finally {
        await eight.dispose();
      }
      // 4 sequences of ~40 + 40 tokens in 192 cells: some step back and are recomputed
      const long = await cold(prompts, 40);
      const tight = await model.createContext(ctxOpts({ contextSize: 192, sequences: 4, prefixCache: false }));
      try {
        compare('preemption', long, await tapped(async () => {
          const rs = await Promise.all([...prompts].map(([seed, p]) => tight.complete(opts(p, seed, { maxTokens: 40 }))));
          return new Map(rs.map((r, k) => [[...prompts.keys()][k]!, r]));
        }));
        expect(tight.cacheStats().preemptions).toBeGreaterThan(0);
      } finally {
        await tight.dispose();
      }
    }, timeoutMs);

    it('live prefix and a prefix shared across sequences (seq_cp)', async () => {
      const prompts = new Map(bases.map((i) => [i, [...base(i), ...tail(i)]]));
      const want = await cold(prompts);
      const ctx = await model.createContext(ctxOpts({ sequences: 2 }));
      try {
        compare('live-prefix', want, await tapped(async () => {
          const out = new Map<number, GenerateResult>();
          for (const [seed, p] of prompts) {
            await ctx.complete(opts(base(seed), AUX + seed));
            const r = await ctx.complete(opts(p, seed));
            expect(r.reusedTokens).toBeGreaterThan(0);
            out.set(seed, r);
          }
          return out;
        }));
        compare('shared-prefix', want, await tapped(async () => {
          const out = new Map<number, GenerateResult>();
          for (const [seed, p] of prompts) {
            const s = ctx.createSession({ id: `pin${seed}` });
            await s.generate(opts(base(seed), AUX + seed)).result;
            const r = await ctx.complete(opts(p, seed));
            expect(r.cache.tier).toBe('shared');
            out.set(seed, r);
            await s.end();
          }
          return out;
        }));
      } finally {
        await ctx.dispose();
      }
    }, timeoutMs);

    it('session continue and fork', async () => {
      const ctx = await model.createContext(ctxOpts({ sequences: 2 }));
      try {
        const committed = new Map<number, number[]>();
        const forkTail = (i: number) => tok(' ' + words(5, i + 80));
        const cont = await tapped(async () => {
          const out = new Map<number, GenerateResult>();
          for (const i of bases) {
            const s = ctx.createSession({ id: `s${i}` });
            const a = await s.generate(opts(base(i), AUX + i)).result;
            const c = await s.continue(tail(i), { temperature: 0, maxTokens: STEPS, emitTokenIds: true, seed: i }).result;
            committed.set(i, [...base(i), ...ids(a), ...tail(i)]);
            out.set(i, c);
            const f = await s.fork({ id: `f${i}` });
            out.set(1000 + i, await f.continue(forkTail(i), { temperature: 0, maxTokens: STEPS, emitTokenIds: true, seed: 1000 + i }).result);
            committed.set(1000 + i, [...base(i), ...ids(a), ...tail(i), ...ids(c), ...forkTail(i)]);
            await s.end();
            await f.end();
          }
          return out;
        });
        const continues = new Map([...committed].filter(([k]) => k < 1000));
        const forked = new Map([...committed].filter(([k]) => k >= 1000));
        const sub = (keys: Iterable<number>): [Map<number, GenerateResult>, Logits] =>
          [new Map([...keys].map((k) => [k, cont[0].get(k)!])), cont[1]];
        compare('session-continue', await cold(continues), sub(continues.keys()));
        compare('fork', await cold(forked), sub(forked.keys()));
      } finally {
        await ctx.dispose();
      }
    }, timeoutMs);

    it('RAM tier and disk tier', async () => {
      const prompts = new Map(bases.map((i) => [i, [...base(i), ...tail(i)]]));
      const want = await cold(prompts);
      const dir = mkdtempSync(join(tmpdir(), 'llamux-det-disk-'));
      dirs.push(dir);
      const ram = await model.createContext(ctxOpts({ cacheRamMb: 64, cacheDir: dir }));
      try {
        compare('ram-tier', want, await tapped(async () => {
          const out = new Map<number, GenerateResult>();
          for (const [seed, p] of prompts) {
            await ram.complete(opts(base(seed), AUX + seed));
            await ram.complete(opts(tok(words(20, seed + 200)), AUX + 500 + seed, { maxTokens: 1 })); // base moves to RAM
            const r = await ram.complete(opts(p, seed));
            expect(r.cache.tier).toBe('ram');
            out.set(seed, r);
          }
          return out;
        }));
      } finally {
        await ram.dispose();
      }
      const disk = await model.createContext(ctxOpts({ cacheDir: dir }));
      try {
        const other = new Map(bases.map((i) => [i, [...base(i), ...tok(' ' + words(5, i + 300))]]));
        const wantOther = await cold(other);
        compare('disk-tier', wantOther, await tapped(async () => {
          const out = new Map<number, GenerateResult>();
          for (const [seed, p] of other) {
            const r = await disk.complete(opts(p, seed));
            expect(r.cache.tier).toBe('disk');
            out.set(seed, r);
          }
          return out;
        }));
      } finally {
        await disk.dispose();
      }
    }, timeoutMs);
  });
}
