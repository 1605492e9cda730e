import { f16FromNumber, f16ToNumber } from './f16.js';

/** Elements per Q8_0 block (`QK8_0`). */
export const Q8_0_BLOCK_ELEMENTS = 32;
/** Bytes per Q8_0 block: an f16 scale then 32 int8 quants (`block_q8_0`). */
export const Q8_0_BLOCK_BYTES = 34;

/**
 * Quantizes `count` values (a multiple of 32) from `src[srcOffset…]` into Q8_0 blocks at
 * `dst[dstOffset…]`, exactly as ggml's `quantize_row_q8_0_ref`: d = max|x| / 127 in float32,
 * stored as f16; q = round-half-away-from-zero(x · (1/d)) computed in float32.
 */
export function encodeQ8_0(
  src: ArrayLike<number>,
  dst: Uint8Array,
  srcOffset = 0,
  count = src.length - srcOffset,
  dstOffset = 0,
): void {
  if (count % Q8_0_BLOCK_ELEMENTS !== 0) {
    throw new RangeError(`Expected a multiple of 32 values for Q8_0 but received ${count}`);
  }
  const fround = Math.fround;
  let o = dstOffset;
  for (let b = srcOffset, end = srcOffset + count; b < end; b += Q8_0_BLOCK_ELEMENTS) {
    let amax = 0;
    for (let j = 0; j < Q8_0_BLOCK_ELEMENTS; j++) {
      const v = fround(src[b + j]!);
      const av = v < 0 ? -v : v;
      if (av > amax) amax = av;
    }
    const d = fround(amax / 127);
    const id = d !== 0 ? fround(1 / d) : 0;
    const h = f16FromNumber(d);
    dst[o] = h & 0xff;
    dst[o + 1] = h >>> 8;
    o += 2;
    for (let j = 0; j < Q8_0_BLOCK_ELEMENTS; j++) {
      const x0 = fround(fround(src[b + j]!) * id);
      const q = x0 < 0 ? -Math.round(-x0) : Math.round(x0);
      dst[o++] = q & 0xff;
    }
  }
}

/** Decodes Q8_0 blocks back to numbers (d · q), for tests and inspection. */
export function decodeQ8_0(src: Uint8Array, count: number, srcOffset = 0): Float32Array {
  if (count % Q8_0_BLOCK_ELEMENTS !== 0) {
    throw new RangeError(`Expected a multiple of 32 values for Q8_0 but received ${count}`);
  }
  const out = new Float32Array(count);
  let o = srcOffset;
  for (let i = 0; i < count; i += Q8_0_BLOCK_ELEMENTS) {
    const d = f16ToNumber(src[o]! | (src[o + 1]! << 8));
    o += 2;
    for (let j = 0; j < Q8_0_BLOCK_ELEMENTS; j++) {
      const q = (src[o++]! << 24) >> 24;
      out[i + j] = d * q;
    }
  }
  return out;
}

/** Elements per Q4_0 block (`QK4_0`). */
export const Q4_0_BLOCK_ELEMENTS = 32;
/** Bytes per Q4_0 block: an f16 scale then 16 bytes of 4-bit quants (`block_q4_0`). */
export const Q4_0_BLOCK_BYTES = 18;

/**
 * Quantizes `count` values (a multiple of 32) into Q4_0 blocks, as ggml's
 * `quantize_row_q4_0_ref`: d = (the value of largest magnitude) / -8, stored as f16;
 * q = min(15, trunc(x/d + 8.5)); byte j holds element j (low nibble) and j + 16 (high nibble).
 */
export function encodeQ4_0(
  src: ArrayLike<number>,
  dst: Uint8Array,
  srcOffset = 0,
  count = src.length - srcOffset,
  dstOffset = 0,
): void {
  if (count % Q4_0_BLOCK_ELEMENTS !== 0) {
    throw new RangeError(`Expected a multiple of 32 values for Q4_0 but received ${count}`);
  }
  const fround = Math.fround;
  let o = dstOffset;
  for (let b = srcOffset, end = srcOffset + count; b < end; b += Q4_0_BLOCK_ELEMENTS) {
    let amax = 0;
    let max = 0;
    for (let j = 0; j < Q4_0_BLOCK_ELEMENTS; j++) {
      const v = fround(src[b + j]!);
      const av = v < 0 ? -v : v;
      if (amax < av) {
        amax = av;
        max = v;
      }
    }
    const d = fround(max / -8);
    const id = d !== 0 ? fround(1 / d) : 0;
    const h = f16FromNumber(d);
    dst[o] = h & 0xff;
    dst[o + 1] = h >>> 8;
    o += 2;
    const q = (x: number): number => {
      // (int8_t)(x + 8.5f) truncates toward zero; x·id is within [-8, 8] here
      const t = Math.trunc(fround(fround(fround(x) * id) + 8.5));
      return Math.min(15, t);
    };
    for (let j = 0; j < 16; j++) dst[o++] = q(src[b + j]!) | (q(src[b + 16 + j]!) << 4);
  }
}

/** Decodes Q4_0 blocks back to numbers (d · (q - 8)), for tests and inspection. */
export function decodeQ4_0(src: Uint8Array, count: number, srcOffset = 0): Float32Array {
  if (count % Q4_0_BLOCK_ELEMENTS !== 0) {
    throw new RangeError(`Expected a multiple of 32 values for Q4_0 but received ${count}`);
  }
  const out = new Float32Array(count);
  let o = srcOffset;
  for (let i = 0; i < count; i += Q4_0_BLOCK_ELEMENTS) {
    const d = f16ToNumber(src[o]! | (src[o + 1]! << 8));
    o += 2;
    for (let j = 0; j < 16; j++) {
      const byte = src[o++]!;
      out[i + j] = d * ((byte & 0x0f) - 8);
      out[i + 16 + j] = d * ((byte >>> 4) - 8);
    }
  }
  return out;
}
