// The model zoo (issue 24, item 1): one random-weight GGUF per architecture family, with the real
// tensor layout, a real vocabulary and chat template, run through llamux on real llama.cpp.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildZooSpec, encodeGguf, ZOO_ARCHITECTURES, zooGreedyChain } from '../../src/gguf/index.js';
import type { ZooArchitecture, ZooModelDescription } from '../../src/gguf/index.js';
import { ChatTemplate, loadModel, TokenAttribute, type Context, type GenerateResult, type Model } from '../../src/index.js';
import { ONE_THREAD } from '../helpers/models.js';
import { llamaCppModelsDir } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

const MAX_BYTES = 40_000_000;
const STEPS = 12;

/** A control token of each family's chat template that must be a single token. */
const TURN_TOKEN: Record<ZooArchitecture, string> = {
  llama: '<|start_header_id|>',
  qwen3: '<|im_start|>',
  qwen35: '<|im_start|>',
  qwen35moe: '<|im_start|>',
  gemma4: '<|turn>',
  'gpt-oss': '<|start|>',
  granitehybrid: '<|start_of_role|>',
  lfm2: '<|im_start|>',
  glm4moe: '<|user|>',
};
/** Architectures with recurrent layers (whose KV cannot be truncated). */
const HYBRID = new Set<ZooArchitecture>(['qwen35', 'qwen35moe', 'granitehybrid', 'lfm2']);
/**
 * The greedy token must survive this much bias against it. The construction gives about 8 logits
 * (gemma4: about 2, its final soft-capping at 30 compresses the head's logits).
 */
const MIN_MARGIN: Record<ZooArchitecture, number> = {
  llama: 5,
  qwen3: 5,
  qwen35: 5,
  qwen35moe: 5,
  gemma4: 1.2,
  'gpt-oss': 5,
  granitehybrid: 4,
  lfm2: 5,
  glm4moe: 5,
};

/** llama.cpp's tokenizer test vectors (tests/test-tokenizer-0.cpp's format). */
function tokenizerVectors(vocabFile: string): Array<[string, number[]]> {
  const inp = readFileSync(join(llamaCppModelsDir, `${vocabFile}.inp`), 'utf8');
  const out = readFileSync(join(llamaCppModelsDir, `${vocabFile}.out`), 'utf8').split('\n');
  if (out[out.length - 1] === '') out.pop();
  const texts = inp.split('\n__ggml_vocab_test__\n');
  if (texts[texts.length - 1] === '') texts.pop();
  expect(texts.length).toBe(out.length);
  return texts.map((t, i) => [t, out[i]!.trim() === '' ? [] : out[i]!.trim().split(' ').map(Number)]);
}

const ids = (r: GenerateResult): number[] => Array.from(r.tokens ?? []);
const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

let zoo: Record<ZooArchitecture, ZooModelDescription>;
const report: string[] = [];

beforeAll(async () => {
  zoo = await zooModels();
}, 180_000);

afterAll(() => {
  if (report.length) console.log(`zoo:\n${report.join('\n')}`);
});

