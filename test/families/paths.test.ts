// Every reuse path on every zoo architecture (issue 24, item 2), against the same model run
// cold on one sequence: greedy tokens equal. Where a memory type cannot do what a path needs
// (a recurrent state cannot be shared by cell tags), llamux recomputes and the cache report
// says so. Logits are not exposed by llamux; the zoo's construction gives the greedy token a
// margin of at least 1.2 logits (gemma4; about 5-8 elsewhere, measured in test/gguf/zoo.test.ts),
// so equal greedy tokens bound the drift of every path below that margin.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZOO_ARCHITECTURES, type ZooArchitecture, type ZooModelDescription } from '../../src/gguf/index.js';
import { LlamuxError, loadModel, type Context, type GenerateOptions, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD } from '../helpers/models.js';
import { zooModels } from '../helpers/zoo.js';

const STEPS = 5;
const HYBRID = new Set<ZooArchitecture>(['qwen35', 'qwen35moe', 'granitehybrid', 'lfm2']);
const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
const table: string[] = [];
const dirs: string[] = [];

function words(n: number, seed: number): string {
  const w = ['river', 'stone', 'light', 'paper', 'green', 'music', 'table', 'cloud', 'north', 'glass', 'water', 'house'];
  return Array.from({ length: n }, (_, i) => w[(i * 7 + seed * 5 + ((i * seed) % 3)) % w.length]).join(' ');
}

let zoo: Record<ZooArchitecture, ZooModelDescription>;

beforeAll(async () => {
  zoo = await zooModels();
}, 180_000);

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  if (table.length) console.log(`families (path: cache report):\n${table.join('\n')}`);
});

