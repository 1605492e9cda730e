import { loadModel, setLogger, type Model } from '../../src/index.js';
import { benchPrompt } from '../models.js';

export interface DecodeResult {
  prefillTokensPerSec: number;
  decodeTokensPerSec: number;
  ttftMs: number;
}

export async function withLlamux<T>(path: string, fn: (model: Model) => Promise<T>): Promise<T> {
  setLogger('silent');
  const model = await loadModel(path);
  try {
    return await fn(model);
  } finally {
    await model.dispose();
  }
}

function banEog(model: Model): Record<string, number> {
  return Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
}

/** One sequence: prefill `promptTokens`, then decode `genTokens` greedily. */
export async function llamuxSingle(model: Model, promptTokens: number, genTokens: number, threads: number): Promise<DecodeResult> {
  const ctx = await model.createContext({ contextSize: promptTokens + genTokens + 64, threads, batchThreads: threads });
  const bias = banEog(model);
  // warm-up (graph allocation), then the measured run on a fresh prompt
  await ctx.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
  const r = await ctx.complete({ prompt: benchPrompt(promptTokens, model.vocab.size), maxTokens: genTokens, temperature: 0, logitBias: bias });
  await ctx.dispose();
  return { prefillTokensPerSec: r.timings.prefillTokensPerSec, decodeTokensPerSec: r.timings.decodeTokensPerSec, ttftMs: r.timings.ttftMs };
}

/** `n` concurrent sequences; aggregate decode tokens/s over the span where all decode. */
export async function llamuxConcurrent(model: Model, n: number, promptTokens: number, genTokens: number, threads: number): Promise<{ aggregateDecodeTokensPerSec: number; ttftP50: number; ttftP95: number }> {
  const ctx = await model.createContext({ contextSize: (promptTokens + genTokens + 16) * n, sequences: n, threads, batchThreads: threads });
  const bias = banEog(model);
  await ctx.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: n }, (_, s) => ctx.complete({ prompt: benchPrompt(promptTokens, model.vocab.size, s + 1), maxTokens: genTokens, temperature: 0, logitBias: bias })));
  const total = performance.now() - t0;
  await ctx.dispose();
  const firstDone = Math.max(...results.map((r) => r.timings.ttftMs));
  const decodeSpan = total - firstDone;
  const ttfts = results.map((r) => r.timings.ttftMs).sort((a, b) => a - b);
  return {
    aggregateDecodeTokensPerSec: (n * (genTokens - 1)) / (decodeSpan / 1000),
    ttftP50: ttfts[Math.floor(ttfts.length * 0.5)]!,
    ttftP95: ttfts[Math.min(ttfts.length - 1, Math.floor(ttfts.length * 0.95))]!,
  };
}
