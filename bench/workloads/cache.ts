// KV reuse: time to first token for a long prefix served cold, from a live sequence, from the
// RAM tier and from the disk tier; a 10-turn conversation with and without sessions; and
// 8 sequences sharing one prefix in a context too small for 8 copies.
import { rmSync } from 'node:fs';
import { loadModel, setLogger, type GenerateResult, type Model } from '../../src/index.js';
import { tempDirFor } from '../util.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';
import { fmtSpread, spread } from '../stats.js';

/** Tokens generated after the prefix, and their log-probabilities (from the raw logits), to compare paths. */
const GEN = 8;

async function ttft(model: Model, prefix: number[], opts: Record<string, unknown>, prepare?: (ctx: import('../../src/index.js').Context) => Promise<void>) {
  const ctx = await model.createContext({ contextSize: prefix.length + 256, ...opts });
  if (prepare) await prepare(ctx);
  const r = await ctx.complete({ prompt: [...prefix, 7, 8, 9], maxTokens: GEN, temperature: 0, logprobs: 5, logitBias: banEog(model) });
  await ctx.dispose();
  return r;
}

const banEog = (model: Model) => Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));

/** The same tokens and the same log-probabilities, bit for bit, as `cold`. */
const sameAsCold = (r: GenerateResult, cold: GenerateResult) => JSON.stringify(r.logprobs) === JSON.stringify(cold.logprobs) && r.text === cold.text;