describe.each(ZOO_ARCHITECTURES)('%s: every path against a cold single-sequence run', (arch) => {
  let model: Model;
  let coldCtx: Context;
  const row: string[] = [];
  const tok = (text: string): number[] => Array.from(model.tokenize(text, { addSpecial: false }));
  const opts = (prompt: number[], extra: Partial<GenerateOptions> = {}): GenerateOptions => ({ prompt, temperature: 0, maxTokens: STEPS, emitTokenIds: true, ...extra });
  async function cold(prompt: number[], extra: Partial<GenerateOptions> = {}): Promise<GenerateResult> {
    const r = await coldCtx.complete(opts(prompt, extra));
    expect(r.reusedTokens).toBe(0);
    return r;
  }
  const note = (path: string, r: GenerateResult) =>
    row.push(`${path}=${r.cache.outcome}${r.cache.tier ? `/${r.cache.tier}` : ''}:${r.reusedTokens}${r.cache.checkpoint !== undefined ? '@ckpt' : ''}`);

  beforeAll(async () => {
    model = await loadModel(zoo[arch].path);
    coldCtx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, prefixCache: false, cacheRamMb: 0, toolCallMarkers: false });
  }, 60_000);

  afterAll(async () => {
    await coldCtx?.dispose();
    await model?.dispose();
    table.push(`  ${arch}: ${row.join(' ')}`);
  });

  it('generate and stream, 8 concurrent sequences, abort', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 8, cacheRamMb: 0, toolCallMarkers: false });
    try {
      const prompts = Array.from({ length: 8 }, (_, i) => tok(words(24 + i, i + 1)));
      const want = await Promise.all(prompts.map((p) => cold(p)));
      // stream
      const gen = ctx.generate(opts(prompts[0]!));
      const streamed: number[] = [];
      for await (const ev of gen) if (ev.type === 'text') streamed.push(...(ev.tokens ?? []));
      const r0 = await gen.result;
      expect(streamed).toEqual(ids(want[0]!));
      expect(ids(r0)).toEqual(ids(want[0]!));
      // 8 at once
      const all = await Promise.all(prompts.map((p) => ctx.complete(opts(p))));
      all.forEach((r, i) => expect(ids(r), `sequence ${i}`).toEqual(ids(want[i]!)));
      // abort after the first token, then the same prompt again
      const ac = new AbortController();
      const g = ctx.generate(opts(prompts[1]!, { maxTokens: 64, signal: ac.signal }));
      const err = (async () => {
        for await (const ev of g) if (ev.type === 'text') ac.abort();
      })().then(() => undefined, (e: unknown) => e);
      expect(await err).toBeInstanceOf(LlamuxError);
      const again = await ctx.complete(opts(prompts[1]!));
      expect(ids(again)).toEqual(ids(want[1]!));
      note('abort-then-repeat', again);
    } finally {
      await ctx.dispose();
    }
  }, 90_000);

  it('KV-full preemption', async () => {
    // 4 requests of about 30 + 40 tokens in 192 shared cells: some must step back
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 192, sequences: 4, cacheRamMb: 0, toolCallMarkers: false });
    try {
      const prompts = Array.from({ length: 4 }, (_, i) => tok(words(30, 20 + i)));
      const want = await Promise.all(prompts.map((p) => cold(p, { maxTokens: 40 })));
      const got = await Promise.all(prompts.map((p) => ctx.complete(opts(p, { maxTokens: 40 }))));
      got.forEach((r, i) => expect(ids(r), `request ${i}`).toEqual(ids(want[i]!)));
      expect(ctx.cacheStats().preemptions).toBeGreaterThan(0);
      row.push(`preempted=${ctx.cacheStats().preemptions}`);
    } finally {
      await ctx.dispose();
    }
  }, 90_000);

  it('live longest-prefix reuse and a prefix shared across sequences', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 2, cacheRamMb: 0, toolCallMarkers: false });
    try {
      const base = tok(words(40, 31));
      const tail = tok(' ' + words(12, 32));
      const a = await ctx.complete(opts(base));
      const repeat = await ctx.complete(opts(base));
      expect(repeat.reusedTokens).toBe(base.length - 1);
      expect(ids(repeat)).toEqual(ids(a));
      note('repeat', repeat);
      const diverged = [...base, ...tail];
      const b = await ctx.complete(opts(diverged));
      expect(b.reusedTokens).toBe(HYBRID.has(arch) ? base.length - 1 : base.length);
      expect(ids(b)).toEqual(ids(await cold(diverged)));
      note('diverge', b);
      // a session pins one sequence to the base; a request on the other sequence shares it
      const s = ctx.createSession({ id: 'pin' });
      await s.generate(opts(base)).result;
      const other = [...base.slice(0, 30), ...tok(' ' + words(10, 33))];
      const shared = await ctx.complete(opts(other));
      expect(ids(shared)).toEqual(ids(await cold(other)));
      if (HYBRID.has(arch)) {
        // no checkpoint of the pinned sequence at or below 30: recomputed, and the report says so
        expect(shared.cache).toMatchObject({ outcome: 'cold', reusedTokens: 0 });
      } else {
        expect(shared.cache).toMatchObject({ tier: 'shared', reusedTokens: 30 });
      }
      note('shared30', shared);
      // sharing the whole base: hybrids copy the sequence and restore its checkpoint at base - 1
      const other2 = [...base, ...tok(' ' + words(10, 34))];
      const shared2 = await ctx.complete(opts(other2));
      expect(ids(shared2)).toEqual(ids(await cold(other2)));
      expect(shared2.cache).toMatchObject({ tier: 'shared', reusedTokens: HYBRID.has(arch) ? base.length - 1 : base.length });
      if (HYBRID.has(arch)) expect(shared2.cache.checkpoint).toBe(base.length - 1);
      note('shared40', shared2);
      // the sequence shared from goes on exactly
      const pinned = await s.generate(opts(base)).result;
      const goOn = await s.continue(tail, { temperature: 0, maxTokens: STEPS, emitTokenIds: true }).result;
      expect(ids(goOn)).toEqual(ids(await cold([...base, ...ids(pinned), ...tail])));
      await s.end();
    } finally {
      await ctx.dispose();
    }
  }, 90_000);

  it('session continue, fork and end', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 2, cacheRamMb: 0, toolCallMarkers: false });
    try {
      const base = tok(words(30, 41));
      const tail = tok(' ' + words(8, 42));
      const s = ctx.createSession({ id: 'a' });
      const a = await s.generate(opts(base)).result;
      const committed = [...base, ...ids(a)];
      const c = await s.continue(tail, { temperature: 0, maxTokens: STEPS, emitTokenIds: true }).result;
      expect(c.cache.outcome).toBe('sticky');
      expect(ids(c)).toEqual(ids(await cold([...committed, ...tail])));
      note('continue', c);
      const f = await s.fork({ id: 'b' });
      const tail2 = tok(' ' + words(8, 43));
      const fc = await f.continue(tail2, { temperature: 0, maxTokens: STEPS, emitTokenIds: true }).result;
      expect(ids(fc)).toEqual(ids(await cold([...committed, ...tail, ...ids(c), ...tail2])));
      expect(fc.reusedTokens).toBeGreaterThan(0);
      note('fork', fc);
      await s.end();
      await f.end();
      expect(ctx.cacheStats().sessions).toBe(0);
    } finally {
      await ctx.dispose();
    }
  }, 90_000);

  it('RAM tier, disk tier after a restart, prefillOnly + parentKey', async () => {
    const base = tok(words(40, 51));
    const tail = tok(' ' + words(10, 52));
    const diverged = [...base, ...tail];
    const want = await cold(diverged);
    const dir = mkdtempSync(join(tmpdir(), `llamux-fam-${arch}-`));
    dirs.push(dir);
    {
      const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, cacheRamMb: 32, cacheDir: dir, toolCallMarkers: false });
      await ctx.complete(opts(base));
      await ctx.complete(opts(tok(words(40, 53)), { maxTokens: 2 })); // base's state moves to the RAM tier
      const r = await ctx.complete(opts(diverged));
      expect(r.cache.tier).toBe('ram');
      expect(r.reusedTokens).toBe(HYBRID.has(arch) ? base.length - 1 : base.length);
      expect(ids(r)).toEqual(ids(want));
      expect(ctx.cacheStats().ramBytes).toBeLessThanOrEqual(ctx.cacheStats().ramBudget);
      note('ram', r);
      // prefillOnly + parentKey
      const warm = await ctx.prefillOnly(tok(words(36, 54)));
      const child = tok(' ' + words(6, 55));
      const p = await ctx.complete({ parentKey: warm.key, prompt: child, temperature: 0, maxTokens: STEPS, emitTokenIds: true });
      expect(p.reusedTokens).toBe(warm.tokens);
      expect(ids(p)).toEqual(ids(await cold([...tok(words(36, 54)), ...child])));
      note('parentKey', p);
      await ctx.dispose();
    }
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, cacheRamMb: 0, cacheDir: dir, toolCallMarkers: false });
    try {
      // another divergence after base (the first one's own state is on disk too)
      const diverged2 = [...base, ...tok(' ' + words(10, 56))];
      const r = await ctx.complete(opts(diverged2));
      expect(r.cache.tier).toBe('disk');
      expect(r.reusedTokens).toBe(HYBRID.has(arch) ? base.length - 1 : base.length);
      expect(ids(r)).toEqual(ids(await cold(diverged2)));
      note('disk', r);
    } finally {
      await ctx.dispose();
    }
  }, 90_000);

  it('markers + tool grammar', async () => {
    const markers = { start: '<tool_call>', end: '</tool_call>' };
    const tools = [{ name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string', maxLength: 8 } }, required: ['q'], additionalProperties: false } }];
    const base = tok(words(30, 61));
    const o = { prompt: base, temperature: 0, maxTokens: 40, emitTokenIds: true, tools, toolChoice: 'required' as const, parallelToolCalls: false };
    const coldTools = await model.createContext({ ...ONE_THREAD, contextSize: 1024, sequences: 1, prefixCache: false, cacheRamMb: 0, toolCallMarkers: markers });
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 4, cacheRamMb: 0, toolCallMarkers: markers });
    try {
      const want = await coldTools.complete(o);
      expect(want.toolCalls.length + (want.truncatedToolCall ? 1 : 0)).toBe(1);
      const got = await Promise.all([0, 1].map(() => ctx.complete(o)));
      for (const r of got) {
        expect(ids(r)).toEqual(ids(want));
        expect(r.toolCalls.map((t) => t.text)).toEqual(want.toolCalls.map((t) => t.text));
      }
      const again = await ctx.complete(o);
      expect(ids(again)).toEqual(ids(want));
      note('tools', again);
    } finally {
      await ctx.dispose();
      await coldTools.dispose();
    }
  }, 90_000);
});
