// Soak: many requests with mixed prompts, sessions, aborts and cache churn on one context.
// RSS and the cache counters are sampled throughout; a watchdog fails the run if no request
// finishes for 30 s. Run: `npm run test:soak [-- --requests 10000]` (not part of `npm test`).
import { loadModel, setLogger, LlamuxError } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

const args = process.argv.slice(2);
const total = Number(args[args.indexOf('--requests') + 1]) || 10_000;
setLogger('silent');
const model = await loadModel(tinyModelPath);
const ctx = await model.createContext({ contextSize: 8192, sequences: 8, cacheRamMb: 8, sessionTtlMs: 2000 });
const noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
let seed = 42;
const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
const stems = Array.from({ length: 20 }, (_, i) => `system prompt number ${i} `.repeat(5 + i));

let done = 0;
let aborted = 0;
let failed = 0;
let lastProgress = Date.now();
const unexpected: string[] = [];
const samples: Array<{ done: number; rssMb: number; ram: number; sessions: number }> = [];
const watchdog = setInterval(() => {
  if (Date.now() - lastProgress > 30_000) {
    console.error(`watchdog: no request finished for 30 s (done ${done})`);
    process.exit(2);
  }
}, 1000);

async function one(i: number): Promise<void> {
  const ac = new AbortController();
  const kind = rand(10);
  const opts = {
    prompt: stems[rand(stems.length)]! + ` question ${rand(1000)}`,
    maxTokens: 1 + rand(24),
    temperature: rand(2) ? 0 : 0.8,
    logitBias: noEos,
    signal: ac.signal,
    ...(kind < 3 ? { sessionId: `s${rand(12)}`, waitForSession: true } : {}),
  };
  if (kind === 9) setTimeout(() => ac.abort(), rand(5));
  try {
    await ctx.complete(opts);
  } catch (e) {
    if (e instanceof LlamuxError && e.code === 'ABORTED') aborted++;
    else {
      failed++;
      if (unexpected.length < 10) unexpected.push(`${i}: ${(e as Error).message}`);
    }
  }
  done++;
  lastProgress = Date.now();
  if (done % 500 === 0) {
    const st = ctx.cacheStats();
    samples.push({ done, rssMb: Math.round(process.memoryUsage().rss / 2 ** 20), ram: st.ramBytes, sessions: st.sessions });
    process.stderr.write(`\r${done}/${total} rss ${samples.at(-1)!.rssMb} MB`);
  }
}

const started = Date.now();
let next = 0;
await Promise.all(Array.from({ length: 32 }, async () => {
  while (next < total) await one(next++);
}));
clearInterval(watchdog);
await ctx.dispose();
await model.dispose();
const warm = samples.slice(Math.floor(samples.length / 4));
const rss = warm.map((s) => s.rssMb);
const growth = rss.length > 1 ? rss.at(-1)! - rss[0]! : 0;
console.log(JSON.stringify({ requests: total, aborted, failed, seconds: (Date.now() - started) / 1000, rssMbAfterWarmup: [Math.min(...rss), Math.max(...rss)], rssGrowthMb: growth, unexpected }, null, 2));
if (failed > 0 || growth > 64) process.exit(1);
