// Context shift (`overflow: 'shift' | 'reprefill'`, `nKeep`) on a scripted model whose greedy
// continuation is longer than the context. The model's flag rule makes the KV's content visible
// in the output: after `▁trig` it says `▁yes` while `▁flag` is anywhere in the context and `▁no`
// once it is gone, so a shift that really dropped the flag's cells (or kept them with nKeep)
// shows in the text. Expected numbers come from the documented rule (keep nKeep + BOS, drop half
// of the rest, at least what makes room), simulated below, never from the engine.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlamuxError, loadModel, type Context, type Model } from '../../src/index.js';
import { writeScriptedModel, type ScriptedModelDescription } from '../../src/gguf/scripted.js';
import { ONE_THREAD, piecesText } from '../helpers/models.js';
import { createServer } from '../../src/server/index.js';
import { zooModels } from '../helpers/zoo.js';

const WORDS = 400;
const CONSONANTS = 'bdfgklmnprstvz';
const VOWELS = 'aeiou';

/** WORDS distinct whole-word pieces (two or three syllables), the same every run. */
function words(): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  let x = 12345;
  const next = (): number => (x = (x * 1103515245 + 12345) % 2147483648);
  while (out.length < WORDS) {
    let w = '▁';
    const syllables = 2 + (next() % 2);
    for (let i = 0; i < syllables; i++) w += CONSONANTS[next() % CONSONANTS.length]! + VOWELS[next() % VOWELS.length]!;
    if (seen.has(w) || w === '▁flag' || w === '▁go' || w === '▁trig' || w === '▁yes' || w === '▁no') continue;
    seen.add(w);
    out.push(w);
  }
  return out;
}

/**
 * The tokens the sequence holds under the documented rule: each generated token is fed, and
 * when the list outgrows the window the first `keep` stay and max(overflow, half the rest) of
 * the oldest others go. Returns the final list and how many were dropped.
 */
function simulate(prompt: number[], generated: number[], nCtx: number, keep: number): { window: number[]; shifted: number } {
  let tokens = [...prompt];
  let shifted = 0;
  const fit = (): void => {
    if (tokens.length < nCtx) return;
    const rest = Math.max(1, Math.floor((nCtx - keep) / 2));
    const drop = tokens.length - keep - rest;
    tokens = [...tokens.slice(0, keep), ...tokens.slice(keep + drop)];
    shifted += drop;
  };
  fit();
  for (const t of generated) {
    tokens.push(t);
    if (tokens.length > nCtx) {
      const drop = Math.max(tokens.length - nCtx, Math.floor((tokens.length - 1 - keep) / 2));
      tokens = [...tokens.slice(0, keep), ...tokens.slice(keep + drop)];
      shifted += drop;
    }
  }
  return { window: tokens, shifted };
}

