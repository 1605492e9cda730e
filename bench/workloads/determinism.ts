// Issue 26: what `deterministic: true` costs. Prefill and decode throughput of default and
// deterministic contexts at 1 and 8 sequences, on the same model, threads and prompts. The two
// modes take turns run by run (the machine's drift falls on both alike); medians of `reps`.
import { loadModel, setLogger, type GenerateResult, type Model } from '../../src/index.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { progress, progressDone, table, writeResult, type Row } from '../report.js';
import { fmtSpread, spread } from '../stats.js';

export interface DeterminismBenchOptions {
  quick?: boolean;
  threads?: number;
  model?: BenchModelName;
}

interface Rates {
  prefill: number;
  decode: number;
}

const banEog = (model: Model) => Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));

/** Prompt tokens over the longest time to first token: `rs` prefilled together, one token each. */
const prefillRate = (rs: GenerateResult[], promptTokens: number) => (rs.length * promptTokens) / (Math.max(...rs.map((r) => r.timings.ttftMs)) / 1000);
/** Tokens after each first one over the longest decode: `rs` decoded together after short prompts. */
const decodeRate = (rs: GenerateResult[]) => rs.reduce((a, r) => a + r.generatedTokens - 1, 0) / (Math.max(...rs.map((r) => r.timings.decodeMs)) / 1000);

export async function runDeterminismBench(opts: DeterminismBenchOptions = {}): Promise<string> {
  const threads = opts.threads ?? (opts.quick ? 1 : 2);
  const name: BenchModelName = opts.model ?? (opts.quick ? 'tiny-random' : '250m-q8_0');
  const promptTokens = opts.quick ? 64 : 256;
  const genTokens = opts.quick ? 16 : 48;
  const reps = opts.quick ? 1 : 5;
  const longTokens = opts.quick ? 256 : 2048;
  const longReps = opts.quick ? 1 : 3;
  progress(`determinism: preparing ${name}`);
  const bm = await ensureBenchModel(name);
  setLogger('silent');
  const model = await loadModel(bm.path);
  const bias = banEog(model);
  const out: string[] = [];
  const data: Record<string, unknown> = { mode: opts.quick ? 'quick' : 'full', model: { name, description: bm.description }, settings: { threads, promptTokens, genTokens, reps, longTokens, longReps } };
  const rows: Row[] = [];
  try {
    for (const seqs of [1, 8]) {
      const ctxs = await Promise.all(
        [false, true].map((deterministic) =>
          model.createContext({ threads, batchThreads: threads, contextSize: seqs * (promptTokens + genTokens + 32), sequences: seqs, prefixCache: false, cacheRamMb: 0, toolCallMarkers: false, deterministic }),
        ),
      );
      const runs: Record<'default' | 'deterministic', Rates[]> = { default: [], deterministic: [] };
      try {
        for (const ctx of ctxs) await ctx.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 2, temperature: 0, logitBias: bias });
        for (let i = 0; i < reps; i++) {
          for (const [k, ctx] of [['default', ctxs[0]!], ['deterministic', ctxs[1]!]] as const) {
            progress(`determinism: ${seqs} sequence${seqs > 1 ? 's' : ''}, ${k} (${i + 1}/${reps})`);
            // Prefill: long prompts, one token each. Decode: short prompts (their prefill is a
            // step or two), so every sequence decodes beside the others from the start.
            const pre = await Promise.all(
              Array.from({ length: seqs }, (_, s) => ctx.complete({ prompt: benchPrompt(promptTokens, model.vocab.size, 1000 * i + s), maxTokens: 1, temperature: 0, logitBias: bias })),
            );
            const dec = await Promise.all(
              Array.from({ length: seqs }, (_, s) => ctx.complete({ prompt: benchPrompt(16, model.vocab.size, 1000 * i + 100 + s), maxTokens: genTokens, temperature: 0, logitBias: bias })),
            );
            runs[k].push({ prefill: prefillRate(pre, promptTokens), decode: decodeRate(dec) });
          }
        }
      } finally {
        for (const c of ctxs) await c.dispose();
      }
      data[`seqs${seqs}`] = runs;
      rows.push(...ratioRows(String(seqs), runs, true));
    }
    // One sequence over a long prompt: attention's share grows with the context (no target; the
    // issue's targets are the rows above)
    {
      const ctxs = await Promise.all(
        [false, true].map((deterministic) =>
          model.createContext({ threads, batchThreads: threads, contextSize: longTokens + genTokens + 32, sequences: 1, prefixCache: false, cacheRamMb: 0, toolCallMarkers: false, deterministic }),
        ),
      );
      const runs: Record<'default' | 'deterministic', Rates[]> = { default: [], deterministic: [] };
      try {
        for (let i = 0; i < longReps; i++) {
          for (const [k, ctx] of [['default', ctxs[0]!], ['deterministic', ctxs[1]!]] as const) {
            progress(`determinism: 1 sequence, ${longTokens}-token prompt, ${k} (${i + 1}/${longReps})`);
            const r = await ctx.complete({ prompt: benchPrompt(longTokens, model.vocab.size, 5000 + i), maxTokens: genTokens, temperature: 0, logitBias: bias });
            runs[k].push({ prefill: prefillRate([r], longTokens), decode: decodeRate([r]) });
          }
        }
      } finally {
        for (const c of ctxs) await c.dispose();
      }
      data.long = runs;
      rows.push(...ratioRows(`1 (${longTokens}-token prompt)`, runs, false));
    }
  } finally {
    await model.dispose();
  }
  progressDone();
  out.push(
    table(
      `determinism: default vs deterministic contexts (${bm.description}, ${threads} thread${threads > 1 ? 's' : ''}; prefill: ${promptTokens}-token prompts per sequence at once, and one ${longTokens}-token prompt; decode: ${genTokens} tokens per sequence after 16-token prompts (after the long prompt in its row), greedy; median (min-max) of ${reps} (${longReps} for the long prompt), modes taking turns)`,
      rows,
    ),
  );
  out.push(`results: ${writeResult('determinism', data)}`);
  return out.join('\n');
}

/** The two phases' rows for one configuration: medians of each mode and the run-by-run ratio. */
function ratioRows(sequences: string, runs: Record<'default' | 'deterministic', Rates[]>, target: boolean): Row[] {
  const med = (k: 'default' | 'deterministic', f: keyof Rates) => spread(runs[k].map((r) => r[f]));
  return (['prefill', 'decode'] as const).map((f) => {
    const d = med('default', f);
    const x = med('deterministic', f);
    const ratios = spread(runs.deterministic.map((r, i) => r[f] / runs.default[i]![f]));
    return {
      sequences,
      phase: f,
      'default tok/s': fmtSpread(d),
      'deterministic tok/s': fmtSpread(x),
      'deterministic / default': `${(x.median / d.median).toFixed(2)}x`,
      'run by run': `${fmtSpread(ratios, 2)}x`,
      'target >= 0.85x': !target ? '(none)' : x.median / d.median >= 0.85 ? 'pass' : 'FAIL',
    };
  });
}
