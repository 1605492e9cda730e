/** IEEE 754 binary16 conversion (ggml's `ggml_fp16_t`), exact round-to-nearest-even. */

const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
// The exponent lives in the high word; its index depends on the platform's byte order.
const HI = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 1 : 0;

/**
 * Encodes a number as binary16 bits with round-to-nearest, ties-to-even, rounding the exact
 * (double) value once: subnormals are produced below 2^-14, values of 65520 and above become
 * infinity, `-0` keeps its sign, and any NaN becomes a quiet NaN (0x7e00) with its sign.
 */
export function f16FromNumber(value: number): number {
  if (value !== value) {
    f64[0] = value;
    return ((u32[HI]! >>> 16) & 0x8000) | 0x7e00;
  }
  const sign = value < 0 || (value === 0 && 1 / value < 0) ? 0x8000 : 0;
  const a = sign ? -value : value;
  if (a >= 65520) return sign | 0x7c00;
  if (a < 6.103515625e-5) {
    // Subnormal (or zero): units of 2^-24; scaling by a power of two is exact.
    const t = a * 16777216;
    let h = Math.floor(t);
    const frac = t - h;
    if (frac > 0.5 || (frac === 0.5 && (h & 1) === 1)) h++;
    return sign | h; // h may reach 0x400, the smallest normal, which is the right encoding
  }
  f64[0] = a;
  const exp = ((u32[HI]! >>> 20) & 0x7ff) - 1023; // -14..15
  const t = a * 2 ** (10 - exp); // [1024, 2048), exact
  let m = Math.floor(t);
  const frac = t - m;
  if (frac > 0.5 || (frac === 0.5 && (m & 1) === 1)) m++;
  // m === 2048 carries into the exponent, which is the right encoding (up to infinity).
  return sign | (((exp + 15) << 10) + (m - 1024));
}

/** Decodes binary16 bits to a number (exact). */
export function f16ToNumber(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 5.960464477539063e-8; // 2^-24
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1024 + mant) * 2 ** (exp - 25);
}

/**
 * Encodes float32 bits (as a u32) as binary16 bits; the same result as
 * `f16FromNumber(float32 value)`, with integer operations only.
 */
export function f16FromF32Bits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return sign | (abs > 0x7f800000 ? 0x7e00 : 0x7c00);
  if (abs >= 0x477ff000) return sign | 0x7c00; // ≥ 65520 rounds to infinity
  if (abs < 0x38800000) {
    // below 2^-14: subnormal; 2^-25 and less round to zero (2^-25 is a tie, zero is even)
    if (abs <= 0x33000000) return sign;
    const shift = 126 - (abs >>> 23); // 14..24
    const m = (abs & 0x7fffff) | 0x800000;
    let h = m >>> shift;
    const rem = m & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1) === 1)) h++;
    return sign | h;
  }
  let h = (abs - 0x38000000) >>> 13; // re-bias the exponent, keep 10 mantissa bits
  const rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) === 1)) h++;
  return sign | h;
}

/** Encodes `src` as little-endian binary16 into `dst` starting at byte `offset`. */
export function encodeF16(src: ArrayLike<number>, dst: Uint8Array, offset = 0): void {
  if (src instanceof Float32Array) {
    const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
    for (let i = 0, o = offset; i < bits.length; i++, o += 2) {
      const h = f16FromF32Bits(bits[i]!);
      dst[o] = h & 0xff;
      dst[o + 1] = h >>> 8;
    }
    return;
  }
  for (let i = 0, o = offset; i < src.length; i++, o += 2) {
    const h = f16FromNumber(src[i]!);
    dst[o] = h & 0xff;
    dst[o + 1] = h >>> 8;
  }
}
