import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { f16ToNumber } from '../../src/gguf/f16.js';
import { decodeQ8_0 } from '../../src/gguf/quant.js';
import { parseGguf, readGgufFile, readTensorBytes } from '../../src/gguf/reader.js';
import { val } from '../../src/gguf/types.js';
import type { GgufSpec } from '../../src/gguf/types.js';
import { encodeGguf, planGguf, writeGgufFile } from '../../src/gguf/writer.js';
import { everyValueType, kitchenSink, normalize, tempDir } from './helpers.js';
import { expectWithin, f16RoundingBound, q8_0Error } from '../helpers/tolerance.js';

let dir = '';
let cleanup: () => Promise<void> = async () => {};
beforeAll(async () => {
  ({ dir, cleanup } = await tempDir());
});
afterAll(() => cleanup());

describe('encodeGguf() and parseGguf()', () => {
  it('round-trips every metadata value type in order', () => {
    const spec = kitchenSink();
    const file = parseGguf(encodeGguf(spec));
    expect(file.version).toBe(3);
    const written = everyValueType();
    expect([...file.metadata.keys()]).toEqual(written.map(([k]) => k));
    for (const [key, value] of written) {
      const read = file.metadata.get(key)!;
      expect(read.type).toBe(value.type);
      if (value.type === 'array' && read.type === 'array') expect(read.itemType).toBe(value.itemType);
      expect(normalize(read)).toEqual(normalize(value));
    }
  });

  it('writes tensor infos with 32-byte aligned offsets and a 32-byte aligned data section', () => {
    const bytes = encodeGguf(kitchenSink());
    const file = parseGguf(bytes);
    expect(file.alignment).toBe(32);
    expect(file.dataOffset % 32).toBe(0);
    expect(file.tensors.map((t) => [t.name, t.shape, t.type, t.byteSize, t.offset])).toEqual([
      ['a.f32', [3], 'F32', 12, 0],
      ['b.f16', [4, 2], 'F16', 16, 32],
      ['c.q8_0', [64, 2], 'Q8_0', 4 * 34, 64],
      ['d.q4_k', [256], 'Q4_K', 144, 224],
    ]);
    for (const t of file.tensors) expect(t.fileOffset).toBe(file.dataOffset + t.offset);
    expect(bytes.length).toBe(file.dataOffset + 224 + 160);
    expect(file.dataSize).toBe(224 + 160);
    expect(planGguf(kitchenSink()).fileSize).toBe(bytes.length);
  });

  it('respects general.alignment', () => {
    const spec = kitchenSink([['general.alignment', val.u32(64)]]);
    const file = parseGguf(encodeGguf(spec));
    expect(file.alignment).toBe(64);
    expect(file.dataOffset % 64).toBe(0);
    expect(file.tensors.map((t) => t.offset)).toEqual([0, 64, 128, 320]);
  });

  it('encodes tensor data in F32, F16 and Q8_0', () => {
    const bytes = encodeGguf(kitchenSink());
    const file = parseGguf(bytes);
    const at = (name: string): Uint8Array => {
      const t = file.tensors.find((x) => x.name === name)!;
      return bytes.subarray(t.fileOffset, t.fileOffset + t.byteSize);
    };
    const a = at('a.f32');
    expect([...new Float32Array(a.slice().buffer)]).toEqual([1, -2, 3.5]);
    const b = at('b.f16');
    const halves = Array.from({ length: 8 }, (_, i) => f16ToNumber(b[2 * i]! | (b[2 * i + 1]! << 8)));
    expect(halves.slice(0, 6)).toEqual([0, 1, -1, 0.5, 65504, 2 ** -24]);
    expect(Object.is(halves[6], -0)).toBe(true);
    expectWithin(halves[7]!, 1e-3, f16RoundingBound(1e-3));
    const c = decodeQ8_0(at('c.q8_0'), 128);
    for (let i = 0; i < 128; i++) expectWithin(c[i]!, Math.sin(i), q8_0Error(1), `c[${i}]`); // |sin| ≤ 1 in every block
    expect([...at('d.q4_k')]).toEqual(new Array(144).fill(7));
    // padding between tensors is zero
    const t0 = file.tensors[0]!;
    expect([...bytes.subarray(t0.fileOffset + 12, t0.fileOffset + 32)]).toEqual(new Array(20).fill(0));
  });

  it('is deterministic', () => {
    expect(encodeGguf(kitchenSink())).toEqual(encodeGguf(kitchenSink()));
  });

  it('writes a file without tensors (padded like gguf.cpp; the data section starts right after the header)', () => {
    const bytes = encodeGguf({ metadata: [['k', val.string('v')]], tensors: [] });
    const file = parseGguf(bytes);
    expect(file.tensors).toEqual([]);
    expect(file.dataOffset).toBe(4 + 4 + 8 + 8 + (8 + 1) + 4 + (8 + 1));
    expect(bytes.length).toBe(64);
  });
});