export async function runCacheBench(opts: { quick?: boolean; threads?: number } = {}): Promise<string> {
  setLogger('silent');
  const threads = opts.threads ?? 2;
  const name: BenchModelName = opts.quick ? 'tiny-random' : '250m-q8_0';
  const bm = await ensureBenchModel(name);
  const model = await loadModel(bm.path);
  const nPrefix = opts.quick ? 300 : 2000;
  const prefix = benchPrompt(nPrefix, model.vocab.size, 5);
  const base = { threads, batchThreads: threads };
  const out: string[] = [];
  const json: Record<string, unknown> = { model: bm.description, prefixTokens: nPrefix };

  // 1) TTFT for one prefix from each tier; the tiers take turns run by run, so a slow moment of
  // a shared machine lands on all of them. Each run also generates GEN tokens, compared with the
  // cold run's (tokens and log-probabilities): in default mode a cache path may change them (the
  // reduction order follows the batch shape), with `deterministic: true` it must not (issue 26).
  const runs = opts.quick ? 1 : 3;
  const dir = tempDirFor('bench-disk');
  type Result = Awaited<ReturnType<typeof ttft>>;
  type Tiers = Record<'cold' | 'live' | 'ram' | 'disk', Result[]>;
  const runTiers = async (n: number, deterministic: boolean): Promise<Tiers> => {
    const t: Tiers = { cold: [], live: [], ram: [], disk: [] };
    const o = { ...base, deterministic };
    const tag = deterministic ? ', deterministic' : '';
    for (let r = 0; r < n; r++) {
      progress(`cache: cold (${r + 1}/${n}${tag})`);
      t.cold.push(await ttft(model, prefix, o));
      progress(`cache: live hit (${r + 1}/${n}${tag})`);
      t.live.push(await ttft(model, prefix, o, async (ctx) => { await ctx.prefillOnly(prefix); }));
      progress(`cache: RAM restore (${r + 1}/${n}${tag})`);
      t.ram.push(await ttft(model, prefix, { ...o, sequences: 1 }, async (ctx) => {
        await ctx.prefillOnly(prefix);
        await ctx.complete({ prompt: benchPrompt(40, model.vocab.size, 77), maxTokens: 1 }); // evicts the live copy
      }));
      progress(`cache: disk restore (${r + 1}/${n}${tag})`);
      rmSync(dir, { recursive: true, force: true });
      {
        const ctx = await model.createContext({ contextSize: nPrefix + 256, ...o, cacheDir: dir, cacheRamMb: 0 });
        await ctx.prefillOnly(prefix);
        await ctx.dispose();
      }
      t.disk.push(await ttft(model, prefix, { ...o, cacheDir: dir }));
    }
    return t;
  };
  const tiers = await runTiers(runs, false);
  const detTiers = await runTiers(1, true);
  const identical = (t: Tiers, k: keyof Tiers) => {
    const same = t[k].filter((r, i) => sameAsCold(r, t.cold[i]!)).length;
    return same === t[k].length ? `yes (${same}/${t[k].length})` : `no (${same}/${t[k].length})`;
  };
  const coldTtft = spread(tiers.cold.map((r) => r.timings.ttftMs));
  const labels = { cold: 'cold prefill', live: 'live sequence', ram: 'RAM tier restore', disk: 'disk tier restore' };
  const rows: Row[] = (Object.keys(tiers) as Array<keyof typeof tiers>).map((k) => {
    const last = tiers[k].at(-1)!;
    const ttftMs = spread(tiers[k].map((r) => r.timings.ttftMs));
    return {
      served: labels[k],
      outcome: `${last.cache.outcome}${last.cache.tier ? ` (${last.cache.tier})` : ''}`,
      'prefilled tokens': [...new Set(tiers[k].map((r) => r.prefilledTokens))].join('/'),
      'TTFT ms': fmtSpread(ttftMs),
      'vs cold': `${(ttftMs.median / coldTtft.median).toFixed(3)}x`,
      'restore ms': fmtSpread(spread(tiers[k].map((r) => r.cache.restoreMs))),
      [`identical to cold (${GEN} tokens + logprobs)`]: identical(tiers, k),
      'deterministic: identical to cold': identical(detTiers, k),
      'deterministic TTFT ms': fmt(detTiers[k][0]!.timings.ttftMs),
    };
  });
  out.push(table(`TTFT for a ${nPrefix}-token prefix + 3 new tokens (${bm.description}, ${threads} threads); median of ${runs} (min–max); greedy output compared with the cold run's, default and \`deterministic: true\``, rows));
  json.tiers = tiers;
  json.deterministicTiers = detTiers;

  // 2) a 10-turn conversation: each turn adds ~60 tokens and generates 16
  const turns = opts.quick ? 4 : 10;
  const convRows: Row[] = [];
  // The run without reuse goes first; the session run appends that run's tokens to its history
  // (not its own), so both see the same prompts and each turn's output can be compared.
  const runConversation = async (sessions: boolean, reuse: boolean, script?: GenerateResult[]) => {
    const ctx = await model.createContext({ contextSize: 8192, ...base, sequences: 2, prefixCache: reuse });
    let history = benchPrompt(opts.quick ? 200 : 600, model.vocab.size, 11);
    const res: GenerateResult[] = [];
    const conv = sessions ? ctx.createSession({ id: 'conv' }) : ctx;
    for (let t = 0; t < turns; t++) {
      history = [...history, ...benchPrompt(60, model.vocab.size, 100 + t)];
      const r = await conv.generate({ prompt: history, maxTokens: 16, temperature: 0, emitTokenIds: true, logprobs: 5, logitBias: banEog(model) }).result;
      history = [...history, ...Array.from((script?.[t] ?? r).tokens!)];
      res.push(r);
    }
    await ctx.dispose();
    return res;
  };
  progress('cache: conversation without reuse');
  const without = await runConversation(false, false);
  progress('cache: conversation with sessions');
  const withS = await runConversation(true, true, without);
  for (let t = 0; t < turns; t++) {
    convRows.push({
      turn: t + 1,
      'prompt tokens': withS[t]!.promptTokens,
      'sessions: prefilled': withS[t]!.prefilledTokens,
      'sessions: TTFT ms': fmt(withS[t]!.timings.ttftMs),
      'no reuse: prefilled': without[t]!.prefilledTokens,
      'no reuse: TTFT ms': fmt(without[t]!.timings.ttftMs),
      'sessions: identical to no reuse': sameAsCold(withS[t]!, without[t]!) ? 'yes' : 'no',
    });
  }
  out.push(table(`${turns}-turn conversation (60 new tokens + 16 generated per turn)`, convRows));
  json.conversation = { withSessions: withS, withoutReuse: without };

  // 3) 8 sequences sharing one prefix in a context sized for the prefix once
  progress('cache: 8 sequences sharing a prefix');
  const tail = 32;
  const cells = nPrefix + 8 * (tail + 8) + 64;
  const ctx = await model.createContext({ contextSize: cells, ...base, sequences: 8, prefillChunk: 512 });
  await ctx.prefillOnly(prefix);
  const shared = await Promise.all(Array.from({ length: 8 }, (_, i) => ctx.complete({ prompt: [...prefix, ...benchPrompt(tail, model.vocab.size, 500 + i)], maxTokens: 8, temperature: 0 })));
  const cellsUsed = ctx.cacheStats().kvCellsUsed;
  await ctx.dispose();
  const copies = 8 * (nPrefix + tail + 8);
  out.push(table('8 sequences sharing a prefix (unified KV, seq_cp)', [{
    'context cells': ctx.settings.contextSize,
    'KV cells used': cellsUsed,
    'cells needed by 8 copies': copies,
    ratio: `${(ctx.settings.contextSize / copies).toFixed(3)}x`,
    'requests served from shared cells': shared.filter((r) => r.cache.tier === 'shared' || r.cache.outcome === 'exact' || r.cache.outcome === 'partial').length,
    'prefilled per request': shared.map((r) => r.prefilledTokens).join('/'),
  }]));
  json.shared = { cells: ctx.settings.contextSize, copies, results: shared };
  await model.dispose();
  progressDone();
  const file = writeResult('cache', json);
  out.push(`results: ${file}`);
  return out.join('\n');
}
