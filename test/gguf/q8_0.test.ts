import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { f16FromNumber, f16ToNumber } from '../../src/gguf/f16.js';
import { decodeQ8_0, encodeQ8_0, Q8_0_BLOCK_BYTES } from '../../src/gguf/quant.js';

describe('encodeQ8_0()', () => {
  it('writes 34-byte blocks: the f16 scale max|x|/127, then round(x/d) as int8', () => {
    const x = new Float32Array(32);
    for (let i = 0; i < 32; i++) x[i] = (i - 16) / 4; // max |x| = 4 at i = 0
    const out = new Uint8Array(Q8_0_BLOCK_BYTES);
    encodeQ8_0(x, out);
    const d = Math.fround(4 / 127);
    expect(out[0]! | (out[1]! << 8)).toBe(f16FromNumber(d));
    const id = Math.fround(1 / d);
    for (let i = 0; i < 32; i++) {
      const q = (out[2 + i]! << 24) >> 24;
      const v = Math.fround(x[i]! * id);
      expect(q).toBe(Math.sign(v) * Math.round(Math.abs(v)));
    }
    expect((out[2]! << 24) >> 24).toBe(-127);
  });

  it('rounds halves away from zero like roundf', () => {
    const x = new Float32Array(32);
    x[0] = 127; // d = 1, 1/d = 1
    x[1] = 2.5;
    x[2] = -2.5;
    x[3] = 0.5;
    x[4] = -0.5;
    x[5] = -127;
    const out = new Uint8Array(34);
    encodeQ8_0(x, out);
    const q = [...out.subarray(2, 8)].map((b) => (b << 24) >> 24);
    expect(q).toEqual([127, 3, -3, 1, -1, -127]);
    expect(f16ToNumber(out[0]! | (out[1]! << 8))).toBe(1);
  });

  it('encodes an all-zero block with scale 0', () => {
    const out = new Uint8Array(34).fill(0xaa);
    encodeQ8_0(new Float32Array(32), out);
    expect([...out]).toEqual(new Array(34).fill(0));
  });

  it('writes several blocks at the given offsets', () => {
    const x = new Float32Array(96).map((_, i) => Math.sin(i));
    const whole = new Uint8Array(3 * 34);
    encodeQ8_0(x, whole);
    const part = new Uint8Array(10 + 2 * 34);
    encodeQ8_0(x, part, 32, 64, 10);
    expect(part.subarray(10)).toEqual(whole.subarray(34));
  });

  it('throws a RangeError when the count is not a multiple of 32', () => {
    expect(() => encodeQ8_0(new Float32Array(33), new Uint8Array(68))).toThrow(
      'Expected a multiple of 32 values for Q8_0 but received 33',
    );
  });

  it('decodes to within half a step of every value', () => {
    fc.assert(
      fc.property(fc.array(fc.float({ min: -1000, max: 1000, noNaN: true }), { minLength: 32, maxLength: 32 }), (vals) => {
        const x = Float32Array.from(vals);
        const out = new Uint8Array(34);
        encodeQ8_0(x, out);
        const y = decodeQ8_0(out, 32);
        const d = f16ToNumber(out[0]! | (out[1]! << 8));
        const amax = Math.max(...x.map(Math.abs));
        for (let i = 0; i < 32; i++) {
          // d is rounded to f16 (relative error 2^-11, or absolute 2^-25 once subnormal), times |q| ≤ 127.
          expect(Math.abs(y[i]! - x[i]!)).toBeLessThanOrEqual(d / 2 + amax * 2 ** -10 + 127 * 2 ** -24);
        }
      }),
      { numRuns: 300 },
    );
  });
});
