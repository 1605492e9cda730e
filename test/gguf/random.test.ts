import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeQ8_0 } from '../../src/gguf/quant.js';
import { readGgufFile, readTensorBytes } from '../../src/gguf/reader.js';
import { llamaParameterCount, RANDOM_MODEL_PRESETS, randomModelSpec, syntheticVocab, writeRandomModel } from '../../src/gguf/random.js';
import { tempDir } from './helpers.js';
import { q8_0Max } from '../helpers/tolerance.js';

let dir = '';
let cleanup: () => Promise<void> = async () => {};
beforeAll(async () => {
  ({ dir, cleanup } = await tempDir());
});
afterAll(() => cleanup());

const sha = async (path: string): Promise<string> => createHash('sha256').update(await readFile(path)).digest('hex');

describe('writeRandomModel()', () => {
  it.each(['Q8_0', 'F16'] as const)('writes the tiny preset in %s with llama tensor names, shapes and metadata', async (type) => {
    const path = join(dir, `tiny-${type}.gguf`);
    const info = await writeRandomModel(path, { preset: 'tiny', type });
    const s = RANDOM_MODEL_PRESETS.tiny;
    expect(info).toMatchObject({ ...s, type, path });
    const file = await readGgufFile(path);
    expect(file.fileSize).toBe(info.fileSize);
    expect(file.tensors).toHaveLength(3 + 9 * s.nLayer);
    const byName = new Map(file.tensors.map((t) => [t.name, t]));
    expect(byName.get('token_embd.weight')).toMatchObject({ shape: [s.nEmbd, s.nVocab], type });
    expect(byName.get('output_norm.weight')).toMatchObject({ shape: [s.nEmbd], type: 'F32' });
    expect(byName.get('blk.1.ffn_down.weight')).toMatchObject({ shape: [s.nFf, s.nEmbd], type });
    expect(byName.get('blk.0.attn_k.weight')).toMatchObject({ shape: [s.nEmbd, s.nEmbd], type });
    const count = file.tensors.reduce((n, t) => n + t.elementCount, 0);
    expect(count).toBe(info.parameterCount);
    expect(file.metadata.get('llama.block_count')!.value).toBe(s.nLayer);
    expect(file.metadata.get('general.file_type')!.value).toBe(type === 'Q8_0' ? 7 : 1);
    expect((file.metadata.get('tokenizer.ggml.tokens')!.value as string[]).length).toBe(s.nVocab);
    expect(file.metadata.get('tokenizer.chat_template')!.type).toBe('string');
    if (type === 'Q8_0') {
      const w = decodeQ8_0(await readTensorBytes(path, byName.get('blk.0.attn_q.weight')!), s.nEmbd * s.nEmbd);
      const max = w.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
      expect(max).toBeGreaterThan(0.015);
      expect(max).toBeLessThanOrEqual(q8_0Max(0.02)); // uniform in ±0.02, then Q8_0
    }
  });

  it('is deterministic for a seed and changes with it', async () => {
    const a = join(dir, 'a.gguf');
    const b = join(dir, 'b.gguf');
    const c = join(dir, 'c.gguf');
    await writeRandomModel(a, { preset: 'tiny', seed: 7 });
    await writeRandomModel(b, { preset: 'tiny', seed: 7 });
    await writeRandomModel(c, { preset: 'tiny', seed: 8 });
    expect(await sha(a)).toBe(await sha(b));
    expect(await sha(a)).not.toBe(await sha(c));
  });

  it('accepts shape overrides and grouped-query attention', async () => {
    const path = join(dir, 'gqa.gguf');
    const info = await writeRandomModel(path, { preset: 'tiny', nLayer: 1, nHead: 8, nHeadKv: 2, type: 'F32', chatTemplate: null });
    const file = await readGgufFile(path);
    expect(file.tensors.find((t) => t.name === 'blk.0.attn_v.weight')!.shape).toEqual([128, 32]);
    expect(file.metadata.has('tokenizer.chat_template')).toBe(false);
    expect(info.parameterCount).toBe(file.tensors.reduce((n, t) => n + t.elementCount, 0));
  });

  it('rejects impossible shapes', () => {
    expect(() => randomModelSpec({ preset: 'tiny', nHead: 3 })).toThrow('Expected nEmbd to be a multiple of nHead');
    expect(() => randomModelSpec({ preset: 'tiny', nFf: 100 })).toThrow('Expected nEmbd and nFf to be multiples of 32');
    expect(() => randomModelSpec({ preset: 'tiny', nLayer: 0 })).toThrow('Expected nLayer to be a positive integer but received 0');
  });

  it('sizes the 250m preset at about 250 M parameters', () => {
    const n = llamaParameterCount(RANDOM_MODEL_PRESETS['250m']);
    expect(n).toBe(258_507_776);
  });
});

describe('syntheticVocab()', () => {
  it('makes a 32,000-token SentencePiece vocabulary whose pieces build from their prefixes', () => {
    const v = syntheticVocab(32000);
    expect(v.size).toBe(32000);
    expect(new Set(v.entries.map((e) => e.text)).size).toBe(32000);
    expect(v.find('<|im_start|>')).toBe(259);
    const ids = v.tokenize('the cat sat on the mat', { addSpecial: false });
    expect(ids.every((id) => v.entries[id]!.type === 'NORMAL')).toBe(true);
    expect(v.detokenize(ids)).toBe('the cat sat on the mat');
  });
});
