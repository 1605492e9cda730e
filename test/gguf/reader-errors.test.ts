import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GgufFormatError } from '../../src/gguf/errors.js';
import { parseGguf, readGgufFile } from '../../src/gguf/reader.js';
import { val } from '../../src/gguf/types.js';
import { encodeGguf } from '../../src/gguf/writer.js';
import { kitchenSink, tempDir } from './helpers.js';

/** Little-endian byte builder for hand-made (often invalid) files. */
class Raw {
  readonly bytes: number[] = [];
  u32(v: number): this {
    for (let i = 0; i < 4; i++) this.bytes.push((v >>> (8 * i)) & 0xff);
    return this;
  }
  u64(v: bigint | number): this {
    let b = BigInt(v);
    for (let i = 0; i < 8; i++) {
      this.bytes.push(Number(b & 0xffn));
      b >>= 8n;
    }
    return this;
  }
  str(s: string): this {
    const b = Buffer.from(s);
    this.u64(b.length);
    this.bytes.push(...b);
    return this;
  }
  header(nTensors: number | bigint, nKv: number | bigint, version = 3): this {
    return this.u32(0x46554747).u32(version).u64(nTensors).u64(nKv);
  }
  pad(n = 64): this {
    for (let i = 0; i < n; i++) this.bytes.push(0);
    return this;
  }
  build(): Uint8Array {
    return Uint8Array.from(this.bytes);
  }
}

function expectInvalid(bytes: Uint8Array, message?: string | RegExp): GgufFormatError {
  let error: unknown;
  try {
    parseGguf(bytes);
  } catch (err) {
    error = err;
  }
  expect(error).toBeInstanceOf(GgufFormatError);
  const e = error as GgufFormatError;
  expect(e.code).toBe('MODEL_INVALID');
  expect(e.name).toBe('GgufFormatError');
  expect(e).toBeInstanceOf(Error);
  expect(typeof e.offset).toBe('number');
  if (message !== undefined) expect(e.message).toMatch(message);
  return e;
}

let dir = '';
let cleanup: () => Promise<void> = async () => {};
beforeAll(async () => {
  ({ dir, cleanup } = await tempDir());
});
afterAll(() => cleanup());

describe('parseGguf() on truncated input', () => {
  const whole = encodeGguf(kitchenSink());

  it('parses the whole file', () => {
    expect(parseGguf(whole).tensors).toHaveLength(4);
  });

  it('throws MODEL_INVALID at every truncation offset, header and data alike', () => {
    const file = parseGguf(whole);
    const last = file.tensors[file.tensors.length - 1]!;
    const end = last.fileOffset + last.byteSize; // only the final padding may be missing, as for llama.cpp
    expect(end).toBe(whole.length - 16);
    for (let n = 0; n < end; n++) {
      expectInvalid(whole.subarray(0, n), /^Invalid GGUF file: .*\(at byte \d+\)$/);
    }
    expect(parseGguf(whole.subarray(0, end)).tensors).toHaveLength(4);
  });

  it('reports where the header was cut', () => {
    const e = expectInvalid(whole.subarray(0, 30), /tensor count 4 exceeds what the file can hold \(0\) \(at byte 8\)/);
    expect(e.offset).toBe(8);
    expectInvalid(new Raw().u32(0x46554747).u32(3).u64(0).u32(0).build(), /truncated while reading metadata count: needs 8 bytes, 4 left \(at byte 16\)/);
    expectInvalid(whole.subarray(0, 700), /(truncated while reading|exceeds)/);
  });

  it('accepts a header-only prefix when told the file size and not to check data', () => {
    const file = parseGguf(whole, { checkData: false });
    const headerOnly = whole.subarray(0, file.dataOffset);
    expect(parseGguf(headerOnly, { checkData: false }).tensors).toHaveLength(4);
  });
});

