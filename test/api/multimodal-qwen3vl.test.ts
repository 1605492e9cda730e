// Qwen-VL images (issue 37): the zoo's qwen35 (M-RoPE, hybrid) with a generated Qwen3-VL
// projector (src/gguf/projector-qwen3vl.ts). libmtmd puts an M-RoPE image's cells at one
// position and moves the next token on by the image's larger side in merged patches (a 24x24
// image: 9 embeddings, 3 positions; 40x24: 15 and 5), so text after an image sits at other
// positions than its token index (Sequence's position runs). On every cache path the same image
// is a hit, one pixel changed a miss, and a cached run equals a cold one; the comparison with
// llama.cpp itself (llama-server, which a fresh checkout must build first) is in
// multimodal-qwen3vl-llama-server.test.ts, run by `npm run test:slow`.
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Context, type GenerateResult, type Model, type PromptPart } from '../../src/index.js';
import { zooGreedyChain, type ZooModelDescription } from '../../src/gguf/index.js';
import { native } from '../../src/native/binding.js';
import { HEAD, TAIL, parts, pattern, square, wide, wide1 } from '../helpers/qwen3vl-images.js';
import { ensureQwen3vlProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

/** native/kv/hash.h's Hash128 (the disk tier's checksum), written out for the test. */
function hash128(parts: Uint8Array[]): [bigint, bigint] {
  const M = (1n << 64n) - 1n;
  let a = 0xcbf29ce484222325n, b = 0x84222325cbf29ce4n;
  for (const p of parts) {
    for (const byte of p) {
      const v = BigInt(byte);
      a = ((a ^ v) * 0x100000001b3n) & M;
      b = (((b ^ v) * 0x00000100000001b3n) + 0x9e3779b97f4a7c15n) & M;
      b ^= b >> 29n;
    }
  }
  return [a, b];
}

/** A disk-tier file (native/kv/disk_tier.cc: an 80-byte header, the tokens, the state) rewritten
 * as before positions were tracked: its state without the leading position runs ("LXPS"). */
function stripPositions(file: string): void {
  const f = readFileSync(file);
  const nTokens = Number(f.readBigUInt64LE(48));
  const tokens = f.subarray(80, 80 + nTokens * 4);
  const blob = f.subarray(80 + nTokens * 4);
  expect(blob.subarray(0, 4).toString('latin1')).toBe('LXPS');
  const runs = blob.readUInt32LE(4);
  const old = blob.subarray(8 + 24 * runs);
  const header = Buffer.from(f.subarray(0, 80));
  header.writeBigUInt64LE(BigInt(old.length), 56);
  const [ca, cb] = hash128([tokens, old]);
  header.writeBigUInt64LE(ca, 64);
  header.writeBigUInt64LE(cb, 72);
  writeFileSync(file, Buffer.concat([header, tokens, old]));
}

describe('Qwen-VL images (zoo qwen35 + a generated qwen3vl_merger projector)', () => {
  let text: ZooModelDescription;
  let projectorPath: string;
  let model: Model;
  let ctx: Context;
  let cold: Context; // no prefix cache: every run computes its whole prompt
  const run = (c: Context, p: PromptPart[] | Int32Array, maxTokens = 8) =>
    c.generate({ prompt: p, maxTokens, temperature: 0, emitTokenIds: true, logprobs: 3 }).result;
  const same = (a: GenerateResult, b: GenerateResult) => {
    expect(Array.from(a.tokens!)).toEqual(Array.from(b.tokens!));
    expect(a.logprobs!.map((l) => l.logprob)).toEqual(b.logprobs!.map((l) => l.logprob));
  };

  beforeAll(async () => {
    text = (await zooModels(['qwen35']))['qwen35'];
    projectorPath = (await ensureQwen3vlProjector({ projectionDim: text.nEmbd })).path;
    model = await loadModel(text.path, { projector: projectorPath });
    ctx = await model.createContext({ contextSize: 512, sequences: 2, threads: 2, toolCallMarkers: false });
    cold = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, prefixCache: false, toolCallMarkers: false });
  });
  afterAll(async () => {
    await ctx?.dispose();
    await cold?.dispose();
    await model?.dispose();
  });

  it('an image is one media id per embedding in the token list (its positions: multimodal-qwen3vl-llama-server.test.ts)', async () => {
    expect(model.projector?.mrope).toBe(true);
    for (const [image, n] of [[square, 9], [wide, 15]] as const) {
      const t = await native.tokenizeMedia(model.nativeHandle(), [HEAD, image, TAIL], false, false, 16e6, 300);
      expect(Array.from(t.tokens).filter((x) => x < 0).length).toBe(n);
    }
  });

  it('live prefix: the same image is a hit, one pixel changed a miss; the hit equals a cold run', async () => {
    const c = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, toolCallMarkers: false });
    try {
      const first = await run(c, parts(wide));
      expect(first.reusedTokens).toBe(0);
      const hit = await run(c, parts(wide));
      // a hybrid memory goes back to its checkpoint before the last prompt token
      expect(hit.reusedTokens).toBe(hit.promptTokens - 1);
      same(hit, first);
      const miss = await run(c, parts(wide1));
      expect(miss.reusedTokens).toBe(0); // no checkpoint before the image
      same(miss, await run(cold, parts(wide1)));
      expect(Array.from(miss.logprobs!.map((l) => l.logprob))).not.toEqual(first.logprobs!.map((l) => l.logprob));
    } finally {
      await c.dispose();
    }
  });

  it('sessions: a second turn after the image continues on the image\'s KV and equals a cold run of the whole list', async () => {
    const s = ctx.createSession();
    try {
      const t1 = await s.generate({ prompt: parts(square), maxTokens: 4, temperature: 0, emitTokenIds: true }).result;
      const t2 = await s.continue([{ type: 'text', text: ' And this one:' }, { type: 'image', image: wide }, { type: 'text', text: ' Same?' }], { maxTokens: 6, temperature: 0, emitTokenIds: true, logprobs: 3 }).result;
      expect(t2.reusedTokens).toBe(t1.promptTokens + t1.generatedTokens - 1);
      const t3 = await s.continue(' Thanks.', { maxTokens: 6, temperature: 0, emitTokenIds: true, logprobs: 3 }).result;
      expect(t3.reusedTokens).toBe(t2.promptTokens + t2.generatedTokens - 1);
      // the same token list, cold: the media ids are found again in the projector's store
      const h = model.nativeHandle();
      const p1 = (await native.tokenizeMedia(h, [HEAD, square, TAIL], false, false, 16e6, 300)).tokens;
      const p2 = (await native.tokenizeMedia(h, [' And this one:', wide, ' Same?'], false, false, 16e6, 300)).tokens;
      const list = [...p1, ...t1.tokens!, ...p2, ...t2.tokens!, ...model.tokenize(' Thanks.', { addSpecial: false, parseSpecial: false })];
      expect(list.length).toBe(t3.promptTokens);
      same(t3, await run(cold, Int32Array.from(list), 6));
    } finally {
      await s.end();
    }
  });

  it('RAM tier, prefillOnly + parentKey and n choices key on the image and equal cold runs', async () => {
    const c = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, cacheRamMb: 16, toolCallMarkers: false });
    try {
      const first = await run(c, parts(square));
      await run(c, [{ type: 'text', text: 'Something else entirely, to take the only sequence.' }], 2); // square's state moves to the RAM tier
      const again = await run(c, parts(square));
      expect(again.cache.tier).toBe('ram');
      expect(again.reusedTokens).toBe(again.promptTokens - 1);
      same(again, first);
      await run(c, [{ type: 'text', text: 'Something else entirely, to take the only sequence.' }], 2);
      const other = await run(c, parts(pattern(24, 24, 5, [3, 3])));
      expect(other.reusedTokens).toBe(0);
      // a warmed prefix holding an image, continued by its key
      const warm = await c.prefillOnly([{ type: 'text', text: HEAD }, { type: 'image', image: wide }, { type: 'text', text: ' Now:' }]);
      const child = await c.generate({ parentKey: warm.key, prompt: ' what is it?', maxTokens: 6, temperature: 0, emitTokenIds: true, logprobs: 3 }).result;
      expect(child.reusedTokens).toBe(warm.tokens);
      same(child, await run(cold, parts(wide, ' Now: what is it?'), 6));
      // n choices share the prompt's KV (image included); greedy choices equal the cold run
      const want = await run(cold, parts(wide, ' Choose.'));
      const gens = await ctx.generateChoices({ n: 2, prompt: parts(wide, ' Choose.'), maxTokens: 8, temperature: 0, emitTokenIds: true, logprobs: 3 });
      for (const g of gens) same(await g.result, want);
    } finally {
      await c.dispose();
    }
  });

  it('disk tier: a state carries its position runs; one without them (the old format) is recomputed, never misread', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llamux-qwenvl-'));
    const withDisk = async <T>(f: (c: Context) => Promise<T>): Promise<T> => {
      const c = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, cacheDir: dir, cacheRamMb: 16, toolCallMarkers: false });
      try {
        return await f(c);
      } finally {
        await c.dispose();
      }
    };
    try {
      const first = await withDisk((c) => run(c, parts(wide), 4));
      const read = await withDisk((c) => run(c, parts(wide), 4));
      expect(read.cache.tier).toBe('disk');
      expect(read.reusedTokens).toBe(read.promptTokens - 1);
      same(read, first);
      // every state file of this run, rewritten without its position runs
      let stripped = 0;
      for (const n of readdirSync(dir, { recursive: true }).map(String)) {
        const path = join(dir, n);
        if (!statSync(path).isFile()) continue;
        const head = readFileSync(path).subarray(0, 8).toString('latin1');
        if (head !== 'LMXKVST1') continue;
        stripPositions(path);
        stripped++;
      }
      expect(stripped).toBeGreaterThan(0);
      const again = await withDisk((c) => run(c, parts(wide), 4));
      expect(again.reusedTokens).toBe(0);
      same(again, first);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('context shift never cuts an image: a kept range ending inside one drops it whole, and generation goes on', { timeout: 120_000 }, async () => {
    const t = await native.tokenizeMedia(model.nativeHandle(), [HEAD, wide, TAIL], false, false, 16e6, 300);
    const start = t.runs[0]!; // where the image's 15 ids start
    expect(t.runs[1]).toBe(15);
    const c = await model.createContext({ contextSize: 256, sequences: 1, threads: 2, toolCallMarkers: false });
    try {
      const maxTokens = c.settings.sequenceContextSize - t.tokens.length + 8; // one shift
      for (const overflow of ['shift', 'reprefill'] as const) {
        // nKeep ends 4 embeddings into the image: without the rule the window would keep part
        // of it, which can never be decoded again (the request would fail)
        const r = await c.generate({ prompt: parts(wide), maxTokens, temperature: 0, overflow, nKeep: start + 4 }).result;
        expect(r.finishReason).toBe('length');
        expect(r.generatedTokens).toBe(maxTokens);
        expect(r.shiftedTokens).toBeGreaterThanOrEqual(15);
      }
    } finally {
      await c.dispose();
    }
  });

  it('n-gram drafts after an M-RoPE image are verified at the image\'s positions: the output equals plain decoding', async () => {
    const c = await model.createContext({ contextSize: 512, sequences: 1, threads: 2, speculative: 'ngram', toolCallMarkers: false });
    try {
      // after the image, text that copies the zoo model's own greedy chain: n-gram drafts match
      const head = Array.from(model.tokenize(' river stone cloud garden silver window market forest', { addSpecial: false }));
      const chain = zooGreedyChain(text.successors, head.at(-1)!, 40);
      const image = Array.from((await native.tokenizeMedia(model.nativeHandle(), [HEAD, square, ' Then:'], false, false, 16e6, 300)).tokens);
      const prompt = Int32Array.from([...image, ...head, ...chain, ...head.slice(0, 3), ...head]);
      const spec = await c.generate({ prompt, maxTokens: 30, temperature: 0, emitTokenIds: true }).result;
      const plain = await cold.generate({ prompt, maxTokens: 30, temperature: 0, emitTokenIds: true }).result;
      expect(spec.timings.draftedTokens).toBeGreaterThan(0);
      expect(spec.timings.acceptedTokens).toBeGreaterThan(0);
      expect(Array.from(spec.tokens!)).toEqual(Array.from(plain.tokens!));
    } finally {
      await c.dispose();
    }
  });
});
