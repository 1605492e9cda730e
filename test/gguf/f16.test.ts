import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeF16, f16FromF32Bits, f16FromNumber, f16ToNumber } from '../../src/gguf/f16.js';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function bitsOf(v: number): number {
  f32[0] = v;
  return u32[0]!;
}

describe('f16FromNumber()', () => {
  it.each([
    [0, 0x0000],
    [-0, 0x8000],
    [1, 0x3c00],
    [-2, 0xc000],
    [0.5, 0x3800],
    [1 / 3, 0x3555],
    [0.1, 0x2e66],
    [65504, 0x7bff],
    [65519.99, 0x7bff],
    [65520, 0x7c00],
    [1e6, 0x7c00],
    [-1e6, 0xfc00],
    [Infinity, 0x7c00],
    [-Infinity, 0xfc00],
    [2 ** -14, 0x0400],
    [2 ** -24, 0x0001],
    [1023 * 2 ** -24, 0x03ff],
    [2 ** -25, 0x0000],
    [-(2 ** -25), 0x8000],
    [2 ** -25 + 2 ** -40, 0x0001],
    [1.5 * 2 ** -24, 0x0002],
    [2.5 * 2 ** -24, 0x0002],
    [1e-10, 0x0000],
    [1 + 2 ** -11, 0x3c00],
    [1 + 3 * 2 ** -11, 0x3c02],
    [1023.5 * 2 ** -24, 0x0400],
  ])('encodes %d as bits %i', (value, bits) => {
    expect(f16FromNumber(value)).toBe(bits);
  });

  it('encodes NaN as a quiet NaN and keeps its sign', () => {
    expect(f16FromNumber(NaN)).toBe(0x7e00);
    expect(f16FromNumber(-NaN) & 0x7fff).toBe(0x7e00);
    expect(Number.isNaN(f16ToNumber(f16FromNumber(NaN)))).toBe(true);
  });

  it('rounds the exact double once (no double rounding through float32)', () => {
    const v = 1 + 2 ** -11 + 2 ** -40; // just above a tie; Math.fround(v) is the tie itself
    expect(Math.fround(v)).toBe(1 + 2 ** -11);
    expect(f16FromNumber(v)).toBe(0x3c01);
  });

  it('round-trips every finite and infinite half exactly', () => {
    for (let h = 0; h < 0x10000; h++) {
      const exp = (h >>> 10) & 0x1f;
      if (exp === 0x1f && (h & 0x3ff) !== 0) continue; // NaN
      expect(f16FromNumber(f16ToNumber(h))).toBe(h);
    }
  });

  it('rounds midpoints to even and anything off a midpoint to the nearer half', () => {
    for (let h = 0; h < 0x7bff; h++) {
      const lo = f16ToNumber(h);
      const hi = f16ToNumber(h + 1);
      const mid = (lo + hi) / 2;
      const even = (h & 1) === 0 ? h : h + 1;
      expect(f16FromNumber(mid)).toBe(even);
      expect(f16FromNumber(-mid)).toBe(even | 0x8000);
      const eps = (hi - lo) / 1024;
      expect(f16FromNumber(mid - eps)).toBe(h);
      expect(f16FromNumber(mid + eps)).toBe(h + 1);
    }
  });
});

describe('f16FromF32Bits()', () => {
  it('agrees with f16FromNumber on every half, midpoint and neighbour as float32', () => {
    for (let h = 0; h < 0x7c00; h++) {
      const v = f16ToNumber(h);
      const next = f16ToNumber(h + 1);
      for (const x of [v, (v + next) / 2, Math.fround((v + next) / 2) + (next - v) / 4]) {
        const f = Math.fround(x);
        expect(f16FromF32Bits(bitsOf(f))).toBe(f16FromNumber(f));
        expect(f16FromF32Bits(bitsOf(-f))).toBe(f16FromNumber(-f));
      }
    }
  });

  it('agrees with f16FromNumber on random float32 bit patterns', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), (bits) => {
        u32[0] = bits;
        expect(f16FromF32Bits(bits)).toBe(f16FromNumber(f32[0]!));
      }),
      { numRuns: 20000 },
    );
  });
});

describe('encodeF16()', () => {
  it('writes little-endian halves from numbers and from a Float32Array alike', () => {
    const values = [1, -2, 65504, 2 ** -24];
    const a = new Uint8Array(10);
    const b = new Uint8Array(10);
    encodeF16(values, a, 2);
    encodeF16(Float32Array.from(values), b, 2);
    expect([...a]).toEqual([0, 0, 0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00]);
    expect(b).toEqual(a);
  });
});
