import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BERT_DIMS, writeBertModel } from '../../src/gguf/zoo/embedding.js';
import { LlamuxError, loadModel, setLogger } from '../../src/index.js';
import { llamaCppModelsDir, projectRoot, tempDir, tinyModelPath } from '../helpers/paths.js';

async function expectCode(p: Promise<unknown>, code: string, text?: RegExp): Promise<LlamuxError> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(LlamuxError);
  expect((err as LlamuxError).code).toBe(code);
  if (text) expect((err as LlamuxError).message).toMatch(text);
  return err as LlamuxError;
}

describe('loadModel()', () => {
  let dir: string;
  const good = readFileSync(tinyModelPath);

  beforeAll(() => {
    setLogger('silent');
    dir = tempDir('load');
  });
  afterAll(() => setLogger('warn'));

  it('loads a GGUF model and reports its metadata and vocabulary', async () => {
    const progress: number[] = [];
    const model = await loadModel(tinyModelPath, { onProgress: (p) => progress.push(p) });
    expect(model.metadata.architecture).toBe('llama');
    expect(model.metadata.layers).toBe(1);
    expect(model.metadata.embeddingSize).toBe(8);
    expect(model.metadata.trainingContextSize).toBe(4096);
    expect(model.metadata.sizeBytes).toBeGreaterThan(0);
    expect(model.metadata.parameters).toBeGreaterThan(0);
    expect(model.metadata.fingerprint).toMatch(/^[0-9a-f]{32}$/);
    expect(model.getMetadata('general.architecture')).toBe('llama');
    expect(model.getMetadata('no.such.key')).toBeUndefined();
    expect(model.vocab.size).toBe(32000);
    expect(model.vocab.bos).toBe(1);
    expect(model.vocab.eos).toBe(2);
    expect(model.vocab.eogTokens).toContain(2);
    expect(model.isEndOfGeneration(2)).toBe(true);
    expect(model.isEndOfGeneration(15043)).toBe(false);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)).toBe(1);
    await model.dispose();
  });

  it('rejects a missing path with MODEL_NOT_FOUND', async () => {
    await expectCode(loadModel(join(dir, 'nope.gguf')), 'MODEL_NOT_FOUND', /No model file at/);
  });

  it('rejects a directory with MODEL_NOT_FOUND', async () => {
    await expectCode(loadModel(dir), 'MODEL_NOT_FOUND', /is a directory/);
  });

  it('rejects an empty file with MODEL_INVALID', async () => {
    const p = join(dir, 'empty.gguf');
    writeFileSync(p, '');
    await expectCode(loadModel(p), 'MODEL_INVALID', /empty/);
  });

  it('rejects bytes that are not GGUF with MODEL_INVALID', async () => {
    const p = join(dir, 'text.gguf');
    writeFileSync(p, 'this is not a model at all, just some text\n'.repeat(100));
    await expectCode(loadModel(p), 'MODEL_INVALID', /not a valid GGUF/);
  });

  it.each([4, 8, 24, 100, 1000, 50_000, good.length / 2, good.length - 1])(
    'rejects a GGUF truncated to %i bytes with MODEL_INVALID',
    async (size) => {
      const p = join(dir, `trunc-${size}.gguf`);
      writeFileSync(p, good.subarray(0, Math.floor(size)));
      await expectCode(loadModel(p), 'MODEL_INVALID');
    },
  );

  it('rejects an unknown architecture with MODEL_INVALID naming it', async () => {
    const bytes = Buffer.from(good);
    // general.architecture = "llama": patch the value in place to an unknown name of the same length.
    const key = Buffer.from('general.architecture');
    const at = bytes.indexOf(key);
    expect(at).toBeGreaterThan(0);
    const valueAt = bytes.indexOf(Buffer.from('llama'), at + key.length);
    bytes.write('zzzzz', valueAt, 'latin1');
    const p = join(dir, 'unknown-arch.gguf');
    writeFileSync(p, bytes);
    await expectCode(loadModel(p), 'MODEL_INVALID', /zzzzz/);
  });

  it('rejects a BERT file whose token_types tensor is F16 with UNSUPPORTED (ggml would abort on its first batch)', async () => {
    const p = join(dir, 'bert-f16-token-types.gguf');
    await writeBertModel(p, llamaCppModelsDir, { dims: BERT_DIMS, tokenTypes: 'F16' });
    await expectCode(loadModel(p), 'UNSUPPORTED', /token_types\.weight as f16/);
  });

  it('validates options at the edge with INVALID_ARGUMENT', async () => {
    await expectCode(loadModel(tinyModelPath, { gpuLayers: 1.5 }), 'INVALID_ARGUMENT', /gpuLayers/);
    await expectCode(loadModel(tinyModelPath, { vocabonly: true } as never), 'INVALID_ARGUMENT', /unknown option "vocabonly"/);
    await expectCode(loadModel('' as string), 'INVALID_ARGUMENT', /non-empty string/);
  });

  it('rejects with ABORTED when the signal is already aborted', async () => {
    const ac = new AbortController();
    ac.abort();
    const err = await expectCode(loadModel(tinyModelPath, { signal: ac.signal }), 'ABORTED');
    expect(err.name).toBe('AbortError');
  });

  it('rejects with ABORTED when the signal fires during loading', async () => {
    const ac = new AbortController();
    const p = loadModel(tinyModelPath, { signal: ac.signal, onProgress: () => ac.abort() });
    await expectCode(p, 'ABORTED');
  });

  it('loads the vocabulary only when asked, and refuses a context on it', async () => {
    const model = await loadModel(tinyModelPath, { vocabOnly: true });
    expect(model.tokenize('Hello', { addSpecial: false })).toEqual(Int32Array.from([15043]));
    await expectCode(model.createContext(), 'UNSUPPORTED', /vocabOnly/);
    await model.dispose();
  });

  it('reads the metadata of vocabulary-only files (no layers) without aborting', async () => {
    const vocabFile = join(llamaCppModelsDir, 'ggml-vocab-qwen2.gguf');
    const model = await loadModel(vocabFile, { vocabOnly: true });
    expect(model.metadata.layers).toBeGreaterThanOrEqual(0);
    expect(model.metadata.chatTemplate === null || typeof model.metadata.chatTemplate === 'string').toBe(true);
    // this vocab-only file splits <tool_call> into several BPE tokens
    expect(model.tokenize('<tool_call>', { addSpecial: false, parseSpecial: true }).length).toBeGreaterThan(1);
    await model.dispose();
  });

  it('still loads and generates in the same process after every failure above', async () => {
    const copy = join(dir, 'copy.gguf');
    mkdirSync(dir, { recursive: true });
    copyFileSync(tinyModelPath, copy);
    const model = await loadModel(copy);
    const ctx = await model.createContext({ contextSize: 128 });
    const r = await ctx.complete({ prompt: 'Hello', maxTokens: 5, temperature: 0 });
    expect(r.generatedTokens).toBe(5);
    expect(r.finishReason).toBe('length');
    await model.dispose();
  });

  it('gives DISPOSED for any call on a disposed model', async () => {
    const model = await loadModel(tinyModelPath);
    await model.dispose();
    await model.dispose(); // idempotent
    expect(model.disposed).toBe(true);
    for (const call of [
      () => model.tokenize('x'),
      () => model.detokenize([1]),
      () => model.tokenPiece(1),
      () => model.tokenInfo(1),
      () => model.vocab,
      () => model.metadata,
    ]) {
      expect(call).toThrow(expect.objectContaining({ code: 'DISPOSED' }));
    }
    await expectCode(model.createContext(), 'DISPOSED');
  });
});