describe('context shift: overflow "shift" / "reprefill" with nKeep (scripted model)', () => {
  let dir: string;
  let model: Model;
  let d: ScriptedModelDescription;
  let ids: (piece: string) => number;
  const ws = words();

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'llamux-shift-'));
    d = await writeScriptedModel(join(dir, 'shift.gguf'), {
      name: 'shift',
      scripts: [{ name: 'main', prompt: ['▁flag', '▁go'], continuation: [...ws, '▁trig', '▁yes'] }],
      flags: [{ flag: '▁flag', trigger: '▁trig', without: '▁no', with: '▁yes' }],
    });
    model = await loadModel(d.path);
    ids = (piece) => {
      const id = d.tokens[piece];
      if (id === undefined) throw new Error(`no piece ${piece}`);
      return id;
    };
  });
  afterAll(async () => {
    await model?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  const prompt = (): number[] => [...d.scripts.main!.promptTokens];
  /** The continuation when the flag is gone by the time `▁trig` comes (or kept). */
  const expected = (flagKept: boolean): number[] => [...ws.map((w) => ids(w)), ids('▁trig'), ids(flagKept ? '▁yes' : '▁no')];

  async function withContext<T>(fn: (ctx: Context, nCtx: number) => Promise<T>, options: Record<string, unknown> = {}): Promise<T> {
    const ctx = await model.createContext({ contextSize: 256, sequences: 1, ...ONE_THREAD, ...options });
    try {
      return await fn(ctx, ctx.settings.sequenceContextSize);
    } finally {
      await ctx.dispose();
    }
  }

  it('the window is smaller than the continuation (the premise of every case below)', async () => {
    await withContext(async (_ctx, nCtx) => {
      expect(nCtx).toBeLessThan(prompt().length + WORDS);
      expect(d.scripts.main!.promptTokens[0]).toBe(d.bos);
    });
  });

  it('"stop" (default): generation ends with length at the end of the sequence', async () => {
    await withContext(async (ctx, nCtx) => {
      const r = await ctx.complete({ prompt: Int32Array.from(prompt()), temperature: 0, emitTokenIds: true });
      expect(r.finishReason).toBe('length');
      expect(r.generatedTokens).toBe(nCtx - prompt().length);
      expect([...r.tokens!]).toEqual(expected(true).slice(0, nCtx - prompt().length));
      expect(r.shiftedTokens).toBe(0);
    });
  });

  it('"shift": generation goes on past the window; the dropped flag is gone from the KV', async () => {
    await withContext(async (ctx, nCtx) => {
      const r = await ctx.complete({ prompt: Int32Array.from(prompt()), temperature: 0, emitTokenIds: true, overflow: 'shift' });
      expect(r.finishReason).toBe('eog');
      expect([...r.tokens!]).toEqual(expected(false));
      expect(r.shiftedTokens).toBe(simulate(prompt(), expected(false), nCtx, 1).shifted);
    });
  });

  it('"shift" with nKeep: the kept tokens stay in the KV (the flag is seen at the end)', async () => {
    await withContext(async (ctx, nCtx) => {
      const r = await ctx.complete({ prompt: Int32Array.from(prompt()), temperature: 0, emitTokenIds: true, overflow: 'shift', nKeep: 2 });
      expect(r.finishReason).toBe('eog');
      expect([...r.tokens!]).toEqual(expected(true));
      expect(r.shiftedTokens).toBe(simulate(prompt(), expected(true), nCtx, 3).shifted);
    });
  });

  it('"reprefill": the same window, recomputed; the same output and count', async () => {
    await withContext(async (ctx, nCtx) => {
      const r = await ctx.complete({ prompt: Int32Array.from(prompt()), temperature: 0, emitTokenIds: true, overflow: 'reprefill' });
      expect([...r.tokens!]).toEqual(expected(false));
      expect(r.shiftedTokens).toBe(simulate(prompt(), expected(false), nCtx, 1).shifted);
      const kept = await ctx.complete({ prompt: Int32Array.from(prompt()), temperature: 0, emitTokenIds: true, overflow: 'reprefill', nKeep: -1 });
      expect([...kept.tokens!]).toEqual(expected(true));
    });
  });

  it('a prompt longer than the window is cut the same way before it is prefilled ("stop": CONTEXT_OVERFLOW)', async () => {
    await withContext(async (ctx, nCtx) => {
      const long = [...prompt(), ...ws.slice(0, 300).map((w) => ids(w))];
      expect(long.length).toBeGreaterThan(nCtx);
      await expect(ctx.complete({ prompt: Int32Array.from(long), temperature: 0 })).rejects.toMatchObject({ code: 'CONTEXT_OVERFLOW' });
      const r = await ctx.complete({ prompt: Int32Array.from(long), temperature: 0, emitTokenIds: true, overflow: 'shift' });
      const rest = [...ws.slice(300).map((w) => ids(w)), ids('▁trig'), ids('▁no')];
      expect([...r.tokens!]).toEqual(rest);
      const sim = simulate(long, rest, nCtx, 1);
      expect(r.shiftedTokens).toBe(sim.shifted);
      expect(r.promptTokens).toBe(1 + Math.max(1, Math.floor((nCtx - 1) / 2)));
    });
  });

  it('no cache serves a shifted sequence as the prefix of its tokens (live sequence, RAM tier)', async () => {
    await withContext(async (ctx, nCtx) => {
      const r = await ctx.complete({ prompt: Int32Array.from(prompt()), temperature: 0, emitTokenIds: true, overflow: 'shift' });
      const { window } = simulate(prompt(), [...r.tokens!], nCtx, 1);
      // The sequence now holds exactly `window`; asked for as a prompt, all of it but what was
      // never shifted (BOS) is recomputed
      const again = await ctx.complete({ prompt: Int32Array.from(window), temperature: 0, maxTokens: 1 });
      expect(again.reusedTokens).toBeLessThanOrEqual(1);
      expect(ctx.cacheStats().ramEntries).toBe(0);
      // ... and once recomputed (exact) it is a hit as usual
      const third = await ctx.complete({ prompt: Int32Array.from(window), temperature: 0, maxTokens: 1 });
      expect(third.reusedTokens).toBe(window.length - 1);
    }, { cacheRamMb: 64 });
  });

  it('no shifted state reaches the disk tier (a later context finds none)', async () => {
    const cacheDir = join(dir, 'tiers');
    let window: number[] = [];
    await withContext(async (ctx, nCtx) => {
      const r = await ctx.complete({ prompt: Int32Array.from(prompt()), temperature: 0, emitTokenIds: true, overflow: 'shift' });
      window = simulate(prompt(), [...r.tokens!], nCtx, 1).window;
    }, { cacheDir, cacheRamMb: 64 });
    await withContext(async (ctx) => {
      const again = await ctx.complete({ prompt: Int32Array.from(window), temperature: 0, maxTokens: 1 });
      expect(again.reusedTokens).toBe(0);
      expect(again.cache.outcome).toBe('cold');
    }, { cacheDir, cacheRamMb: 64 });
  });

  it('a session continues on its own shifted KV; nobody else reuses it', async () => {
    await withContext(async (ctx, nCtx) => {
      const all = expected(false);
      // a length whose committed tokens (the window after the fed ones, then the last, unfed
      // token) fit the sequence, after at least one shift
      let m = nCtx + 2;
      const fed = (k: number): number[] => simulate(prompt(), all.slice(0, k - 1), nCtx, 1).window;
      while (fed(m).length + 1 >= nCtx) m++;
      const s = ctx.createSession();
      const first = await s.generate({ prompt: Int32Array.from(prompt()), temperature: 0, emitTokenIds: true, overflow: 'shift', maxTokens: m }).result;
      expect(first.finishReason).toBe('length');
      expect([...first.tokens!]).toEqual(all.slice(0, m));
      expect(first.shiftedTokens).toBeGreaterThan(0);
      const window = fed(m);
      const next = await s.continue(Int32Array.from([]), { temperature: 0, emitTokenIds: true, overflow: 'shift', maxTokens: 3 }).result;
      expect(next.reusedTokens).toBe(window.length);
      expect([...next.tokens!]).toEqual(all.slice(m, m + 3));
      const other = await ctx.complete({ prompt: Int32Array.from(window), temperature: 0, maxTokens: 1 });
      expect(other.reusedTokens).toBeLessThanOrEqual(1);
    }, { sequences: 2 });
  });

  it('the server: --context-shift goes on past the window (n_keep as llama-server counts it); without it, length', async () => {
    const post = async (url: string, body: unknown) => {
      const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return { status: r.status, body: (await r.json()) as { choices: Array<{ text: string; finish_reason: string }> } };
    };
    const text = (flagKept: boolean) => piecesText([...ws, '▁trig', flagKept ? '▁yes' : '▁no']);
    const shifting = await createServer({ model, port: 0, ctx: 256, parallel: 1, threads: 1, contextShift: true });
    try {
      const dropped = await post(shifting.url, { model: 'm', prompt: prompt(), temperature: 0 });
      expect(dropped.status).toBe(200);
      expect(dropped.body.choices[0]!.finish_reason).toBe('stop');
      expect(dropped.body.choices[0]!.text).toBe(text(false));
      const kept = await post(shifting.url, { model: 'm', prompt: prompt(), temperature: 0, n_keep: 2 });
      expect(kept.body.choices[0]!.text).toBe(text(true));
    } finally {
      await shifting.close();
    }
    const plain = await createServer({ model, port: 0, ctx: 256, parallel: 1, threads: 1 });
    try {
      const r = await post(plain.url, { model: 'm', prompt: prompt(), temperature: 0 });
      expect(r.body.choices[0]!.finish_reason).toBe('length');
    } finally {
      await plain.close();
    }
  });

  it('bad options are refused with INVALID_ARGUMENT', async () => {
    await withContext(async (ctx) => {
      expect(() => ctx.generate({ prompt: 'x', overflow: 'wrap' as never })).toThrow(LlamuxError);
      expect(() => ctx.generate({ prompt: 'x', nKeep: -2 })).toThrow(/nKeep/);
    });
  });
});

describe('context shift on a hybrid model (zoo qwen35): the memory cannot move KV, the window is recomputed', () => {
  it('"shift" falls back to a re-prefill: the same tokens as "reprefill", past the window', async () => {
    const d = (await zooModels(['qwen35']))['qwen35'];
    const model = await loadModel(d.path);
    try {
      const ctx = await model.createContext({ contextSize: 256, sequences: 1, toolCallMarkers: false, ...ONE_THREAD });
      try {
        const noEog = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
        const prompt = model.tokenize('one two three four five six seven eight nine ten');
        const run = (overflow: 'shift' | 'reprefill') =>
          ctx.complete({ prompt, temperature: 0, maxTokens: 300, logitBias: noEog, emitTokenIds: true, overflow, nKeep: 4 });
        const a = await run('shift');
        const b = await run('reprefill');
        expect(a.finishReason).toBe('length');
        expect(a.generatedTokens).toBe(300);
        expect(a.shiftedTokens).toBeGreaterThan(0);
        expect(a.shiftedTokens).toBe(b.shiftedTokens);
        expect([...a.tokens!]).toEqual([...b.tokens!]);
      } finally {
        await ctx.dispose();
      }
    } finally {
      await model.dispose();
    }
  });
});
