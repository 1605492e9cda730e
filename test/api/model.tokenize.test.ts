import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, TokenAttribute, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

describe('Model tokenizer (Llama 2 SentencePiece vocabulary)', () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(tinyModelPath, { vocabOnly: true });
  });
  afterAll(async () => {
    await model.dispose();
  });

  const samples = [
    'Hello world',
    'The quick brown fox jumps over the lazy dog.',
    '  leading and trailing spaces  ',
    'line one\nline two\n\ttabbed',
    'naïve café — déjà vu',
    'Ελληνικά, русский, 中文, 日本語, 한국어',
    'emoji: 🎉🚀👍🏽 and a family 👨‍👩‍👧',
    'math ∑ ∫ √ ≠ ≤ ≥ and symbols ✓ ✗ ©',
    '{"json": [1, 2.5, true, null], "nested": {"k": "v"}}',
  ];

  it.each(samples)('round-trips %j through tokenize and detokenize', (text) => {
    const tokens = model.tokenize(text);
    expect(tokens[0]).toBe(model.vocab.bos);
    expect(model.detokenize(tokens)).toBe(text);
    const bare = model.tokenize(text, { addSpecial: false });
    expect(bare[0]).not.toBe(model.vocab.bos);
    expect(model.detokenize(bare)).toBe(text);
  });

  it('tokenizes with the real vocabulary', () => {
    expect(Array.from(model.tokenize('Hello world', { addSpecial: false }))).toEqual([15043, 3186]);
    expect(model.tokenInfo(15043).text).toBe('▁Hello');
  });

  it('concatenated token pieces equal the detokenized bytes, even when a piece is part of a character', () => {
    const text = 'emoji 🎉 and 中文';
    const tokens = model.tokenize(text, { addSpecial: false });
    const pieces = Array.from(tokens, (t) => Buffer.from(model.tokenPiece(t)));
    const joined = Buffer.concat(pieces).toString('utf8');
    expect(joined.trimStart()).toBe(text);
    // 🎉 is not in the vocabulary: it falls back to byte tokens, each an incomplete character.
    const byteTokens = Array.from(tokens).filter((t) => (model.tokenInfo(t).attributes & TokenAttribute.BYTE) !== 0);
    expect(byteTokens.length).toBeGreaterThanOrEqual(4);
    expect(model.tokenPiece(byteTokens[0]!).length).toBe(1);
  });

  it('parses special-token text only when parseSpecial is on', () => {
    const text = '<s>Hi</s>';
    const plain = model.tokenize(text, { addSpecial: false });
    expect(Array.from(plain)).not.toContain(model.vocab.bos);
    expect(Array.from(plain)).not.toContain(model.vocab.eos);
    const parsed = model.tokenize(text, { addSpecial: false, parseSpecial: true });
    expect(parsed[0]).toBe(model.vocab.bos);
    expect(parsed.at(-1)).toBe(model.vocab.eos);
    expect(model.detokenize(parsed)).toBe('Hi');
    // SentencePiece puts its space prefix on the word after <s>; rendered with the control tokens.
    expect(model.detokenize(parsed, { special: true })).toMatch(/^<s> ?Hi<\/s>$/);
  });

  it('reports token attributes and end-of-generation tokens', () => {
    const bos = model.tokenInfo(model.vocab.bos);
    expect(bos.text).toBe('<s>');
    expect(bos.attributes & TokenAttribute.CONTROL).toBeTruthy();
    expect(bos.isControl).toBe(true);
    expect(model.tokenInfo(model.vocab.eos).isEog).toBe(true);
    expect(model.tokenInfo(15043).attributes & TokenAttribute.NORMAL).toBeTruthy();
  });

  it('rejects token ids outside the vocabulary with INVALID_ARGUMENT', () => {
    expect(() => model.detokenize([1, 32000])).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/32000 at index 1 is outside the vocabulary/) }));
    expect(() => model.tokenPiece(-1)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => model.tokenInfo(1e9)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => model.detokenize([1.5])).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => model.tokenize(42 as unknown as string)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('handles the empty string and very long text', () => {
    expect(Array.from(model.tokenize('', { addSpecial: false }))).toEqual([]);
    const long = 'lorem ipsum dolor sit amet '.repeat(5000);
    const tokens = model.tokenize(long, { addSpecial: false });
    expect(tokens.length).toBeGreaterThan(10_000);
    expect(model.detokenize(tokens)).toBe(long);
  });
});
