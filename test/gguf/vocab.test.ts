import { describe, expect, it } from 'vitest';
import { buildSpmVocab, sp, words } from '../../src/gguf/vocab.js';

describe('buildSpmVocab()', () => {
  const vocab = buildSpmVocab({
    special: [
      { text: '<|im_start|>', type: 'CONTROL' },
      { text: '<tool_call>', type: 'USER_DEFINED' },
    ],
    words: sp('Hello| world|!'),
  });

  it('lays out <unk>, <s>, </s>, the 256 byte tokens, the special tokens, then the words and their prefixes', () => {
    expect(vocab.entries.slice(0, 3).map((e) => [e.text, e.type])).toEqual([
      ['<unk>', 'UNKNOWN'],
      ['<s>', 'CONTROL'],
      ['</s>', 'CONTROL'],
    ]);
    expect(vocab.piece(3)).toBe('<0x00>');
    expect(vocab.piece(13)).toBe('<0x0A>');
    expect(vocab.piece(258)).toBe('<0xFF>');
    expect(vocab.entries[13]!.type).toBe('BYTE');
    expect(vocab.id('<|im_start|>')).toBe(259);
    expect(vocab.id('<tool_call>')).toBe(260);
    expect(vocab.id('Hello')).toBe(261);
    expect(vocab.id('▁world')).toBe(262);
    expect(vocab.id('!')).toBe(263);
    expect(vocab.find('Hell')).toBeGreaterThan(263);
    expect(vocab.find('▁worl')).toBeGreaterThan(263);
    expect(vocab.entries[261]!.score).toBeGreaterThan(vocab.entries[262]!.score);
    expect([vocab.bos, vocab.eos, vocab.unk]).toEqual([1, 2, 0]);
  });

  it('tokenizes words into their pieces, with BOS when asked', () => {
    expect(vocab.tokenize('Hello world!')).toEqual([1, 261, 262, 263]);
    expect(vocab.tokenize('Hello world!', { addSpecial: false })).toEqual([261, 262, 263]);
  });

  it('falls back to byte tokens for characters not in the vocabulary', () => {
    expect(vocab.tokenize('Hé', { addSpecial: false })).toEqual([vocab.id('H'), 3 + 0xc3, 3 + 0xa9]);
    expect(vocab.detokenize(vocab.tokenize('Hé\n', { addSpecial: false }))).toBe('Hé\n');
  });

  it('parses CONTROL tokens only with parseSpecial, USER_DEFINED tokens always', () => {
    const text = '<|im_start|>Hello<tool_call>';
    expect(vocab.tokenize(text, { addSpecial: false })).toEqual([259, 261, 260]);
    const plain = vocab.tokenize(text, { addSpecial: false, parseSpecial: false });
    expect(plain).not.toContain(259);
    expect(plain[plain.length - 1]).toBe(260);
  });

  it('renders CONTROL tokens only when special is on, and everything else always', () => {
    const ids = [1, 259, 261, 262, 260, 3 + 0x0a];
    expect(vocab.detokenize(ids)).toBe('<s><|im_start|>Hello world<tool_call>\n');
    expect(vocab.detokenize(ids, false)).toBe('Hello world<tool_call>\n');
  });

  it('adds a space prefix at the start and after special tokens when add_space_prefix is on', () => {
    const v = buildSpmVocab({ special: [{ text: '<x>', type: 'USER_DEFINED' }], words: sp(' a| b'), addSpacePrefix: true });
    expect(v.tokenize('a<x>b', { addSpecial: false })).toEqual([v.id('▁a'), v.id('<x>'), v.id('▁b')]);
  });

  it('merges the highest-scoring pair first, like llama.cpp', () => {
    const ab = buildSpmVocab({ words: ['ab', 'bc'] });
    expect(ab.tokenize('abc', { addSpecial: false })).toEqual([ab.id('ab'), 3 + 0x63]);
    const bc = buildSpmVocab({ words: ['bc', 'ab'] });
    expect(bc.tokenize('abc', { addSpecial: false })).toEqual([bc.id('a'), bc.id('bc')]);
  });

  it('writes the tokenizer metadata llama.cpp reads', () => {
    const keys = Object.fromEntries(vocab.metadata());
    expect(keys['tokenizer.ggml.model']).toEqual({ type: 'string', value: 'llama' });
    expect(keys['tokenizer.ggml.tokens']).toMatchObject({ type: 'array', itemType: 'string' });
    expect(keys['tokenizer.ggml.scores']).toMatchObject({ type: 'array', itemType: 'f32' });
    expect(keys['tokenizer.ggml.token_type']).toMatchObject({ type: 'array', itemType: 'i32' });
    const types = keys['tokenizer.ggml.token_type']!.value as number[];
    expect([types[0], types[1], types[3], types[259], types[260], types[261]]).toEqual([2, 3, 6, 3, 4, 1]);
    expect(keys['tokenizer.ggml.add_space_prefix']).toEqual({ type: 'bool', value: false });
  });

  it('pads with UNUSED tokens up to minSize', () => {
    const v = buildSpmVocab({ words: ['a'], minSize: 300 });
    expect(v.size).toBe(300);
    expect(v.entries[299]!.type).toBe('UNUSED');
  });

  it('throws for duplicate special tokens and an unknown EOS', () => {
    expect(() => buildSpmVocab({ special: [{ text: '<s>', type: 'CONTROL' }], words: [] })).toThrow('Duplicate special token "<s>"');
    expect(() => buildSpmVocab({ words: ['a'], eos: '<eot>' })).toThrow('EOS token "<eot>" is not in the vocabulary');
  });
});

describe('sp() and words()', () => {
  it('split text into pieces with ▁ for spaces', () => {
    expect(sp('I| will| check|.')).toEqual(['I', '▁will', '▁check', '.']);
    expect(words('Once upon a time')).toEqual(['Once', '▁upon', '▁a', '▁time']);
  });
});
