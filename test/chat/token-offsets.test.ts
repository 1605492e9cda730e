// Token positions of text offsets (src/chat/token-offsets.ts, prompt-cache breakpoints) on real
// vocabularies of several kinds (byte-level BPE with and without a BOS, SentencePiece with its
// space prefix, Gemma's): at every character offset of a text with multi-byte characters, the
// position is the longest run of the whole text's tokens whose detokenized text lies within the
// text up to that offset (the tokenizer's own detokenize, not the pieces the code reads).
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenBoundaryAt } from '../../src/chat/token-offsets.js';
import { loadModel, type Model } from '../../src/index.js';
import { llamaCppModelsDir } from '../helpers/paths.js';

const TEXT = 'Héllo wörld, the naïve café ☕ tests:\n  {"a": 1, "b": [true]}\n\tdone.';

describe.each(['llama-bpe', 'llama-spm', 'gemma-4', 'qwen35', 'phi-3'])('tokenBoundaryAt on the %s vocabulary', (vocab) => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(join(llamaCppModelsDir, `ggml-vocab-${vocab}.gguf`), { vocabOnly: true });
  });
  afterAll(async () => {
    await model?.dispose();
  });

  it('gives the last token boundary at or before every offset, and every token at the end', () => {
    const tokens = model.tokenize(TEXT, { addSpecial: true, parseSpecial: false });
    const lead = model.tokenize('', { addSpecial: true, parseSpecial: false });
    let skip = 0;
    while (skip < lead.length && tokens[skip] === lead[skip]) skip++;
    const spelled = (k: number) => model.detokenize(tokens.subarray(skip, k), { special: false });
    const pieces = new Map<number, Uint8Array>();
    let checked = 0;
    for (let at = 0; at <= TEXT.length; at++) {
      if ((TEXT.charCodeAt(at - 1) & 0xfc00) === 0xd800) continue; // inside a surrogate pair: no offset of a rendered mark
      // the longest run whose text lies within (a run ending inside a character's bytes does not)
      let expected = skip;
      for (let k = skip + 1; k <= tokens.length; k++) if (TEXT.slice(0, at).startsWith(spelled(k))) expected = k;
      expect(tokenBoundaryAt(model, tokens, TEXT, at, skip, pieces), `offset ${at}`).toBe(expected);
      checked++;
    }
    expect(checked).toBeGreaterThan(60);
    // the whole text: every token (an end-of-text token some vocabularies append spells nothing)
    let end = tokens.length;
    while (end > skip && spelled(end) === spelled(end - 1)) end--;
    expect(tokenBoundaryAt(model, tokens, TEXT, TEXT.length, skip, pieces)).toBeGreaterThanOrEqual(end);
  });
});
