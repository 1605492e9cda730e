import type { GgmlTypeName, GgufScalarType } from './constants.js';

/** Scalar GGUF types whose values are JS numbers. */
export type GgufNumberType = 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'f64';
/** Scalar GGUF types whose values are bigints (64-bit integers). */
export type GgufBigIntType = 'u64' | 'i64';

/** One typed GGUF metadata value. The tag decides the encoding; nested arrays are not supported. */
export type GgufValue =
  | { readonly type: GgufNumberType; readonly value: number }
  | { readonly type: GgufBigIntType; readonly value: bigint }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | GgufArrayValue;

/** A GGUF array: one item type, any length (arrays of strings included). */
export type GgufArrayValue =
  | { readonly type: 'array'; readonly itemType: GgufNumberType; readonly value: readonly number[] }
  | { readonly type: 'array'; readonly itemType: GgufBigIntType; readonly value: readonly bigint[] }
  | { readonly type: 'array'; readonly itemType: 'bool'; readonly value: readonly boolean[] }
  | { readonly type: 'array'; readonly itemType: 'string'; readonly value: readonly string[] };

/** Metadata in file order: a Map or a list of `[key, value]` pairs. */
export type GgufMetadata = ReadonlyMap<string, GgufValue> | ReadonlyArray<readonly [string, GgufValue]>;

/** Fills `out` with the tensor's elements `[start, start + out.length)`, in ggml order. */
export type TensorFill = (start: number, out: Float32Array) => void;

/**
 * Where a tensor's elements come from:
 * - `Float32Array` or `number[]`: all values, in ggml order (row after row, `shape[0]` per row);
 * - a {@link TensorFill} callback: the writer asks for consecutive chunks, in ascending order,
 *   each element exactly once, so a generator never needs the whole tensor in memory;
 * - `Uint8Array`: bytes already encoded in the tensor's type (any ggml type), written as is.
 */
export type TensorData = Float32Array | readonly number[] | TensorFill | Uint8Array;

/** A tensor to write. */
export interface GgufTensorSpec {
  /** Tensor name, shorter than 64 bytes (e.g. `blk.0.attn_q.weight`). */
  readonly name: string;
  /** ggml order: `shape[0]` is the row length (the fastest-varying dimension). 1 to 4 dims. */
  readonly shape: readonly number[];
  /** Encoding. F32, F16, Q8_0 and Q4_0 are encoded from values; other types need raw bytes. */
  readonly type: GgmlTypeName;
  readonly data: TensorData;
}

/** Everything a GGUF file holds. */
export interface GgufSpec {
  readonly metadata: GgufMetadata;
  readonly tensors: readonly GgufTensorSpec[];
}

/** Helpers that build tagged {@link GgufValue}s. */
export const val = {
  u8: (value: number): GgufValue => ({ type: 'u8', value }),
  i8: (value: number): GgufValue => ({ type: 'i8', value }),
  u16: (value: number): GgufValue => ({ type: 'u16', value }),
  i16: (value: number): GgufValue => ({ type: 'i16', value }),
  u32: (value: number): GgufValue => ({ type: 'u32', value }),
  i32: (value: number): GgufValue => ({ type: 'i32', value }),
  f32: (value: number): GgufValue => ({ type: 'f32', value }),
  f64: (value: number): GgufValue => ({ type: 'f64', value }),
  u64: (value: bigint | number): GgufValue => ({ type: 'u64', value: BigInt(value) }),
  i64: (value: bigint | number): GgufValue => ({ type: 'i64', value: BigInt(value) }),
  bool: (value: boolean): GgufValue => ({ type: 'bool', value }),
  string: (value: string): GgufValue => ({ type: 'string', value }),
  array: arrayValue,
};

function arrayValue(itemType: GgufNumberType, value: readonly number[]): GgufValue;
function arrayValue(itemType: GgufBigIntType, value: readonly bigint[]): GgufValue;
function arrayValue(itemType: 'bool', value: readonly boolean[]): GgufValue;
function arrayValue(itemType: 'string', value: readonly string[]): GgufValue;
function arrayValue(itemType: GgufScalarType, value: readonly unknown[]): GgufValue {
  return { type: 'array', itemType, value } as GgufValue;
}
