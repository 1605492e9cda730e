// node-llama-cpp 3.21.1 (same llama.cpp release), with its own prebuilt CPU binary.
import { benchPrompt } from '../models.js';
import type { DecodeResult } from './llamux.js';

type NlcModule = typeof import('node-llama-cpp');
let nlc: NlcModule | undefined;
let llamaPromise: Promise<import('node-llama-cpp').Llama> | undefined;

async function getLlamaInstance() {
  nlc ??= await import('node-llama-cpp');
  llamaPromise ??= nlc.getLlama({
    gpu: false,
    build: 'never',
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    logLevel: nlc.LlamaLogLevel.error,
  });
  return { llama: await llamaPromise, nlc };
}

export async function withNodeLlamaCpp<T>(path: string, fn: (model: import('node-llama-cpp').LlamaModel, m: NlcModule) => Promise<T>): Promise<T> {
  const { llama, nlc: m } = await getLlamaInstance();
  const model = await llama.loadModel({ modelPath: path });
  try {
    return await fn(model, m);
  } finally {
    await model.dispose();
  }
}

async function decode(seq: import('node-llama-cpp').LlamaContextSequence, prompt: number[], gen: number, bias: import('node-llama-cpp').TokenBias): Promise<{ ttft: number; decodeMs: number; tStart: number; tFirst: number }> {
  const tStart = performance.now();
  let tFirst = 0;
  let n = 0;
  for await (const _tok of seq.evaluate(prompt as never, { temperature: 0, tokenBias: bias })) {
    if (n === 0) tFirst = performance.now();
    n++;
    if (n >= gen) break;
  }
  const tEnd = performance.now();
  return { ttft: tFirst - tStart, decodeMs: tEnd - tFirst, tStart, tFirst };
}

export async function nlcSingle(model: import('node-llama-cpp').LlamaModel, m: NlcModule, nVocab: number, promptTokens: number, genTokens: number, threads: number): Promise<DecodeResult> {
  const ctx = await model.createContext({ contextSize: promptTokens + genTokens + 64, threads, batchSize: 512 });
  const bias = new m.TokenBias(model.tokenizer);
  for (const t of [model.tokens.eos, model.tokens.eot].filter((x) => x != null)) bias.set(t as never, 'never');
  const warm = ctx.getSequence();
  await decode(warm, benchPrompt(8, nVocab, 99), 4, bias);
  warm.dispose();
  const seq = ctx.getSequence();
  const r = await decode(seq, benchPrompt(promptTokens, nVocab), genTokens, bias);
  await ctx.dispose();
  return { prefillTokensPerSec: promptTokens / (r.ttft / 1000), decodeTokensPerSec: (genTokens - 1) / (r.decodeMs / 1000), ttftMs: r.ttft };
}

export async function nlcConcurrent(model: import('node-llama-cpp').LlamaModel, m: NlcModule, nVocab: number, n: number, promptTokens: number, genTokens: number, threads: number): Promise<{ aggregateDecodeTokensPerSec: number; ttftP50: number; ttftP95: number }> {
  // node-llama-cpp's contextSize is per sequence
  const ctx = await model.createContext({ contextSize: promptTokens + genTokens + 16, sequences: n, threads, batchSize: 512 });
  const bias = new m.TokenBias(model.tokenizer);
  for (const t of [model.tokens.eos, model.tokens.eot].filter((x) => x != null)) bias.set(t as never, 'never');
  const seqs = Array.from({ length: n }, () => ctx.getSequence());
  const t0 = performance.now();
  const rs = await Promise.all(seqs.map((s, i) => decode(s, benchPrompt(promptTokens, nVocab, i + 1), genTokens, bias)));
  const total = performance.now() - t0;
  await ctx.dispose();
  const lastFirst = Math.max(...rs.map((r) => r.tFirst - t0));
  const ttfts = rs.map((r) => r.tFirst - t0).sort((a, b) => a - b);
  return {
    aggregateDecodeTokensPerSec: (n * (genTokens - 1)) / ((total - lastFirst) / 1000),
    ttftP50: ttfts[Math.floor(ttfts.length * 0.5)]!,
    ttftP95: ttfts[Math.min(ttfts.length - 1, Math.floor(ttfts.length * 0.95))]!,
  };
}


/**
 * node-llama-cpp's speculative decoding on one sequence: `InputLookupTokenPredictor` (prompt
 * lookup) or `DraftSequenceTokenPredictor` on a second model, both with their defaults, against
 * the same sequence without a predictor. Greedy; each run starts from an empty sequence. Decode
 * tok/s from the first token to the `expect.length`-th, and whether the tokens were `expect`.
 */
export async function nlcSpeculative(
  targetPath: string,
  draftPath: string | undefined,
  prompt: number[],
  expect: number[],
  threads: number,
  runs: number,
): Promise<Array<{ plain: number; spec: number; acceptance: number; exact: number }>> {
  const { llama, nlc: m } = await getLlamaInstance();
  const model = await llama.loadModel({ modelPath: targetPath });
  const draftModel = draftPath ? await llama.loadModel({ modelPath: draftPath }) : undefined;
  const size = prompt.length + expect.length + 64;
  const plainCtx = await model.createContext({ contextSize: size, threads, batchSize: 512 });
  const specCtx = await model.createContext({ contextSize: size, threads, batchSize: 512 });
  const draftCtx = draftModel ? await draftModel.createContext({ contextSize: size, threads, batchSize: 512 }) : undefined;
  try {
    const plain = plainCtx.getSequence();
    const predictor = draftCtx ? new m.DraftSequenceTokenPredictor(draftCtx.getSequence()) : new m.InputLookupTokenPredictor();
    const spec = specCtx.getSequence({ tokenPredictor: predictor });
    const once = async (seq: import('node-llama-cpp').LlamaContextSequence) => {
      await seq.clearHistory();
      // the lookup searches the input the completion classes hand it; a bare sequence must too
      if (seq === spec && predictor instanceof m.InputLookupTokenPredictor) predictor.updateInputTokens(prompt as never);
      const got: number[] = [];
      let tFirst = 0;
      for await (const tok of seq.evaluate(prompt as never, { temperature: 0 })) {
        if (got.length === 0) tFirst = performance.now();
        got.push(tok as number);
        if (got.length >= expect.length) break;
      }
      const decode = (got.length - 1) / ((performance.now() - tFirst) / 1000);
      return { decode, exact: got.length === expect.length && got.every((t, i) => t === expect[i]) };
    };
    await once(plain);
    await once(spec);  // warm-up: graphs of every batch shape
    const out: Array<{ plain: number; spec: number; acceptance: number; exact: number }> = [];
    for (let i = 0; i < runs; i++) {
      const a = await once(plain);
      const before = { ...spec.tokenPredictions };
      const b = await once(spec);
      // validated / (validated + refuted): predictions kept, as llamux's accepted / drafted
      const validated = spec.tokenPredictions.validated - before.validated;
      const refuted = spec.tokenPredictions.refuted - before.refuted;
      out.push({ plain: a.decode, spec: b.decode, acceptance: validated + refuted > 0 ? validated / (validated + refuted) : 0, exact: a.exact && b.exact ? 1 : 0 });
    }
    return out;
  } finally {
    await draftCtx?.dispose();
    await specCtx.dispose();
    await plainCtx.dispose();
    await draftModel?.dispose();
    await model.dispose();
  }
}
