// Embeddings throughput: texts/s at batch 1, 32 and 256 on a random-weight encoder with
// bge-small's shape (BERT, 12 layers, n_embd 384, F16, the real bge WordPiece vocabulary),
// against llama-server's /v1/embeddings (same pinned llama.cpp) and node-llama-cpp's embedding
// context. llamux is measured through its server's /v1/embeddings (the same HTTP path and
// client as llama-server: the official openai package) and through ctx.embed directly.
// Systems take turns within each run; every figure is the median of the runs (min–max).
// Then generation beside embeddings: decode tokens/s of one greedy generation on the 250 M
// decoder, alone and while a client keeps embedding texts on the same context (mean pooling).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { packageRoot } from '../../src/native/binding.js';
import { BGE_SMALL_DIMS, writeBertModel } from '../../src/gguf/zoo/embedding.js';
import { loadModel, setLogger } from '../../src/index.js';
import { createServer } from '../../src/server/index.js';
import { llamaServerBinary, startLlamaServer } from '../drivers/llama-server.js';
import { withNodeLlamaCpp } from '../drivers/node-llama-cpp.js';
import { benchDir, benchPrompt, ensureBenchModel } from '../models.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';
import { fmtSpread, spread, type Spread } from '../stats.js';

const WORDS = (
  'the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there ' +
  'model vector search index query document answer server batch token memory engine river market garden window summer network'
).split(' ');

/** A deterministic sentence of 20 to 28 words (about 25 to 35 WordPiece tokens). */
export function benchText(i: number): string {
  const n = 20 + (i % 9);
  const out: string[] = [];
  for (let k = 0; k < n; k++) out.push(WORDS[(Math.imul(i + 1, 2654435761) + k * 40503) % WORDS.length >>> 0]!);
  return `${out.join(' ')}.`;
}

const vocabDir = join(packageRoot, '.cache', 'llama.cpp-models');

async function ensureEncoder(): Promise<string> {
  const path = join(benchDir, 'bert-bge-small-f16.gguf');
  if (existsSync(path)) return path;
  if (!existsSync(join(vocabDir, 'ggml-vocab-bert-bge.gguf'))) {
    mkdirSync(vocabDir, { recursive: true });
    const git = join(packageRoot, '.cache', 'llama.cpp.git');
    const r = spawnSync('sh', ['-c', `git --git-dir="${git}" archive HEAD models/ggml-vocab-bert-bge.gguf | tar -x -C "${vocabDir}" --strip-components=1`]);
    if (r.status !== 0) throw new Error(`cannot extract ggml-vocab-bert-bge.gguf from ${git}`);
  }
  mkdirSync(benchDir, { recursive: true });
  await writeBertModel(path, vocabDir, { dims: BGE_SMALL_DIMS, blockType: 'F16' });
  return path;
}

export interface EmbeddingsBenchOptions {
  quick?: boolean;
  threads?: number;
  runs?: number;
}

type System = 'llamux server' | 'llamux ctx.embed' | 'llama-server' | 'node-llama-cpp';

