// Marker cost: decode tokens/s with tool-call markers on vs off (same model, same tokens), and
// the tool grammar's cost (issue 16): outside spans (tools given, no span opens), inside a span
// where the model's pick is usually refused (a random model under six JSON tool schemas: greedy
// tries the best candidates one by one; sampled, the payload chain, masks the whole vocabulary)
// and inside a span where the pick is accepted
// (a grammar that takes any character: the one-candidate check only). Plus the grammar compile
// time for six tools, cold and cached.
import { native } from '../../src/native/binding.js';
import { clearToolGrammarCache } from '../../src/grammar/index.js';
import { compileToolGrammar, loadModel, setLogger, type GenerateOptions } from '../../src/index.js';
import { SIX_TOOLS } from './tool-schemas.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';

export async function runMarkersBench(opts: { quick?: boolean; threads?: number } = {}): Promise<string> {
  setLogger('silent');
  const threads = opts.threads ?? 2;
  const names: BenchModelName[] = opts.quick ? ['llama2-tiny'] : ['250m-q8_0', 'llama2-tiny'];
  const rows: Row[] = [];
  const json: Record<string, unknown> = {};
  let compiled: Row[] | undefined;
  for (const name of names) {
    const bm = await ensureBenchModel(name);
    const model = await loadModel(bm.path);
    const big = name.startsWith('250m');
    const gen = opts.quick ? 64 : big ? 96 : 2000;
    const reps = opts.quick ? 1 : 3;
    const bias = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
    const modes = {
      off: {},
      on: {},
      'grammar, outside spans': { tools: SIX_TOOLS },
      'grammar, in span (refused picks)': { tools: SIX_TOOLS, toolChoice: 'required', parallelToolCalls: false },
      'grammar, in span, sampled (refused picks)': { tools: SIX_TOOLS, toolChoice: 'required', parallelToolCalls: false, temperature: 1, seed: 7, greedyToolSyntax: false },
      'grammar, in span (accepted picks)': { toolCallGrammar: 'root ::= [^\\x00]*', toolChoice: 'required', parallelToolCalls: false },
    } satisfies Record<string, Partial<GenerateOptions>>;
    type Mode = keyof typeof modes;
    const rates = Object.fromEntries(Object.keys(modes).map((m) => [m, [] as number[]])) as Record<Mode, number[]>;
    const counts = Object.fromEntries(Object.keys(modes).map((m) => [m, [] as number[]])) as Record<Mode, number[]>;
    // Sampler time per token (chains + grammar), measured natively: far less noisy than decode rates.
    const sample = Object.fromEntries(Object.keys(modes).map((m) => [m, [] as number[]])) as Record<Mode, number[]>;
    // Markers made of rare tokens: the matcher runs on every token but never opens a span.
    const markers = { start: [model.vocab.size - 1, model.vocab.size - 2], end: [model.vocab.size - 3] };
    for (let rep = 0; rep < reps; rep++) {
      for (const mode of Object.keys(modes) as Mode[]) {
        progress(`markers: ${name} ${mode} (${rep + 1}/${reps})`);
        const ctx = await model.createContext({ contextSize: 4096, threads, batchThreads: threads, toolCallMarkers: mode === 'off' ? false : markers });
        await ctx.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias, ...modes[mode] });
        const r = await ctx.complete({ prompt: benchPrompt(32, model.vocab.size), maxTokens: gen, temperature: 0, logitBias: bias, ...modes[mode] });
        rates[mode].push(r.timings.decodeTokensPerSec);
        counts[mode].push(r.generatedTokens);
        sample[mode].push(r.timings.sampleMs / r.generatedTokens);
        await ctx.dispose();
      }
    }
    const best = (xs: number[]) => Math.max(...xs);
    const least = (xs: number[]) => Math.min(...xs);
    const off = best(rates.off);
    const sampleOff = least(sample.off);
    for (const mode of Object.keys(modes) as Mode[]) {
      const rate = best(rates[mode]);
      const s = least(sample[mode]);
      rows.push({
        model: bm.description,
        mode,
        'decode tok/s': fmt(rate),
        'vs off': mode === 'off' ? '' : `${(((rate - off) / off) * 100).toFixed(1)} %`,
        'sampler ms/token': fmt(s, 3),
        'extra sampler ms/token': mode === 'off' ? '' : fmt(s - sampleOff, 3),
        tokens: counts[mode].join('/'),
      });
    }
    json[name] = { rates, counts, sampleMsPerToken: sample };
    if (!compiled) compiled = compileTimes(model);
    await model.dispose();
  }
  progressDone();
  const file = writeResult('markers', { threads, rates: json, compile: compiled });
  return `${table('Tool-call marker and tool grammar cost (decode: best of runs; sampler: least of runs; greedy)', rows)}\n${table('Tool grammar compile, six tools (median of 20)', compiled ?? [])}\nresults: ${file}\n`;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1]!;
}

/** TS compile (cold: cache cleared; cached: the same request again) and llama.cpp's parse of the GBNF. */
function compileTimes(model: Awaited<ReturnType<typeof loadModel>>): Row[] {
  const req = { tools: SIX_TOOLS.map((t) => ({ name: t.name, parameters: t.parameters as Record<string, unknown> })), choice: 'auto' as const, family: 'hermes' as const, start: [model.vocab.size - 1], end: [model.vocab.size - 3], endIsEog: false, parallel: true };
  const cold: number[] = [];
  const cached: number[] = [];
  const parse: number[] = [];
  const g = compileToolGrammar(req);
  for (let i = 0; i < 20; i++) {
    clearToolGrammarCache();
    let t = performance.now();
    compileToolGrammar(req);
    cold.push(performance.now() - t);
    t = performance.now();
    compileToolGrammar(req);
    cached.push(performance.now() - t);
    t = performance.now();
    native.testing.grammarAccepts(model.nativeHandle(), g.gbnf, g.root, new Int32Array(0));
    parse.push(performance.now() - t);
  }
  return [
    { step: 'TS: JSON Schema -> GBNF (cold)', ms: fmt(median(cold), 3), 'GBNF bytes': String(g.gbnf.length), rules: String(g.gbnf.split('\n').filter(Boolean).length) },
    { step: 'TS: cached (same tools, choice, family)', ms: fmt(median(cached), 4), 'GBNF bytes': '', rules: '' },
    { step: 'native: llama.cpp GBNF parse (done once per GBNF text, then cloned)', ms: fmt(median(parse), 3), 'GBNF bytes': '', rules: '' },
  ];
}
