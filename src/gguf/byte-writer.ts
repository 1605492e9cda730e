// GGUF header encoding: a growable little-endian byte writer, strings, and checked metadata
// values (scalars and arrays). src/gguf/writer.ts lays out and writes whole files with it.
import { GgufType, SCALAR_TYPE_ID } from './constants.js';
import type { GgufScalarType } from './constants.js';
import type { GgufValue } from './types.js';

const textEncoder = new TextEncoder();

/** A growable little-endian byte buffer for the header. */
export class ByteWriter {
  #buf = new Uint8Array(4096);
  #view = new DataView(this.#buf.buffer);
  length = 0;

  #reserve(n: number): void {
    if (this.length + n <= this.#buf.length) return;
    let size = this.#buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.#buf.subarray(0, this.length));
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }

  u8(v: number): void {
    this.#reserve(1);
    this.#view.setUint8(this.length, v);
    this.length += 1;
  }
  i8(v: number): void {
    this.#reserve(1);
    this.#view.setInt8(this.length, v);
    this.length += 1;
  }
  u16(v: number): void {
    this.#reserve(2);
    this.#view.setUint16(this.length, v, true);
    this.length += 2;
  }
  i16(v: number): void {
    this.#reserve(2);
    this.#view.setInt16(this.length, v, true);
    this.length += 2;
  }
  u32(v: number): void {
    this.#reserve(4);
    this.#view.setUint32(this.length, v, true);
    this.length += 4;
  }
  i32(v: number): void {
    this.#reserve(4);
    this.#view.setInt32(this.length, v, true);
    this.length += 4;
  }
  f32(v: number): void {
    this.#reserve(4);
    this.#view.setFloat32(this.length, v, true);
    this.length += 4;
  }
  f64(v: number): void {
    this.#reserve(8);
    this.#view.setFloat64(this.length, v, true);
    this.length += 8;
  }
  u64(v: bigint): void {
    this.#reserve(8);
    this.#view.setBigUint64(this.length, v, true);
    this.length += 8;
  }
  i64(v: bigint): void {
    this.#reserve(8);
    this.#view.setBigInt64(this.length, v, true);
    this.length += 8;
  }
  bytes(b: Uint8Array): void {
    this.#reserve(b.length);
    this.#buf.set(b, this.length);
    this.length += b.length;
  }
  string(s: string): void {
    const b = encodeString(s);
    this.u64(BigInt(b.length));
    this.bytes(b);
  }
  pad(alignment: number): void {
    const n = padding(this.length, alignment);
    this.#reserve(n);
    this.#buf.fill(0, this.length, this.length + n);
    this.length += n;
  }
  result(): Uint8Array {
    return this.#buf.slice(0, this.length);
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export function encodeString(s: string): Uint8Array {
  if (typeof s !== 'string') {
    throw new TypeError(`Expected a string but received ${typeof s}`);
  }
  if (LONE_SURROGATE.test(s)) {
    throw new TypeError('Expected a well-formed string (no lone surrogates) for a GGUF string');
  }
  return textEncoder.encode(s);
}

export function padding(offset: number, alignment: number): number {
  const r = offset % alignment;
  return r === 0 ? 0 : alignment - r;
}

const INT_RANGES: Record<'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32', readonly [number, number]> = {
  u8: [0, 0xff],
  i8: [-0x80, 0x7f],
  u16: [0, 0xffff],
  i16: [-0x8000, 0x7fff],
  u32: [0, 0xffffffff],
  i32: [-0x80000000, 0x7fffffff],
};

function checkScalar(type: GgufScalarType, v: unknown, where: string): void {
  switch (type) {
    case 'u8':
    case 'i8':
    case 'u16':
    case 'i16':
    case 'u32':
    case 'i32': {
      const [lo, hi] = INT_RANGES[type];
      if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
        throw new RangeError(`Expected an integer in [${lo}, ${hi}] for ${where} (${type}) but received ${String(v)}`);
      }
      return;
    }
    case 'f32':
    case 'f64':
      if (typeof v !== 'number') {
        throw new TypeError(`Expected a number for ${where} (${type}) but received ${typeof v}`);
      }
      return;
    case 'u64':
      if (typeof v !== 'bigint' || v < 0n || v > 0xffffffffffffffffn) {
        throw new RangeError(`Expected a bigint in [0, 2^64) for ${where} (u64) but received ${String(v)}`);
      }
      return;
    case 'i64':
      if (typeof v !== 'bigint' || v < -(1n << 63n) || v >= 1n << 63n) {
        throw new RangeError(`Expected a bigint in [-2^63, 2^63) for ${where} (i64) but received ${String(v)}`);
      }
      return;
    case 'bool':
      if (typeof v !== 'boolean') {
        throw new TypeError(`Expected a boolean for ${where} but received ${typeof v}`);
      }
      return;
    case 'string':
      if (typeof v !== 'string') {
        throw new TypeError(`Expected a string for ${where} but received ${typeof v}`);
      }
      return;
    default:
      throw new TypeError(`Unknown GGUF value type ${String(type)} for ${where}`);
  }
}

function writeScalar(w: ByteWriter, type: GgufScalarType, v: unknown): void {
  switch (type) {
    case 'u8':
      return w.u8(v as number);
    case 'i8':
      return w.i8(v as number);
    case 'u16':
      return w.u16(v as number);
    case 'i16':
      return w.i16(v as number);
    case 'u32':
      return w.u32(v as number);
    case 'i32':
      return w.i32(v as number);
    case 'f32':
      return w.f32(v as number);
    case 'f64':
      return w.f64(v as number);
    case 'u64':
      return w.u64(v as bigint);
    case 'i64':
      return w.i64(v as bigint);
    case 'bool':
      return w.u8(v ? 1 : 0);
    case 'string':
      return w.string(v as string);
  }
}

export function writeValue(w: ByteWriter, key: string, value: GgufValue): void {
  if (value === null || typeof value !== 'object') {
    throw new TypeError(`Expected a tagged GGUF value for "${key}" but received ${String(value)}`);
  }
  if (value.type === 'array') {
    const itemType = value.itemType;
    if (!(itemType in SCALAR_TYPE_ID)) {
      throw new TypeError(`Unsupported GGUF array item type ${String(itemType)} for "${key}" (nested arrays are not supported)`);
    }
    if (!Array.isArray(value.value)) {
      throw new TypeError(`Expected an array for "${key}"`);
    }
    w.u32(GgufType.ARRAY);
    w.u32(SCALAR_TYPE_ID[itemType]);
    w.u64(BigInt(value.value.length));
    for (let i = 0; i < value.value.length; i++) {
      const item: unknown = value.value[i];
      checkScalar(itemType, item, `"${key}"[${i}]`);
      writeScalar(w, itemType, item);
    }
    return;
  }
  if (!(value.type in SCALAR_TYPE_ID)) {
    throw new TypeError(`Unknown GGUF value type ${String(value.type)} for "${key}"`);
  }
  checkScalar(value.type, value.value, `"${key}"`);
  w.u32(SCALAR_TYPE_ID[value.type]);
  writeScalar(w, value.type, value.value);
}
