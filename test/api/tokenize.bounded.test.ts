// The bounded tokenizer (native/model/tokenizer.h) against llama.cpp's own single llama_tokenize call
// (the raw testing hook), on real vocabularies: the tiny Llama 2 model and llama.cpp's vocab-only
// files (SPM, BPE, and Gemma 4's many user-defined tokens). Small piece sizes put many cuts into
// short texts; a seeded property test covers random and adversarial texts.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { native } from '../../src/native/binding.js';
import { loadModel, type Model } from '../../src/index.js';
import { llamaCppModelsDir, tinyModelPath } from '../helpers/paths.js';

const VOCABS: Array<[string, string]> = [
  ['llama-2-tiny (SPM)', tinyModelPath],
  ['llama-spm', join(llamaCppModelsDir, 'ggml-vocab-llama-spm.gguf')],
  ['phi-3 (SPM)', join(llamaCppModelsDir, 'ggml-vocab-phi-3.gguf')],
  ['qwen2 (BPE)', join(llamaCppModelsDir, 'ggml-vocab-qwen2.gguf')],
  ['gemma-4', join(llamaCppModelsDir, 'ggml-vocab-gemma-4.gguf')],
];

const FIXED = [
  '',
  ' ',
  'Hello world',
  '  leading and trailing spaces  ',
  'line one\nline two\n\ttabbed',
  'naïve café — déjà vu, Ελληνικά, русский, 中文, 日本語, 한국어',
  'emoji: 🎉🚀👍🏽 and a family 👨‍👩‍👧',
  '😀'.repeat(300),
  '</s><s>'.repeat(200),
  '<s>Hi</s> <unk> <|im_start|>user\nhi<|im_end|> <start_of_turn> <tool_call>{"a":1}</tool_call>',
  'a'.repeat(500),
  ' '.repeat(300),
  '▁'.repeat(50) + ' ▁ x▁y',
  '{"json": [1, 2.5, true, null], "nested": {"k": "v"}}'.repeat(20),
  'x'.repeat(100) + '\u0301'.repeat(40) + '𝔘𝔫𝔦𝔠𝔬𝔡𝔢'.repeat(20),
];

// Pieces a hostile or unlucky text is made of.
const ALPHABET = [
  'a', 'b', 'the', ' ', '  ', '\n', '\t', 'Hello', ' world', '▁', '😀', '🎉', '👍🏽', '\u200d', '中', '文', '𝔘', 'é', 'e\u0301',
  '<s>', '</s>', '<unk>', '<', '>', '/', 's', '<|im_start|>', '<|im_end|>', '<tool_call>', '</tool_call>', '<start_of_turn>',
  '0', '123', '.', ',', '{"', '":', '\u00a0', '\r\n', '\ufffd', 'ǅ', 'ﬁ',
];

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomText(r: () => number): string {
  const n = Math.floor(r() * 120);
  let out = '';
  for (let i = 0; i < n; i++) {
    const piece = ALPHABET[Math.floor(r() * ALPHABET.length)]!;
    // Long runs too: the texts llama.cpp is slowest on.
    out += r() < 0.1 ? piece.repeat(1 + Math.floor(r() * 40)) : piece;
  }
  return out;
}

const raw = (m: Model, text: string, addSpecial: boolean, parseSpecial: boolean): number[] =>
  Array.from(native.testing.tokenizeRaw(m.nativeHandle(), text, addSpecial, parseSpecial));
const bounded = (m: Model, text: string, addSpecial: boolean, parseSpecial: boolean, pieceBytes: number): number[] =>
  Array.from(native.testing.tokenizeBounded(m.nativeHandle(), text, addSpecial, parseSpecial, pieceBytes));