describe.each(ZOO_ARCHITECTURES)('zoo model %s', (arch) => {
  let d: ZooModelDescription;
  let model: Model;
  let prompt: number[];
  let t0 = 0;
  let loadMs = 0;

  beforeAll(async () => {
    d = zoo[arch];
    t0 = Date.now();
    const t = Date.now();
    model = await loadModel(d.path);
    loadMs = Date.now() - t;
  }, 60_000);

  afterAll(async () => {
    await model?.dispose();
    report.push(`  ${arch}: ${(d.fileSize / 1e6).toFixed(1)} MB, load ${loadMs} ms, its checks ${Date.now() - t0} ms`);
  });

  it('is deterministic and under 40 MB', async () => {
    expect(d.fileSize).toBeLessThanOrEqual(MAX_BYTES);
    const again = encodeGguf((await buildZooSpec(arch, { vocabDir: llamaCppModelsDir })).spec);
    expect(again.length).toBe(d.fileSize);
    expect(sha256(again)).toBe(sha256(readFileSync(d.path)));
  }, 60_000);

  it('loads in llamux and reports its architecture', () => {
    expect(model.metadata.architecture).toBe(arch);
    expect(model.metadata.layers).toBe(d.nLayer);
    expect(model.metadata.embeddingSize).toBe(d.nEmbd);
    expect(model.vocab.size).toBe(d.nVocab);
    expect(model.metadata.isHybrid || model.metadata.isRecurrent).toBe(HYBRID.has(arch));
  });

  it("tokenizes llama.cpp's test vectors with its real vocabulary", () => {
    const vectors = tokenizerVectors(d.vocabFile);
    expect(vectors.length).toBeGreaterThan(10);
    for (const [text, want] of vectors) {
      expect(Array.from(model.tokenize(text, { addSpecial: false, parseSpecial: false })), JSON.stringify(text)).toEqual(want);
    }
  });

  it('renders its chat template into single control tokens', () => {
    const tpl = ChatTemplate.fromModel(model);
    const text = tpl.render(
      [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'What is the capital of France?' },
      ],
      { addGenerationPrompt: true },
    );
    expect(text).toContain('What is the capital of France?');
    expect(text).toContain(TURN_TOKEN[arch]);
    const turn = Array.from(model.tokenize(TURN_TOKEN[arch], { addSpecial: false, parseSpecial: true }));
    expect(turn).toHaveLength(1);
    prompt = Array.from(model.tokenize(text, { addSpecial: false, parseSpecial: true }));
    expect(prompt).toContain(turn[0]);
    // llama.cpp itself makes gpt-oss's harmony tokens USER_DEFINED (matched in any text)
    const attr = arch === 'gpt-oss' ? TokenAttribute.USER_DEFINED : TokenAttribute.CONTROL;
    expect(model.tokenInfo(turn[0]!).attributes & attr).toBe(attr);
  });

  it('generates its predicted greedy chain, the same twice, and the same beside 7 other sequences', async () => {
    expect(prompt?.length).toBeGreaterThan(0);
    const ctx: Context = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 8, toolCallMarkers: false });
    try {
      const want = zooGreedyChain(d.successors, prompt.at(-1)!, STEPS);
      const t = Date.now();
      const cold = await ctx.complete({ prompt, temperature: 0, maxTokens: STEPS, tokens: true });
      const genMs = Date.now() - t;
      expect(ids(cold)).toEqual(want);
      expect(cold.cache.outcome).toBe('cold');
      const again = await ctx.complete({ prompt, temperature: 0, maxTokens: STEPS, tokens: true });
      expect(ids(again)).toEqual(ids(cold));
      // 7 other prompts: the same conversation continued by 1 to 7 words of the chain's set
      const others = Array.from({ length: 7 }, (_, i) => [...prompt, ...d.successors.set.slice(10 * i, 10 * i + i + 1)]);
      const results = await Promise.all([prompt, ...others].map((p) => ctx.complete({ prompt: p, temperature: 0, maxTokens: STEPS, tokens: true })));
      expect(ids(results[0]!)).toEqual(ids(cold));
      results.slice(1).forEach((r, i) => expect(ids(r)).toEqual(zooGreedyChain(d.successors, others[i]!.at(-1)!, STEPS)));
      report.push(
        `  ${arch}: cold ${STEPS} tokens in ${genMs} ms; canTruncateKv ${ctx.settings.canTruncateKv}; ` +
          `repeat: ${again.cache.outcome} reused ${again.reusedTokens}/${again.promptTokens}; ` +
          `beside 7: ${results[0]!.cache.outcome} reused ${results[0]!.reusedTokens}, longer prompts reused ${results
            .slice(1)
            .map((r) => r.reusedTokens)
            .join('/')}`,
      );
      expect(ctx.settings.canTruncateKv).toBe(!HYBRID.has(arch));
    } finally {
      await ctx.dispose();
    }
  }, 60_000);

  it('continues a session from its pinned state, and serves a diverging prompt correctly', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 2048, sequences: 4, toolCallMarkers: false });
    try {
      const session = ctx.createSession();
      const first = await session.generate({ prompt, temperature: 0, maxTokens: 8, tokens: true }).result;
      expect(ids(first)).toEqual(zooGreedyChain(d.successors, prompt.at(-1)!, 8));
      const tail = d.successors.set.slice(100, 105);
      const next = await session.continue(tail, { temperature: 0, maxTokens: 8, tokens: true }).result;
      expect(ids(next)).toEqual(zooGreedyChain(d.successors, tail.at(-1)!, 8));
      expect(next.cache.outcome).toBe('sticky');
      // everything but the new tail and the last generated token (sampled, never decoded)
      expect(next.reusedTokens).toBe(prompt.length + 7);
      // the same conversation with another question: shares the template's prefix only
      const text = ChatTemplate.fromModel(model).render([
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'What is the capital of Spain?' },
      ], { addGenerationPrompt: true });
      const other = Array.from(model.tokenize(text, { addSpecial: false, parseSpecial: true }));
      const diverging = await ctx.complete({ prompt: other, temperature: 0, maxTokens: 8, tokens: true });
      expect(ids(diverging)).toEqual(zooGreedyChain(d.successors, other.at(-1)!, 8));
      if (!HYBRID.has(arch)) expect(diverging.reusedTokens).toBeGreaterThan(0);
      report.push(
        `  ${arch}: session continue ${next.cache.outcome} reused ${next.reusedTokens}/${next.promptTokens}; ` +
          `diverging prompt ${diverging.cache.outcome} reused ${diverging.reusedTokens}/${diverging.promptTokens}`,
      );
      await session.end();
    } finally {
      await ctx.dispose();
    }
  }, 60_000);

  it('keeps a clear greedy margin, and the same margin alone and in a batch of 8', async () => {
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 8, toolCallMarkers: false });
    try {
      const chain = zooGreedyChain(d.successors, prompt.at(-1)!, 3);
      const others = Array.from({ length: 7 }, (_, i) => [...prompt.slice(0, -1 - i), ...d.successors.set.slice(3 * i, 3 * i + 2)]);
      /**
       * The top-1/top-2 logit gap at `p`: the largest bias against the greedy token that still
       * leaves it on top, found by bisection to 1/64 logit. A probe of the whole forward pass.
       */
      const margin = async (p: number[], token: number, batched: boolean): Promise<number> => {
        const wins = async (b: number): Promise<boolean> => {
          const probe = ctx.complete({ prompt: p, temperature: 0, maxTokens: 1, tokens: true, logitBias: new Map([[token, -b]]) });
          const rest = batched ? others.map((o) => ctx.complete({ prompt: o, temperature: 0, maxTokens: 4 })) : [];
          const [r] = await Promise.all([probe, ...rest]);
          return ids(r as GenerateResult)[0] === token;
        };
        let lo = 0;
        let hi = 16;
        expect(await wins(hi)).toBe(false);
        while (hi - lo > 1 / 64) {
          const mid = (lo + hi) / 2;
          if (await wins(mid)) lo = mid;
          else hi = mid;
        }
        return lo;
      };
      const margins: number[] = [];
      for (let k = 0; k < chain.length; k++) margins.push(await margin([...prompt, ...chain.slice(0, k)], chain[k]!, false));
      for (const m of margins) expect(m).toBeGreaterThanOrEqual(MIN_MARGIN[arch]);
      const inBatch = await margin(prompt, chain[0]!, true);
      expect(Math.abs(inBatch - margins[0]!)).toBeLessThanOrEqual(2 / 64);
      report.push(`  ${arch}: greedy margin ${margins.map((m) => m.toFixed(2)).join(' / ')} logits (first step in a batch of 8: ${inBatch.toFixed(2)})`);
    } finally {
      await ctx.dispose();
    }
  }, 60_000);
});

