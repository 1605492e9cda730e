// KV reuse: time to first token for a long prefix served cold, from a live sequence, from the
// RAM tier and from the disk tier; a 10-turn conversation with and without sessions; and
// 8 sequences sharing one prefix in a context too small for 8 copies.
import { rmSync } from 'node:fs';
import { loadModel, setLogger, type Model } from '../../src/index.js';
import { tempDirFor } from '../util.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';
import { fmtSpread, spread } from '../stats.js';

async function ttft(model: Model, prefix: number[], opts: Record<string, unknown>, prepare?: (ctx: import('../../src/index.js').Context) => Promise<void>) {
  const ctx = await model.createContext({ contextSize: prefix.length + 256, ...opts });
  if (prepare) await prepare(ctx);
  const r = await ctx.complete({ prompt: [...prefix, 7, 8, 9], maxTokens: 1, temperature: 0 });
  await ctx.dispose();
  return r;
}

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
  // a shared machine lands on all of them.
  const runs = opts.quick ? 1 : 3;
  const dir = tempDirFor('bench-disk');
  type Result = Awaited<ReturnType<typeof ttft>>;
  const tiers: Record<'cold' | 'live' | 'ram' | 'disk', Result[]> = { cold: [], live: [], ram: [], disk: [] };
  for (let r = 0; r < runs; r++) {
    progress(`cache: cold (${r + 1}/${runs})`);
    tiers.cold.push(await ttft(model, prefix, base));
    progress(`cache: live hit (${r + 1}/${runs})`);
    tiers.live.push(await ttft(model, prefix, base, async (ctx) => { await ctx.prefillOnly(prefix); }));
    progress(`cache: RAM restore (${r + 1}/${runs})`);
    tiers.ram.push(await ttft(model, prefix, { ...base, sequences: 1 }, async (ctx) => {
      await ctx.prefillOnly(prefix);
      await ctx.complete({ prompt: benchPrompt(40, model.vocab.size, 77), maxTokens: 1 }); // evicts the live copy
    }));
    progress(`cache: disk restore (${r + 1}/${runs})`);
    rmSync(dir, { recursive: true, force: true });
    {
      const ctx = await model.createContext({ contextSize: nPrefix + 256, ...base, cacheDir: dir, cacheRamMb: 0 });
      await ctx.prefillOnly(prefix);
      await ctx.dispose();
    }
    tiers.disk.push(await ttft(model, prefix, { ...base, cacheDir: dir }));
  }
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
    };
  });
  out.push(table(`TTFT for a ${nPrefix}-token prefix + 3 new tokens (${bm.description}, ${threads} threads); median of ${runs} (min–max)`, rows));
  json.tiers = tiers;

  // 2) a 10-turn conversation: each turn adds ~60 tokens and generates 16
  const turns = opts.quick ? 4 : 10;
  const convRows: Row[] = [];
  const runConversation = async (sessions: boolean, reuse: boolean) => {
    const ctx = await model.createContext({ contextSize: 8192, ...base, sequences: 2, prefixCache: reuse });
    let history = benchPrompt(opts.quick ? 200 : 600, model.vocab.size, 11);
    const res = [];
    const conv = sessions ? ctx.createSession({ id: 'conv' }) : ctx;
    for (let t = 0; t < turns; t++) {
      history = [...history, ...benchPrompt(60, model.vocab.size, 100 + t)];
      const r = await conv.generate({ prompt: history, maxTokens: 16, temperature: 0, emitTokenIds: true }).result;
      history = [...history, ...Array.from(r.tokens!)];
      res.push(r);
    }
    await ctx.dispose();
    return res;
  };
  progress('cache: conversation with sessions');
  const withS = await runConversation(true, true);
  progress('cache: conversation without reuse');
  const without = await runConversation(false, false);
  for (let t = 0; t < turns; t++) {
    convRows.push({
      turn: t + 1,
      'prompt tokens': withS[t]!.promptTokens,
      'sessions: prefilled': withS[t]!.prefilledTokens,
      'sessions: TTFT ms': fmt(withS[t]!.timings.ttftMs),
      'no reuse: prefilled': without[t]!.prefilledTokens,
      'no reuse: TTFT ms': fmt(without[t]!.timings.ttftMs),
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
