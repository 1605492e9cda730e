import { describe, expect, it } from 'vitest';
import { f16ToNumber } from '../../src/gguf/f16.js';
import { decodeQ4_0, encodeQ4_0, Q4_0_BLOCK_BYTES } from '../../src/gguf/quant.js';
import { expectWithin, f16RoundingBound } from '../helpers/tolerance.js';

describe('encodeQ4_0()', () => {
  it('writes 18-byte blocks: the f16 scale (largest-magnitude value / -8), then nibbles of elements j and j+16', () => {
    const x = new Float32Array(32);
    for (let i = 0; i < 32; i++) x[i] = (i - 8) / 2; // largest magnitude 11.5 at i = 31
    const out = new Uint8Array(Q4_0_BLOCK_BYTES);
    encodeQ4_0(x, out);
    const d = f16ToNumber(out[0]! | (out[1]! << 8));
    expectWithin(d, 11.5 / -8, f16RoundingBound(11.5 / -8)); // the scale is stored as float16
    // element 31 is the maximum: x/d = -8 -> q = 0 (high nibble of byte 15)
    expect(out[2 + 15]! >>> 4).toBe(0);
    // element 8 is 0 -> q = 8 (low nibble of byte 8)
    expect(out[2 + 8]! & 0x0f).toBe(8);
  });

  it('decodes to within one step of every value', () => {
    const x = new Float32Array(96).map((_, i) => Math.sin(i * 1.7) * (1 + (i % 5)));
    const out = new Uint8Array(3 * Q4_0_BLOCK_BYTES);
    encodeQ4_0(x, out);
    const y = decodeQ4_0(out, 96);
    for (let b = 0; b < 3; b++) {
      const d = Math.abs(f16ToNumber(out[b * 18]! | (out[b * 18 + 1]! << 8)));
      for (let i = b * 32; i < b * 32 + 32; i++) expect(Math.abs(y[i]! - x[i]!)).toBeLessThanOrEqual(d * 0.5 + 1e-3);
    }
  });

  it('throws a RangeError when the count is not a multiple of 32', () => {
    expect(() => encodeQ4_0(new Float32Array(33), new Uint8Array(36))).toThrow('Expected a multiple of 32 values for Q4_0 but received 33');
  });
});