describe('readGgufFile() on truncated files', () => {
  it('throws MODEL_INVALID for files cut in the header, in the data and at zero bytes', async () => {
    const whole = encodeGguf(kitchenSink());
    const header = parseGguf(whole).dataOffset;
    for (const n of [0, 3, 8, 24, 100, header - 1, header + 1, whole.length - 17]) {
      const path = join(dir, `cut-${n}.gguf`);
      await writeFile(path, whole.subarray(0, n));
      await expect(readGgufFile(path)).rejects.toMatchObject({ name: 'GgufFormatError', code: 'MODEL_INVALID' });
    }
  });

  it('rejects a file with the missing file system error, not MODEL_INVALID', async () => {
    await expect(readGgufFile(join(dir, 'nope.gguf'))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});

describe('parseGguf() on garbage and hostile headers', () => {
  it.each([
    ['bad magic', new Raw().u32(0x12345678).u32(3).u64(0).u64(0).build(), /bad magic/],
    ['version 1', new Raw().header(0, 0, 1).build(), /version 1 is not supported/],
    ['version 4', new Raw().header(0, 0, 4).build(), /unsupported GGUF version 4/],
    ['a big-endian file', new Raw().header(0, 0, 0x03000000).build(), /big-endian/],
    ['a huge tensor count', new Raw().header(1n << 62n, 0).build(), /tensor count \d+ exceeds/],
    ['a huge metadata count', new Raw().header(0, (1n << 64n) - 1n).build(), /metadata count \d+ exceeds/],
    ['a huge key length', new Raw().header(0, 1).u64(1n << 62n).build(), /key of metadata entry 0 length \d+ exceeds/],
    ['a huge string length', new Raw().header(0, 1).str('k').u32(8).u64((1n << 64n) - 1n).pad(8).build(), /value of "k" length \d+ exceeds/],
    ['a huge array length', new Raw().header(0, 1).str('k').u32(9).u32(4).u64(1n << 40n).pad(8).build(), /length of array "k" \d+ exceeds/],
    ['a huge string-array length', new Raw().header(0, 1).str('k').u32(9).u32(8).u64(1000).pad(64).build(), /length of array "k" 1000 exceeds/],
    ['an unknown value type', new Raw().header(0, 1).str('k').u32(13).pad(8).build(), /unknown value type 13/],
    ['a nested array', new Raw().header(0, 1).str('k').u32(9).u32(9).u64(0).build(), /nested arrays are not supported/],
    ['an unknown array item type', new Raw().header(0, 1).str('k').u32(9).u32(99).u64(0).build(), /unknown array item type 99/],
    ['a duplicate key', new Raw().header(0, 2).str('k').u32(0).pad(1).str('k').u32(0).pad(1).build(), /duplicate metadata key "k"/],
    ['an alignment of the wrong type', new Raw().header(0, 1).str('general.alignment').u32(10).u64(32).build(), /general.alignment must be a u32, not u64/],
    ['an alignment that is not a power of two', new Raw().header(0, 1).str('general.alignment').u32(4).u32(24).build(), /not a power of two/],
    ['an alignment of zero', new Raw().header(0, 1).str('general.alignment').u32(4).u32(0).build(), /not a power of two/],
    ['too many dimensions', new Raw().header(1, 0).str('t').u32(5).pad(64).build(), /has 5 dimensions/],
    ['a negative dimension', new Raw().header(1, 0).str('t').u32(1).u64(1n << 63n).pad(64).build(), /negative dimension/],
    ['too many elements', new Raw().header(1, 0).str('t').u32(2).u64(1n << 40n).u64(1n << 40n).pad(64).build(), /too many elements/],
    ['an unknown ggml type', new Raw().header(1, 0).str('t').u32(1).u64(32).u32(4).u64(0).pad(64).build(), /unknown ggml type 4/],
    ['a row that is not whole blocks', new Raw().header(1, 0).str('t').u32(1).u64(33).u32(8).u64(0).pad(64).build(), /not a multiple of 32/],
    ['a misplaced data offset', new Raw().header(1, 0).str('t').u32(1).u64(8).u32(0).u64(32).pad(64).build(), /data offset 32, expected 0/],
    ['a duplicate tensor name', new Raw().header(2, 0).str('t').u32(1).u64(8).u32(0).u64(0).str('t').u32(1).u64(8).u32(0).u64(32).pad(96).build(), /duplicate tensor name "t"/],
    ['a tensor name of 64 bytes', new Raw().header(1, 0).str('n'.repeat(64)).u32(1).u64(8).u32(0).u64(0).pad(64).build(), /64 bytes or longer/],
    ['tensor data past the end', new Raw().header(1, 0).str('t').u32(1).u64(1024).u32(0).u64(0).pad(64).build(), /tensor data is truncated/],
  ])('throws MODEL_INVALID for %s', (_label, bytes, message) => {
    expectInvalid(bytes, message);
  });

  it('throws only GgufFormatError on random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 512 }), (bytes) => {
        expectInvalid(bytes);
      }),
      { numRuns: 500 },
    );
  });

  it('throws only GgufFormatError (or parses) on random bytes after a valid magic and version', () => {
    const prefix = new Raw().u32(0x46554747).u32(3).build();
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2048 }), (tail) => {
        const bytes = new Uint8Array(prefix.length + tail.length);
        bytes.set(prefix);
        bytes.set(tail, prefix.length);
        try {
          parseGguf(bytes);
        } catch (err) {
          expect(err).toBeInstanceOf(GgufFormatError);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('throws only GgufFormatError (or parses) when bytes of a valid file are corrupted', () => {
    const whole = encodeGguf(kitchenSink([['x', val.string('y')]]));
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat({ max: whole.length - 1 }), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 8 }),
        (edits) => {
          const bytes = whole.slice();
          for (const [at, b] of edits) bytes[at] = b;
          try {
            parseGguf(bytes);
          } catch (err) {
            expect(err).toBeInstanceOf(GgufFormatError);
          }
        },
      ),
      { numRuns: 1000 },
    );
  });
});
