// Issue 27 [speculative]: decode tok/s of llamux with n-gram speculation against llamux
// without it and the raw C++ loop (bench/native/raw_decode.cc, same libraries, same model),
// at 1 and 8 sequences.
//
// The target is a scripted model (src/gguf/scripted.ts: its greedy output is a known token
// script) with the per-token cost of a ~170 M-parameter model: one block of n_embd 2048 and a
// 24,576-wide feed-forward, Q8_0, 180 MB (llama.cpp's cost does not depend on weight values;
// a target that fits in the CPU caches is compute-bound already at one token, where no
// speculation can win: a 40 M target measured 0.4-0.6x). Known
// output makes agreement controllable and exactness checkable on every run:
//   - draft model at A %: the same script in a small model (n_embd sized to the script, feed-forward 64, F16,
//     the same vocabulary) whose output-head rows are rotated among a share 1 - A of the
//     script's positions, so it predicts wrongly exactly there; the prompt is the plain one;
//   - copy at A %: the prompt holds the script's 200 tokens with each token replaced by another
//     script token with probability 1 - A (0 %: every drafted n-gram continues wrongly, the
//     adversarial case: drafts exist and all are rejected);
//   - agent: a 120-token "file" in the prompt, and a tool call whose arguments copy 60 tokens of
//     it (between 25 tokens of call syntax and new text).
// Every llamux run is checked against the script (the `exact` column).
import { join } from 'node:path';
import { buildScriptedModel, encodeGguf, sp, SPACE, writeBytesAtomic, type ScriptedModelSpec } from '../../src/gguf/index.js';
import { Prng } from '../../src/gguf/prng.js';
import { loadModel, setLogger, type Context, type ContextOptions, type Model } from '../../src/index.js';
import { runRaw } from '../drivers/raw.js';
import { llamaServerBinary, llamaServerGreedyRun } from '../drivers/llama-server.js';
import { nlcSpeculative } from '../drivers/node-llama-cpp.js';
import { runMtpBench } from './speculative-mtp.js';
import { benchDir } from '../models.js';
import { progress, progressDone, table, writeResult, type Row } from '../report.js';
import { fmtSpread, pairedRatio, ratio, repeat, spread, type Spread } from '../stats.js';
import { existsSync, mkdirSync } from 'node:fs';

export interface SpeculativeBenchOptions {
  quick?: boolean;
  threads?: number;
  runs?: number;
}

const CONSONANTS = 'bdfgklmnprstvz';
const VOWELS = 'aeiou';

function words(n: number, rng: Prng, used: Set<string>): string[] {
  const out: string[] = [];
  while (out.length < n) {
    let w = SPACE;
    const syl = 2 + (rng.nextU32() % 2);
    for (let i = 0; i < syl; i++) w += CONSONANTS[rng.nextU32() % CONSONANTS.length]! + VOWELS[rng.nextU32() % VOWELS.length]!;
    if (used.has(w)) continue;
    used.add(w);
    out.push(w);
  }
  return out;
}

interface Workloads {
  spec: ScriptedModelSpec;
  copy: string[];
  file: string[];
  copied: [number, number];
}

function workloads(): Workloads {
  const rng = new Prng(0x5bec);
  const used = new Set<string>();
  const copy = words(200, rng, used);
  const file = words(120, rng, used);
  const fresh = words(20, rng, used);
  const copied: [number, number] = [30, 90];
  const header = sp(' Calling| edit| with| path| main.txt| old:');
  const middle = sp(' new:');
  const tail = sp(' end| of| call.');
  const spec: ScriptedModelSpec = {
    name: 'spec-bench',
    scripts: [
      { name: 'copy', prompt: sp('Repeat| this| text:'), continuation: copy },
      { name: 'agent', prompt: sp('Edit| the| file| please:'), continuation: [...header, ...file.slice(...copied), ...middle, ...fresh, ...tail] },
    ],
    extraWords: file,
    nEmbd: 2048,
    nFf: 24576,
    weightType: 'Q8_0',
  };
  return { spec, copy, file, copied };
}

interface Prepared {
  path: string;
  spec: ScriptedModelSpec;
  /** token id of each piece */
  id: (piece: string) => number;
  copyPrompt: number[];
  copyGreedy: number[];
  agentPrompt: number[];
  agentGreedy: number[];
  file: number[];
}

