import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseGguf } from '../../src/gguf/reader.js';
import { val } from '../../src/gguf/types.js';
import type { GgufTensorSpec, GgufValue } from '../../src/gguf/types.js';
import { encodeGguf, planGguf } from '../../src/gguf/writer.js';
import { normalize } from './helpers.js';

const LONE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const text = fc.string({ unit: 'binary', maxLength: 24 }).filter((s) => !LONE.test(s));

const int = (min: number, max: number): fc.Arbitrary<number> => fc.integer({ min, max });
const items = {
  u8: int(0, 255),
  i8: int(-128, 127),
  u16: int(0, 65535),
  i16: int(-32768, 32767),
  u32: int(0, 0xffffffff),
  i32: int(-0x80000000, 0x7fffffff),
  f32: fc.float(),
  f64: fc.double(),
  u64: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
  i64: fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }),
  bool: fc.boolean(),
  string: text,
} as const;
type ItemType = keyof typeof items;
const itemTypes = Object.keys(items) as ItemType[];

const scalar: fc.Arbitrary<GgufValue> = fc.oneof(
  ...itemTypes.map((t) => (items[t] as fc.Arbitrary<unknown>).map((value) => ({ type: t, value }) as GgufValue)),
);
const array: fc.Arbitrary<GgufValue> = fc.oneof(
  ...itemTypes.map((t) =>
    fc.array(items[t] as fc.Arbitrary<unknown>, { maxLength: 12 }).map((value) => ({ type: 'array', itemType: t, value }) as GgufValue),
  ),
);
const metadata = fc.uniqueArray(fc.tuple(text.filter((k) => k !== 'general.alignment'), fc.oneof(scalar, array)), {
  selector: ([k]) => k,
  maxLength: 16,
});

describe('GGUF metadata round trip (property)', () => {
  it('reads back every key, type and value as written, in order', () => {
    fc.assert(
      fc.property(metadata, (entries) => {
        const file = parseGguf(encodeGguf({ metadata: entries, tensors: [] }));
        expect([...file.metadata.keys()]).toEqual(entries.map(([k]) => k));
        for (const [key, value] of entries) {
          const read = file.metadata.get(key)!;
          expect(read.type).toBe(value.type);
          expect(normalize(read)).toEqual(normalize(value));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('reads back tensor infos as planned, with any power-of-two alignment', () => {
    const tensor = fc.record({
      type: fc.constantFrom('F32', 'F16', 'Q8_0'),
      rows: fc.integer({ min: 1, max: 4 }),
      blocks: fc.integer({ min: 1, max: 3 }),
      extra: fc.array(fc.integer({ min: 1, max: 3 }), { maxLength: 2 }),
    });
    fc.assert(
      fc.property(fc.array(tensor, { minLength: 1, maxLength: 6 }), fc.constantFrom(1, 8, 32, 64, 256), (ts, alignment) => {
        const tensors: GgufTensorSpec[] = ts.map((t, i) => {
          const shape = [32 * t.blocks, t.rows, ...t.extra];
          const n = shape.reduce((a, b) => a * b, 1);
          return { name: `t${i}.weight`, shape, type: t.type, data: new Float32Array(n).fill(i) };
        });
        const spec = { metadata: [['general.alignment', val.u32(alignment)]] as Array<[string, GgufValue]>, tensors };
        const bytes = encodeGguf(spec);
        const layout = planGguf(spec);
        const file = parseGguf(bytes);
        expect(file.alignment).toBe(alignment);
        expect(file.dataOffset).toBe(layout.dataOffset);
        expect(file.dataOffset % alignment).toBe(0);
        expect(file.tensors.map((t) => ({ name: t.name, shape: t.shape, type: t.type, offset: t.offset, byteSize: t.byteSize }))).toEqual(
          layout.tensors,
        );
        for (const t of file.tensors) expect(t.offset % alignment).toBe(0);
      }),
      { numRuns: 150 },
    );
  });
});