/** Architectures whose block matrices (attention, delta-net, Mamba-2, experts) are also run in Q8_0. */
const QUANTIZED: readonly ZooArchitecture[] = ['qwen35moe', 'gemma4', 'gpt-oss', 'granitehybrid'];

describe.each(QUANTIZED)('zoo model %s with Q8_0 blocks', (arch) => {
  it('follows its predicted greedy chain cold and beside 7 other sequences', async () => {
    const d = (await zooModels([arch], 'Q8_0'))[arch];
    expect(d.blockType).toBe('Q8_0');
    expect(d.fileSize).toBeLessThanOrEqual(MAX_BYTES);
    const model = await loadModel(d.path);
    const ctx = await model.createContext({ ...ONE_THREAD, contextSize: 4096, sequences: 8, toolCallMarkers: false });
    try {
      const text = ChatTemplate.fromModel(model).render([{ role: 'user', content: 'What is the capital of France?' }], { addGenerationPrompt: true });
      const prompt = Array.from(model.tokenize(text, { addSpecial: false, parseSpecial: true }));
      const prompts = [prompt, ...Array.from({ length: 7 }, (_, i) => [...prompt, ...d.successors.set.slice(20 * i, 20 * i + 2 * i + 1)])];
      const cold = await ctx.complete({ prompt, temperature: 0, maxTokens: STEPS, tokens: true });
      expect(ids(cold)).toEqual(zooGreedyChain(d.successors, prompt.at(-1)!, STEPS));
      // batches of up to 8 sequences, prompts of different lengths: several Q8_0 batch shapes
      const results = await Promise.all(prompts.map((p) => ctx.complete({ prompt: p, temperature: 0, maxTokens: STEPS, tokens: true })));
      results.forEach((r, i) => expect(ids(r)).toEqual(zooGreedyChain(d.successors, prompts[i]!.at(-1)!, STEPS)));
    } finally {
      await ctx.dispose();
      await model.dispose();
    }
  }, 60_000);
});
