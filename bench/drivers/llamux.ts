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

/** One sequence: prefill `promptTokens`, then decode `genTokens` greedily. Timed by the
 * client, as the other systems are: from the call to the first text event, then to the end. */
export async function llamuxSingle(model: Model, promptTokens: number, genTokens: number, threads: number): Promise<DecodeResult> {
  const ctx = await model.createContext({ contextSize: promptTokens + genTokens + 64, threads, batchThreads: threads, prefixCache: false });
  const bias = banEog(model);
  // warm-up (graph allocation), then the measured run on a fresh prompt
  await ctx.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
  const t0 = performance.now();
  let tFirst = 0;
  let n = 0;
  for await (const ev of ctx.generate({ prompt: benchPrompt(promptTokens, model.vocab.size), maxTokens: genTokens, temperature: 0, logitBias: bias, emitTokenIds: true })) {
    if (ev.type === 'text') {
      if (n === 0) tFirst = performance.now();
      n += ev.tokens?.length ?? 0;
    }
  }
  const tEnd = performance.now();
  await ctx.dispose();
  const ttft = tFirst - t0;
  return { prefillTokensPerSec: promptTokens / (ttft / 1000), decodeTokensPerSec: (n - 1) / ((tEnd - tFirst) / 1000), ttftMs: ttft };
}

/** `n` concurrent sequences; aggregate decode tokens/s over the span where all decode. */
export async function llamuxConcurrent(model: Model, n: number, promptTokens: number, genTokens: number, threads: number): Promise<{ aggregateDecodeTokensPerSec: number; ttftP50: number; ttftP95: number }> {
  const ctx = await model.createContext({ contextSize: (promptTokens + genTokens + 16) * n, sequences: n, threads, batchThreads: threads, prefixCache: false });
  const bias = banEog(model);
  await ctx.complete({ prompt: benchPrompt(8, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
  const t0 = performance.now();
  // client-side: when each request's first text event arrived
  const firsts = await Promise.all(
    Array.from({ length: n }, async (_, s) => {
      let first = 0;
      for await (const ev of ctx.generate({ prompt: benchPrompt(promptTokens, model.vocab.size, s + 1), maxTokens: genTokens, temperature: 0, logitBias: bias })) {
        if (ev.type === 'text' && first === 0) first = performance.now() - t0;
      }
      return first;
    }),
  );
  const total = performance.now() - t0;
  await ctx.dispose();
  const decodeSpan = total - Math.max(...firsts);
  const ttfts = firsts.sort((a, b) => a - b);
  return {
    aggregateDecodeTokensPerSec: (n * (genTokens - 1)) / (decodeSpan / 1000),
    ttftP50: ttfts[Math.floor(ttfts.length * 0.5)]!,
    ttftP95: ttfts[Math.min(ttfts.length - 1, Math.floor(ttfts.length * 0.95))]!,
  };
}