export async function runEmbeddingsBench(opts: EmbeddingsBenchOptions = {}): Promise<string> {
  setLogger('silent');
  const threads = opts.threads ?? 2;
  const runs = opts.runs ?? (opts.quick ? 1 : 3);
  const batches = [1, 32, 256];
  // texts per measurement at each batch size (requests = texts / batch)
  const textsPer = (b: number) => (b === 1 ? (opts.quick ? 16 : 32) : b === 32 ? (opts.quick ? 64 : 128) : 256);
  const load0 = loadavg();
  // LLAMUX_BENCH_EMBEDDINGS=throughput | beside: one part only
  const part = process.env.LLAMUX_BENCH_EMBEDDINGS ?? 'both';
  const out: string[] = [];
  let dims = 0;
  const results: Record<System, Record<number, number[]>> = { 'llamux server': {}, 'llamux ctx.embed': {}, 'llama-server': {}, 'node-llama-cpp': {} };
  if (part !== 'beside') {
    progress('embeddings: preparing the encoder');
    const path = await ensureEncoder();
    const BATCH = 2048;
    const model = await loadModel(path);
    const server = await createServer({ model, port: 0, ctx: BATCH, parallel: 1, threads, batchSize: BATCH, log: () => {} });
    const lx = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 600_000 });
    const bin = llamaServerBinary();
    // llama-server: 8 slots share the batch; -ub = -b so a whole batch of inputs is one encoder pass
    const ls = bin.path
      ? await startLlamaServer(bin.path, path, { ctx: 8 * 512, parallel: 8, threads, extraArgs: ['--embeddings', '-b', String(BATCH), '-ub', String(BATCH)] })
      : undefined;
    const note = (s: System, b: number, v: number) => ((results[s][b] ??= []).push(v));
    // node-llama-cpp embeds one text per call, so a batch is that many calls: fewer texts keep its runs short
    const timeTexts = async (b: number, fn: (texts: string[]) => Promise<unknown>, cap = Infinity): Promise<number> => {
      const total = Math.min(textsPer(b), Math.max(b, cap));
      const all = Array.from({ length: total }, (_, i) => benchText(i));
      await fn(all.slice(0, Math.min(b, 8))); // warm-up
      const t0 = performance.now();
      for (let i = 0; i < total; i += b) await fn(all.slice(i, i + b));
      return total / ((performance.now() - t0) / 1000);
    };
    try {
      await withNodeLlamaCpp(path, async (nlcModel) => {
        const nlcCtx = await nlcModel.createEmbeddingContext({ contextSize: 512, batchSize: 512, threads });
        try {
          for (let run = 0; run < runs; run++) {
            for (const b of batches) {
              progress(`embeddings: run ${run + 1}/${runs}, batch ${b}`);
              note('llamux server', b, await timeTexts(b, async (texts) => {
                const r = await lx.embeddings.create({ model: 'bge', input: texts });
                dims = r.data[0]!.embedding.length;
              }));
              if (ls) note('llama-server', b, await timeTexts(b, (texts) => ls.openai.embeddings.create({ model: 'bge', input: texts })));
              note('llamux ctx.embed', b, await timeTexts(b, (texts) => server.context.embed(texts)));
              // batch 256 is 256 calls: measured in the first run only
              if (b < 256 || run === 0) note('node-llama-cpp', b, await timeTexts(b, (texts) => Promise.all(texts.map((t) => nlcCtx.getEmbeddingFor(t))), 32));
            }
          }
        } finally {
          await nlcCtx.dispose();
        }
      });
    } finally {
      await ls?.close();
      await server.close();
      await model.dispose();
    }
    const rows: Row[] = batches.map((b) => {
      const s = (x: System): Spread | undefined => (results[x][b] ? spread(results[x][b]!) : undefined);
      const lxs = s('llamux server')!;
      const lss = s('llama-server');
      const nlc = s('node-llama-cpp')!;
      return {
        batch: b,
        'llamux /v1/embeddings texts/s': fmtSpread(lxs),
        'llama-server texts/s': lss ? fmtSpread(lss) : `- (${bin.why})`,
        'vs llama-server': lss ? `${(lxs.median / lss.median).toFixed(2)}x` : '-',
        'llamux ctx.embed texts/s': fmtSpread(s('llamux ctx.embed')!),
        'node-llama-cpp texts/s': fmtSpread(nlc),
        'vs node-llama-cpp': `${(lxs.median / nlc.median).toFixed(2)}x`,
      };
    });

    out.push(table(`embeddings: texts/s, bge-small-shaped BERT (F16, ${dims} dims), ${threads} threads, ${runs} run(s), ~30-token texts`, rows));
  }

  // Generation beside embeddings on one context of the 250 M decoder.
  const beside: { alone: number[]; beside: number[]; embedTps: number[] } = { alone: [], beside: [], embedTps: [] };
  if (part !== 'throughput') {
    progress('embeddings: generation beside embeddings');
    const dec = await ensureBenchModel('250m-q8_0');
    const genModel = await loadModel(dec.path);
    const gen = opts.quick ? 48 : 64;
    try {
      const ctx = await genModel.createContext({ contextSize: 4096, sequences: 2, threads, batchThreads: threads, toolCallMarkers: false, prefillChunk: 256 });
      const bias = Object.fromEntries(genModel.vocab.eogTokens.map((t) => [String(t), -Infinity]));
      const decodeRate = async (): Promise<number> => {
        const times: number[] = [];
        for await (const ev of ctx.generate({ prompt: benchPrompt(32, genModel.vocab.size, 7), maxTokens: gen, temperature: 0, logitBias: bias, emitTokenIds: true })) {
          if (ev.type === 'text') for (let j = 0; j < (ev.tokens?.length ?? 1); j++) times.push(performance.now());
        }
        return (times.length - 1) / ((times.at(-1)! - times[0]!) / 1000);
      };
      await ctx.embed(['warm up'], { pooling: 'mean' });
      await decodeRate();
      for (let run = 0; run < runs; run++) {
        progress(`embeddings: generation alone / beside, run ${run + 1}/${runs}`);
        beside.alone.push(await decodeRate());
        let stop = false;
        let texts = 0;
        const t0 = performance.now();
        const loop = (async () => {
          for (let i = 0; !stop; i++) {
            await ctx.embed(Array.from({ length: 8 }, (_, k) => benchText(i * 8 + k)), { pooling: 'mean' });
            texts += 8;
          }
        })();
        beside.beside.push(await decodeRate());
        stop = true;
        await loop;
        beside.embedTps.push(texts / ((performance.now() - t0) / 1000));
      }
      await ctx.dispose();
    } finally {
      await genModel.dispose();
    }
    progressDone();
    const alone = spread(beside.alone);
    const next = spread(beside.beside);
    const genRows: Row[] = [
      {
        'decode tok/s alone': fmtSpread(alone),
        'decode tok/s beside embeddings': fmtSpread(next),
        'beside / alone': `${(next.median / alone.median).toFixed(2)}x`,
        'embeddings texts/s meanwhile': fmtSpread(spread(beside.embedTps)),
      },
    ];
    out.push(table(`generation beside embeddings: ${dec.description}, ${gen} tokens, embed batches of 8 texts (mean pooling) on the same context`, genRows));
  }
  progressDone();
  const load1 = loadavg();
  const file = writeResult('embeddings', { threads, runs, dims, results, beside, loadavg: [load0[0], load1[0]] });
  out.push(`load average ${fmt(load0[0]!, 2)} before, ${fmt(load1[0]!, 2)} after; results in ${file}`);
  return out.join('\n');
}
