// Issue 27 [speculative], MTP heads: decode tok/s of llamux drafting with the model's own
// multi-token-prediction block (speculative mode 'mtp') against llamux without speculation, the
// raw C++ loop and llama-server's draft-mtp on the same file, at one sequence.
//
// The model is a glm4moe of the zoo's construction (src/gguf/zoo/glm4moe.ts: random blocks, a
// greedy chain known in advance) at a size where decode is bound by the trunk, as on a real
// model: n_embd 1024, 16 dense layers (n_ff 4096) and one MTP block with 4 experts, Q8_0 blocks,
// Llama 2's 32k vocabulary (a real GLM's head is ~5 % of a decode step; with this trunk the
// block and the head are ~15 %). Agreement is set with the block's own token embedding
// (mtpAgreement): after a share 1 - A of the tokens its draft is wrong. node-llama-cpp 3.21.1
// has no MTP drafting, so it has no row here.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/native/binding.js';
import { glm4moeFamilyWith, writeZooModel, zooGreedyChain, type ZooModelDescription } from '../../src/gguf/index.js';
import { loadModel, type Context, type Model } from '../../src/index.js';
import { llamaServerBinary, llamaServerGreedyRun } from '../drivers/llama-server.js';
import { runRaw } from '../drivers/raw.js';
import { benchDir } from '../models.js';
import { progress, progressDone, table, type Row } from '../report.js';
import { fmtSpread, pairedRatio, ratio, repeat, type Spread } from '../stats.js';

const DIMS = { nEmbd: 1024, nTrunk: 16, nDense: 16, nHead: 8, nKv: 2, head: 128, nFf: 4096, nExpert: 4, nFfExp: 512 } as const;
const FAMILY = glm4moeFamilyWith(DIMS, { file: 'ggml-vocab-llama-spm.gguf' }, "Llama 2's 32k vocabulary: a bench model whose trunk, not its head, sets the decode cost");

async function modelAt(agreement: number): Promise<ZooModelDescription> {
  mkdirSync(benchDir, { recursive: true });
  const path = join(benchDir, `mtp-glm4moe-16x1024-a${Math.round(agreement * 100)}.gguf`);
  const json = `${path}.json`;
  if (existsSync(path) && existsSync(json)) return JSON.parse(readFileSync(json, 'utf8')) as ZooModelDescription;
  const d = await writeZooModel(FAMILY, path, { vocabDir: join(packageRoot, '.cache', 'llama.cpp-models'), blockType: 'Q8_0', mtpAgreement: agreement });
  writeFileSync(json, JSON.stringify(d));
  return d;
}

interface Measured {
  decode: number;
  drafted: number;
  accepted: number;
  exact: boolean;
}

async function measure(ctx: Context, prompt: number[], expect: number[]): Promise<Measured> {
  const r = await ctx.complete({ prompt, temperature: 0, emitTokenIds: true, maxTokens: expect.length });
  const tokens = Array.from(r.tokens ?? []);
  return {
    decode: r.timings.decodeTokensPerSec,
    drafted: r.timings.draftedTokens,
    accepted: r.timings.acceptedTokens,
    exact: tokens.length === expect.length && tokens.every((t, i) => t === expect[i]),
  };
}

/** The MTP table of `--suite speculative` (printed), and its figures for the result file. */
export async function runMtpBench(threads: number, runs: number, levels: readonly number[]): Promise<Record<string, unknown>> {
  const rows: Row[] = [];
  const json: Record<string, unknown> = {};
  const gen = 100;
  const ls = process.env.LLAMUX_BENCH_LLAMA_SERVER === '0' ? { path: undefined } : llamaServerBinary();
  for (const a of levels) {
    progress(`speculative: MTP, building the glm4moe bench model at ${Math.round(a * 100)} %`);
    const d = await modelAt(a);
    const model: Model = await loadModel(d.path, { mtp: true });
    const prompt = Array.from(model.tokenize(' the river runs past the old stone mill and into the forest where the garden waits', { addSpecial: true }));
    const expect = zooGreedyChain(d.successors, prompt.at(-1)!, gen);
    const name = `MTP block at ${Math.round(a * 100)} %`;
    const base = { contextSize: 1024, sequences: 1, threads, batchThreads: threads, toolCallMarkers: false } as const;
    const plainCtx = await model.createContext(base);
    const specCtx = await model.createContext({ ...base, speculative: { mode: 'mtp' } });
    try {
      progress(`speculative: 1 seq, ${name}`);
      await measure(specCtx, prompt, expect);
      await measure(plainCtx, prompt, expect);
      const r = await repeat(runs, async () => {
        const raw = runRaw(d.path, prompt.length, gen, threads, 1, 'plain').decodeTokensPerSec;
        const plain = await measure(plainCtx, prompt, expect);
        const spec = await measure(specCtx, prompt, expect);
        return { raw, plain: plain.decode, spec: spec.decode, acceptance: spec.drafted > 0 ? spec.accepted / spec.drafted : 0, drafted: spec.drafted, exact: plain.exact && spec.exact ? 1 : 0 };
      });
      const row = (system: string, sp: Spread, acc?: Spread, paired = true, exact = r.exact.min === 1): Row => ({
        workload: name,
        system,
        'decode tok/s': fmtSpread(sp),
        'vs raw': (paired ? pairedRatio : ratio)(sp, r.raw),
        'vs llamux plain': (paired ? pairedRatio : ratio)(sp, r.plain),
        'accepted/drafted': acc ? acc.median.toFixed(2) : '',
        exact: exact ? 'yes' : 'NO',
      });
      rows.push(row('raw C++ loop', r.raw), row('llamux, no speculation', r.plain), row('llamux, MTP block', r.spec, r.acceptance));
      json[name] = r;
      if (ls.path) {
        progress(`speculative: llama-server, ${name}`);
        const lsRuns = await repeat(runs, async () => {
          const plain = await llamaServerGreedyRun(ls.path!, d.path, prompt, expect, threads, []);
          const spec = await llamaServerGreedyRun(ls.path!, d.path, prompt, expect, threads, ['--spec-type', 'draft-mtp']);
          return { plain: plain.decode, spec: spec.decode, acceptance: spec.drafted > 0 ? spec.accepted / spec.drafted : 0, exact: plain.exact && spec.exact ? 1 : 0 };
        });
        const ex = lsRuns.exact.min === 1;
        rows.push(row('llama-server, no speculation', lsRuns.plain, undefined, false, ex), row('llama-server, MTP (draft-mtp)', lsRuns.spec, lsRuns.acceptance, false, ex));
        json[`${name}:llama-server`] = lsRuns;
      }
    } finally {
      await specCtx.dispose();
      await plainCtx.dispose();
      await model.dispose();
    }
  }
  progressDone();
  console.log(
    table(
      `speculative decoding with the model's MTP block, 1 sequence (100 tokens), glm4moe ${DIMS.nTrunk} × ${DIMS.nEmbd} + 1 MTP block, Q8_0, ${threads} threads; median of ${runs} (min–max)`,
      rows,
    ),
  );
  return json;
}