export async function prepare(): Promise<Prepared> {
  const w = workloads();
  const built = buildScriptedModel(w.spec);
  mkdirSync(benchDir, { recursive: true });
  const path = join(benchDir, 'spec-scripted-170m-q8_0.gguf');
  if (!existsSync(path)) await writeBytesAtomic(path, encodeGguf(built.gguf));
  const d = built.description;
  const id = (p: string): number => {
    const t = d.tokens[p];
    if (t === undefined) throw new Error(`no piece ${p}`);
    return t;
  };
  return {
    path,
    spec: w.spec,
    id,
    copyPrompt: [...d.scripts.copy!.promptTokens],
    copyGreedy: [...d.scripts.copy!.greedy],
    agentPrompt: [...d.scripts.agent!.promptTokens],
    agentGreedy: [...d.scripts.agent!.greedy],
    file: w.file.map(id),
  };
}

/** The copy workload's prompt at `agreement` (0..1): the script, each token replaced with probability 1 - agreement. */
export function copyPrompt(p: Prepared, agreement: number): number[] {
  const g = p.copyGreedy;
  const rng = new Prng(0xa9 + Math.round(agreement * 100));
  let body: number[];
  if (agreement === 0) {
    // every bigram of the script is followed by a wrong token: drafts always exist, none is right
    body = [];
    for (let i = 0; i + 1 < g.length; i++) body.push(g[i]!, g[i + 1]!, g[(i + 50) % g.length]!);
  } else {
    body = g.map((t, i) => (rng.nextU32() % 1000 < agreement * 1000 ? t : g[(i + 50) % g.length]!));
  }
  return [...p.copyPrompt, ...body, ...p.copyPrompt.slice(1)];
}

/** The draft model at `agreement`: its output-head rows rotated among the successors of a share 1 - agreement of the copy script's positions. */
export async function draftModelAt(p: Prepared, agreement: number): Promise<string> {
  const path = join(benchDir, `spec-draft-${Math.round(agreement * 100)}.gguf`);
  if (existsSync(path)) return path;
  const { nEmbd: _big, ...small } = p.spec;
  const built = buildScriptedModel({ ...small, nFf: 64, weightType: 'F16' });
  const g = p.copyGreedy;
  const rng = new Prng(0xd4 + Math.round(agreement * 100));
  const chosen = g.filter(() => rng.nextU32() % 1000 >= agreement * 1000);
  const tensors = built.gguf.tensors.map((t) => {
    if (t.name !== 'output.weight' || chosen.length < 2) return t;
    const D = t.shape[0] as number;
    const src = t.data as Float32Array;
    const data = Float32Array.from(src);
    chosen.forEach((tok, j) => data.set(src.subarray(chosen[(j + 1) % chosen.length]! * D, (chosen[(j + 1) % chosen.length]! + 1) * D), tok * D));
    return { ...t, data };
  });
  await writeBytesAtomic(path, encodeGguf({ ...built.gguf, tensors }));
  return path;
}

export function agentPrompt(p: Prepared): number[] {
  return [...p.agentPrompt.slice(0, 1), ...p.file, ...p.agentPrompt.slice(1)];
}

interface Measured {
  decode: number;
  accepted: number;
  drafted: number;
  exact: boolean;
}

/** `n` copies of the request at once; aggregate decode tok/s between the last first token and the end (engine clocks). */
async function measure(ctx: Context, prompt: number[], expect: number[], n: number, speculative: boolean): Promise<Measured> {
  const t0 = performance.now();
  const maxTokens = expect.length;
  const runs = await Promise.all(Array.from({ length: n }, () => ctx.complete({ prompt, temperature: 0, emitTokenIds: true, speculative, maxTokens })));
  const end = performance.now() - t0;
  const exact = runs.every((r) => r.tokens !== undefined && r.tokens.length === expect.length && r.tokens.every((t, i) => t === expect[i]));
  const firstTokenAt = Math.max(...runs.map((r) => r.timings.ttftMs));
  const tokens = runs.reduce((s, r) => s + r.generatedTokens - 1, 0);
  const decode = n === 1 ? runs[0]!.timings.decodeTokensPerSec : tokens / ((end - firstTokenAt) / 1000);
  return {
    decode,
    accepted: runs.reduce((s, r) => s + r.timings.acceptedTokens, 0),
    drafted: runs.reduce((s, r) => s + r.timings.draftedTokens, 0),
    exact,
  };
}

/**
 * llama-server (same llama.cpp source) on the same target and prompt, one slot: decode tok/s from
 * its own timings, drafted/accepted from them, and whether it gave the script. `spec`: its
 * `--spec-type ngram-simple`, or `-md <draft> --spec-type draft-simple`, or none.
 */
async function measureLlamaServer(bin: string, target: string, prompt: number[], expect: number[], threads: number, spec: 'none' | 'ngram' | { draft: string }): Promise<Measured> {
  const extraArgs = spec === 'none' ? [] : spec === 'ngram' ? ['--spec-type', 'ngram-simple'] : ['-md', spec.draft, '--spec-type', 'draft-simple', '-td', String(threads), '-tbd', String(threads)];
  return llamaServerGreedyRun(bin, target, prompt, expect, threads, extraArgs);
}