describe.each(VOCABS)('bounded tokenizer equals one llama_tokenize call: %s', (_name, path) => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(path, { vocabOnly: true });
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('on fixed texts, every piece size, with and without special tokens', () => {
    for (const text of FIXED) {
      for (const [addSpecial, parseSpecial] of [[false, false], [true, false], [false, true], [true, true]] as const) {
        const want = raw(model, text, addSpecial, parseSpecial);
        for (const piece of [1, 3, 16, 64, 4096]) {
          expect(bounded(model, text, addSpecial, parseSpecial, piece), `${JSON.stringify(text.slice(0, 40))} piece ${piece} add ${addSpecial} parse ${parseSpecial}`).toEqual(want);
        }
        expect(Array.from(model.tokenize(text, { addSpecial, parseSpecial }))).toEqual(want);
      }
    }
  });

  it('on 400 random and adversarial texts (seeded)', () => {
    const r = rng(0x5eed ^ path.length);
    for (let i = 0; i < 400; i++) {
      const text = randomText(r);
      const parseSpecial = r() < 0.5;
      const addSpecial = r() < 0.5;
      const piece = 1 + Math.floor(r() * 48);
      expect(bounded(model, text, addSpecial, parseSpecial, piece), `case ${i}: ${JSON.stringify(text)} piece ${piece} parse ${parseSpecial}`).toEqual(raw(model, text, addSpecial, parseSpecial));
    }
  });
});

describe('bounded tokenizer: known ids, speed on the worst inputs, abort', () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(tinyModelPath, { vocabOnly: true });
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('cuts long text into pieces that give the known Llama 2 ids', () => {
    // ▁Hello = 15043, ▁world = 3186 (the real Llama 2 vocabulary).
    const text = Array.from({ length: 2000 }, () => 'Hello world').join(' ');
    const want = Array.from({ length: 4000 }, (_, i) => (i % 2 === 0 ? 15043 : 3186));
    expect(Array.from(model.tokenize(text, { addSpecial: false }))).toEqual(want);
    expect(bounded(model, text, false, false, 5)).toEqual(want);
    // </s> = 2, <s> = 1 with special parsing.
    const specials = '</s><s>'.repeat(50_000);
    const ids = model.tokenize(specials, { addSpecial: false, parseSpecial: true });
    expect(ids.length).toBe(100_000);
    expect(ids.every((t, i) => t === (i % 2 === 0 ? 2 : 1))).toBe(true);
  });

  it('tokenizes the worst inputs of the cost table in linear time', () => {
    // One llama_tokenize call: 13.4 s for 256 KB of </s><s> with special parsing, 214 s for
    // 512 KB of emoji (docs/server.md). Bounded: well under a second for 880 KB.
    const cases: Array<[string, string, boolean]> = [
      ['</s><s> parsed', '</s><s>'.repeat(Math.ceil(880_000 / 7)), true],
      ['</s><s> as text', '</s><s>'.repeat(Math.ceil(880_000 / 7)), false],
      ['emoji', '😀'.repeat(220_000), false],
      ['emoji and special', '😀</s>'.repeat(110_000), true],
    ];
    for (const [name, text, parseSpecial] of cases) {
      const t0 = performance.now();
      const ids = model.tokenize(text, { addSpecial: true, parseSpecial });
      const ms = performance.now() - t0;
      expect(ids.length, name).toBeGreaterThan(100_000);
      expect(ms, `${name}: ${ms.toFixed(0)} ms`).toBeLessThan(5000);
    }
  });

  it('tokenizeAsync and tokenize({ signal }) stop within 100 ms of an abort', async () => {
    const text = '😀 Hello world, '.repeat(400_000); // ~6.8 MB: seconds of work
    const ac = new AbortController();
    const p = model.tokenizeAsync(text, { signal: ac.signal });
    await new Promise((r) => setTimeout(r, 100));
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    ac.abort();
    const err = await p.then(() => undefined, (e: unknown) => e);
    const latency = performance.now() - t0;
    expect(err).toMatchObject({ code: 'ABORTED', name: 'AbortError' });
    expect(latency).toBeLessThan(100);
    // The native work stopped too: the process is idle afterwards.
    await new Promise((r) => setTimeout(r, 400));
    const cpu = process.cpuUsage(cpu0);
    expect((cpu.user + cpu.system) / 1000).toBeLessThan(250);

    const ac2 = new AbortController();
    const q = model.tokenize(text, { signal: ac2.signal });
    expect(q).toBeInstanceOf(Promise);
    setTimeout(() => ac2.abort(new Error('stop')), 50);
    await expect(q).rejects.toMatchObject({ code: 'ABORTED' });
    const already = AbortSignal.abort();
    await expect(model.tokenizeAsync('hi', { signal: already })).rejects.toMatchObject({ code: 'ABORTED' });
    expect(Array.from(await model.tokenizeAsync('Hello world', { addSpecial: false }))).toEqual([15043, 3186]);
  });
});