describe('writeGgufFile()', () => {
  it('streams the same bytes as encodeGguf, asking generators for ascending chunks', async () => {
    const calls: Array<[number, number]> = [];
    const spec: GgufSpec = {
      ...kitchenSink(),
      tensors: [
        ...kitchenSink().tensors,
        {
          name: 'e.big',
          shape: [96, 10],
          type: 'F16',
          data: (start, out) => {
            calls.push([start, out.length]);
            for (let i = 0; i < out.length; i++) out[i] = (start + i) / 7;
          },
        },
      ],
    };
    const path = join(dir, 'stream.gguf');
    const layout = await writeGgufFile(path, spec, { chunkElements: 100 });
    const bytes = await readFile(path);
    expect(bytes.length).toBe(layout.fileSize);
    expect(new Uint8Array(bytes)).toEqual(encodeGguf(spec, { chunkElements: 64 }));
    const file = await readGgufFile(path);
    const big = file.tensors.find((t) => t.name === 'e.big')!;
    const data = await readTensorBytes(path, big);
    // 959 / 7 = 137: a multiple of float16's step 2^-3 in [128, 256), stored exactly
    expect(f16ToNumber(data[2 * 959]! | (data[2 * 959 + 1]! << 8))).toBe(959 / 7);
    // chunked writes: 96-element chunks (100 rounded down to a multiple of 32), contiguous
    const firstRun = [];
    let next = 0;
    calls.length = 0;
    await writeGgufFile(join(dir, 'stream2.gguf'), spec, { chunkElements: 100 });
    for (const [start, n] of calls) {
      firstRun.push(n);
      expect(start).toBe(next);
      next += n;
    }
    expect(next).toBe(960);
    expect(Math.max(...firstRun)).toBe(96);
  });

  it('leaves no file behind when the spec is invalid', async () => {
    const path = join(dir, 'invalid.gguf');
    await expect(
      writeGgufFile(path, { metadata: [], tensors: [{ name: 'x', shape: [33], type: 'Q8_0', data: new Float32Array(33) }] }),
    ).rejects.toThrow('Expected the row length of a Q8_0 tensor to be a multiple of 32 but received 33');
    await expect(readFile(path)).rejects.toThrow(/ENOENT/);
  });

  it('reads headers larger than the first read window', async () => {
    const many = Array.from({ length: 60000 }, (_, i) => `token-${i}-${'x'.repeat(i % 40)}`);
    const path = join(dir, 'big-header.gguf');
    await writeGgufFile(path, {
      metadata: [['tokenizer.ggml.tokens', val.array('string', many)]],
      tensors: [{ name: 't', shape: [32], type: 'F32', data: new Float32Array(32) }],
    });
    const file = await readGgufFile(path);
    const tokens = file.metadata.get('tokenizer.ggml.tokens')!;
    expect(tokens.type === 'array' && tokens.value.length).toBe(60000);
    expect(file.dataOffset).toBeGreaterThan(1 << 20);
    expect(file.tensors[0]!.name).toBe('t');
  });
});

describe('writer validation', () => {
  const t = (over: object): GgufSpec => ({
    metadata: [],
    tensors: [{ name: 'x', shape: [32], type: 'F32', data: new Float32Array(32), ...over }],
  });
  it.each([
    ['a duplicate key', { metadata: [['k', val.u8(1)], ['k', val.u8(2)]], tensors: [] }, 'Duplicate metadata key "k"'],
    ['an out-of-range u8', { metadata: [['k', val.u8(256)]], tensors: [] }, 'Expected an integer in [0, 255] for "k" (u8) but received 256'],
    ['a fractional i32', { metadata: [['k', val.i32(1.5)]], tensors: [] }, 'Expected an integer in [-2147483648, 2147483647] for "k" (i32) but received 1.5'],
    ['an out-of-range array item', { metadata: [['k', val.array('i8', [1, 200])]], tensors: [] }, 'Expected an integer in [-128, 127] for "k"[1] (i8) but received 200'],
    ['a negative u64', { metadata: [['k', val.u64(-1n)]], tensors: [] }, 'Expected a bigint in [0, 2^64) for "k" (u64) but received -1'],
    ['a lone surrogate', { metadata: [['k', val.string('a\uD800b')]], tensors: [] }, 'Expected a well-formed string (no lone surrogates) for a GGUF string'],
    ['a non-power-of-two alignment', { metadata: [['general.alignment', val.u32(48)]], tensors: [] }, 'Expected general.alignment to be a power of two but received 48'],
    ['an alignment of the wrong type', { metadata: [['general.alignment', val.u64(32)]], tensors: [] }, 'Expected general.alignment to be a u32 but received u64'],
    ['a duplicate tensor', { metadata: [], tensors: [t({}).tensors[0], t({}).tensors[0]] }, 'Duplicate tensor name "x"'],
    ['a long tensor name', t({ name: 'n'.repeat(64) }), 'Expected a tensor name of 1 to 63 bytes'],
    ['too many dimensions', t({ shape: [32, 1, 1, 1, 1], data: new Float32Array(32) }), 'Expected 1 to 4 dimensions for tensor "x"'],
    ['a wrong value count', t({ data: new Float32Array(31) }), 'Expected 32 values for tensor "x" but received 31'],
    ['a wrong raw size', t({ type: 'Q4_0', data: new Uint8Array(17) }), 'Expected 18 raw bytes for tensor "x" but received 17'],
    ['values for a type it cannot encode', t({ type: 'Q5_0' }), 'only F32, F16, Q8_0 and Q4_0 can be encoded from values'],
  ] as Array<[string, GgufSpec, string]>)('throws for %s', (_label, spec, message) => {
    expect(() => encodeGguf(spec)).toThrow(message);
  });
});