export async function runSpeculativeBench(opts: SpeculativeBenchOptions = {}): Promise<string> {
  const threads = opts.threads ?? 2;
  // LLAMUX_BENCH_SPEC_RUNS: runs per figure (this suite's figures vary most on a busy machine)
  const runs = opts.runs ?? (process.env.LLAMUX_BENCH_SPEC_RUNS ? Number(process.env.LLAMUX_BENCH_SPEC_RUNS) : opts.quick ? 1 : 3);
  setLogger('silent');
  progress('speculative: building the scripted target');
  const p = await prepare();
  const model: Model = await loadModel(p.path);
  const out: string[] = [];
  const json: Record<string, unknown> = { threads, runs, rows: {} };
  type Case = { name: string; prompt: number[]; expect: number[]; draft?: string; many: boolean };
  // LLAMUX_BENCH_SPEC_LEVELS=0,50,80,95 (default 0,80,95): agreement levels; 1 sequence decodes
  // the first 100 tokens of the script, 8 sequences 48 each (0 % n-gram, the agent, 80 % draft)
  const levels = (process.env.LLAMUX_BENCH_SPEC_LEVELS ?? '0,80,95').split(',').map((v) => Number(v) / 100);
  const gen = 100;
  const cases: Case[] = [
    ...levels.map((a) => ({ name: `n-gram, copy at ${Math.round(a * 100)} %`, prompt: copyPrompt(p, a), expect: p.copyGreedy.slice(0, gen), many: a === 0 })),
    { name: 'n-gram, agent: tool arguments copy the prompt', prompt: agentPrompt(p), expect: p.agentGreedy, many: true },
  ];
  for (const a of levels) {
    progress(`speculative: building the draft model at ${Math.round(a * 100)} %`);
    cases.push({ name: `draft model at ${Math.round(a * 100)} %`, prompt: p.copyPrompt, expect: p.copyGreedy.slice(0, gen), draft: await draftModelAt(p, a), many: a === 0.8 });
  }
  const drafts = new Map<string, Model>();
  // llama-server built from the same source (LLAMUX_BENCH_LLAMA_SERVER=0 leaves it out)
  const ls = process.env.LLAMUX_BENCH_LLAMA_SERVER === '0' ? { path: undefined, why: 'left out' } : llamaServerBinary();
  try {
    for (const nSeq of opts.quick ? [1] : [1, 8]) {
      const rows: Row[] = [];
      const mk = async (spec: false | { maxSequences: number; draft?: string }): Promise<Context> => {
        let speculative: ContextOptions['speculative'] = false;
        if (spec !== false && spec.draft !== undefined) {
          let d = drafts.get(spec.draft);
          if (!d) drafts.set(spec.draft, (d = await loadModel(spec.draft)));
          speculative = { mode: 'draft', model: d, maxSequences: spec.maxSequences };
        } else if (spec !== false) {
          speculative = { mode: 'ngram', maxSequences: spec.maxSequences };
        }
        return model.createContext({ contextSize: 1024 * nSeq, sequences: nSeq, threads, batchThreads: threads, toolCallMarkers: false, speculative });
      };
      const plainCtx = await mk(false);
      try {
        const here = nSeq === 1 ? cases : cases.filter((c) => c.many).map((c) => ({ ...c, expect: c.expect.slice(0, 48) }));
        for (const c of here) {
          progress(`speculative: ${nSeq} seq, ${c.name}`);
          // the default policy (no drafting above 4 decoding sequences) and, at 8, drafting anyway
          const specCtx = await mk({ maxSequences: 4, ...(c.draft ? { draft: c.draft } : {}) });
          const forcedCtx = nSeq > 4 ? await mk({ maxSequences: nSeq, ...(c.draft ? { draft: c.draft } : {}) }) : undefined;
          try {
            // warm-up: graphs of every batch shape
            await measure(specCtx, c.prompt, c.expect, nSeq, true);
            await measure(plainCtx, c.prompt, c.expect, nSeq, false);
            const r = await repeat(runs, async () => {
              const raw = runRaw(p.path, c.prompt.length, c.expect.length, threads, nSeq, 'plain').decodeTokensPerSec;
              const plain = await measure(plainCtx, c.prompt, c.expect, nSeq, false);
              const spec = await measure(specCtx, c.prompt, c.expect, nSeq, true);
              const forced = forcedCtx ? await measure(forcedCtx, c.prompt, c.expect, nSeq, true) : undefined;
              return {
                raw,
                plain: plain.decode,
                spec: spec.decode,
                forced: forced?.decode ?? NaN,
                acceptance: spec.drafted > 0 ? spec.accepted / spec.drafted : 0,
                forcedAcceptance: forced && forced.drafted > 0 ? forced.accepted / forced.drafted : 0,
                exact: plain.exact && spec.exact && (forced?.exact ?? true) ? 1 : 0,
              };
            });
            // llamux's systems took turns run by run: median of the run-by-run ratios; llama-server
            // ran after them: ratios of medians
            const row = (system: string, sp: Spread, acc?: Spread, paired = true): Row => ({
              workload: c.name,
              system,
              'decode tok/s': fmtSpread(sp),
              'vs raw': (paired ? pairedRatio : ratio)(sp, r.raw),
              'vs llamux plain': (paired ? pairedRatio : ratio)(sp, r.plain),
              'accepted/drafted': acc ? acc.median.toFixed(2) : '',
              exact: r.exact.min === 1 ? 'yes' : 'NO',
            });
            const label = c.draft ? 'llamux, draft model' : 'llamux, n-gram';
            rows.push(row('raw C++ loop', r.raw), row('llamux, no speculation', r.plain), row(label, r.spec, r.acceptance));
            // llama-server at 1 sequence: without speculation and with the same kind of drafts
            if (nSeq === 1 && ls.path) {
              progress(`speculative: llama-server, ${c.name}`);
              const lsRuns = await repeat(runs, async () => {
                const plain = await measureLlamaServer(ls.path!, p.path, c.prompt, c.expect, threads, 'none');
                const spec = await measureLlamaServer(ls.path!, p.path, c.prompt, c.expect, threads, c.draft ? { draft: c.draft } : 'ngram');
                return { plain: plain.decode, spec: spec.decode, acceptance: spec.drafted > 0 ? spec.accepted / spec.drafted : 0, exact: plain.exact && spec.exact ? 1 : 0 };
              });
              const lsRow = (system: string, sp: Spread, acc?: Spread): Row => ({ ...row(system, sp, acc, false), exact: lsRuns.exact.min === 1 ? 'yes' : 'NO' });
              rows.push(lsRow('llama-server, no speculation', lsRuns.plain), lsRow(c.draft ? 'llama-server, draft model (draft-simple)' : 'llama-server, n-gram (ngram-simple)', lsRuns.spec, lsRuns.acceptance));
              (json.rows as Record<string, unknown>)[`${nSeq}:${c.name}:llama-server`] = lsRuns;
            }
            // node-llama-cpp 3.21.1 at 1 sequence: its token predictors with their defaults
            // (LLAMUX_BENCH_NODE_LLAMA_CPP=0 leaves it out)
            if (nSeq === 1 && process.env.LLAMUX_BENCH_NODE_LLAMA_CPP !== '0') {
              progress(`speculative: node-llama-cpp, ${c.name}`);
              const nl = await nlcSpeculative(p.path, c.draft, c.prompt, c.expect, threads, runs);
              const plainN = spread(nl.map((x) => x.plain));
              const specN = spread(nl.map((x) => x.spec));
              const exactN = nl.every((x) => x.exact === 1) ? 'yes' : 'NO';
              rows.push({ ...row('node-llama-cpp, no speculation', plainN, undefined, false), exact: exactN });
              rows.push({ ...row(c.draft ? 'node-llama-cpp, DraftSequenceTokenPredictor' : 'node-llama-cpp, InputLookupTokenPredictor', specN, spread(nl.map((x) => x.acceptance)), false), exact: exactN });
              (json.rows as Record<string, unknown>)[`${nSeq}:${c.name}:node-llama-cpp`] = nl;
            }
            if (forcedCtx) rows.push(row(`${label}, drafting at 8 seqs`, r.forced, r.forcedAcceptance));
            (json.rows as Record<string, unknown>)[`${nSeq}:${c.name}`] = r;
          } finally {
            await specCtx.dispose();
            await forcedCtx?.dispose();
          }
        }
      } finally {
        await plainCtx.dispose();
      }
      const t = table(
        `speculative decoding, ${nSeq} sequence${nSeq > 1 ? 's' : ''} (${nSeq > 1 ? 'aggregate, 48 tokens each' : 'one request, 100 tokens (the agent: its whole call)'}), scripted target ~170 M params Q8_0, ${threads} threads; median of ${runs} (min–max)`,
        rows,
      );
      progressDone();
      console.log(t);  // each table as soon as it is measured (a long suite on a busy machine)
    }
  } finally {
    for (const d of drafts.values()) await d.dispose();
    await model.dispose();
  }
  // the model's own MTP block (LLAMUX_BENCH_SPEC_MTP=0 leaves it out)
  if (process.env.LLAMUX_BENCH_SPEC_MTP !== '0') json.mtp = await runMtpBench(threads, runs, opts.quick ? [0.95] : levels);
  progressDone();
  out.push(`results: ${writeResult('speculative', json)}`);
  return out.join('\n');
}
