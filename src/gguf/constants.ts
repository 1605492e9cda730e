/** GGUF container constants, mirroring `ggml/include/gguf.h` and `gguf-py/gguf/constants.py`. */

/** `"GGUF"` read as a little-endian u32. */
export const GGUF_MAGIC = 0x46554747;
/** The version this writer produces. The reader also accepts version 2 (same layout). */
export const GGUF_VERSION = 3;
/** Alignment of the tensor data section and of each tensor when `general.alignment` is absent. */
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** ggml refuses tensor names of this many bytes or more (`GGML_MAX_NAME`). */
export const GGML_MAX_NAME = 64;
/** ggml tensors have at most this many dimensions (`GGML_MAX_DIMS`). */
export const GGML_MAX_DIMS = 4;

/** GGUF metadata value type ids (`enum gguf_type`). */
export const GgufType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;

/** Short names of the scalar GGUF value types, as used by {@link GgufValue}. */
export type GgufScalarType =
  | 'u8'
  | 'i8'
  | 'u16'
  | 'i16'
  | 'u32'
  | 'i32'
  | 'f32'
  | 'bool'
  | 'string'
  | 'u64'
  | 'i64'
  | 'f64';

export const SCALAR_TYPE_ID: Readonly<Record<GgufScalarType, number>> = {
  u8: GgufType.UINT8,
  i8: GgufType.INT8,
  u16: GgufType.UINT16,
  i16: GgufType.INT16,
  u32: GgufType.UINT32,
  i32: GgufType.INT32,
  f32: GgufType.FLOAT32,
  bool: GgufType.BOOL,
  string: GgufType.STRING,
  u64: GgufType.UINT64,
  i64: GgufType.INT64,
  f64: GgufType.FLOAT64,
};

export const SCALAR_TYPE_BY_ID: ReadonlyMap<number, GgufScalarType> = new Map(
  Object.entries(SCALAR_TYPE_ID).map(([name, id]) => [id, name as GgufScalarType]),
);

/** Encoded size in bytes of each fixed-size scalar type (strings are variable). */
export const SCALAR_SIZE: Readonly<Record<Exclude<GgufScalarType, 'string'>, number>> = {
  u8: 1,
  i8: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  bool: 1,
  u64: 8,
  i64: 8,
  f64: 8,
};

/** ggml tensor type ids (`enum ggml_type`) this package knows the block layout of. */
export const GgmlType = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ3_XXS: 18,
  IQ1_S: 19,
  IQ4_NL: 20,
  IQ3_S: 21,
  IQ2_S: 22,
  IQ4_XS: 23,
  I8: 24,
  I16: 25,
  I32: 26,
  I64: 27,
  F64: 28,
  IQ1_M: 29,
  BF16: 30,
  TQ1_0: 34,
  TQ2_0: 35,
  MXFP4: 39,
  NVFP4: 40,
  Q1_0: 41,
  Q2_0: 42,
} as const;

export type GgmlTypeName = keyof typeof GgmlType;

const QK_K = 256;

/** `[elements per block, bytes per block]` for each ggml type (`GGML_QUANT_SIZES`). */
export const GGML_BLOCK: Readonly<Record<GgmlTypeName, readonly [number, number]>> = {
  F32: [1, 4],
  F16: [1, 2],
  Q4_0: [32, 2 + 16],
  Q4_1: [32, 2 + 2 + 16],
  Q5_0: [32, 2 + 4 + 16],
  Q5_1: [32, 2 + 2 + 4 + 16],
  Q8_0: [32, 2 + 32],
  Q8_1: [32, 4 + 4 + 32],
  Q2_K: [256, 2 + 2 + QK_K / 16 + QK_K / 4],
  Q3_K: [256, 2 + QK_K / 4 + QK_K / 8 + 12],
  Q4_K: [256, 2 + 2 + QK_K / 2 + 12],
  Q5_K: [256, 2 + 2 + QK_K / 2 + QK_K / 8 + 12],
  Q6_K: [256, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16],
  Q8_K: [256, 4 + QK_K + QK_K / 8],
  IQ2_XXS: [256, 2 + QK_K / 4],
  IQ2_XS: [256, 2 + QK_K / 4 + QK_K / 32],
  IQ3_XXS: [256, 2 + QK_K / 4 + QK_K / 8],
  IQ1_S: [256, 2 + QK_K / 8 + QK_K / 16],
  IQ4_NL: [32, 2 + 16],
  IQ3_S: [256, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4],
  IQ2_S: [256, 2 + QK_K / 4 + QK_K / 16],
  IQ4_XS: [256, 2 + 2 + QK_K / 2 + QK_K / 64],
  I8: [1, 1],
  I16: [1, 2],
  I32: [1, 4],
  I64: [1, 8],
  F64: [1, 8],
  IQ1_M: [256, QK_K / 8 + QK_K / 16 + QK_K / 32],
  BF16: [1, 2],
  TQ1_0: [256, 2 + 4 * 13],
  TQ2_0: [256, 2 + 64],
  MXFP4: [32, 1 + 16],
  NVFP4: [64, 4 + 32],
  Q1_0: [128, 2 + 16],
  Q2_0: [64, 2 + 16],
};

export const GGML_TYPE_NAME_BY_ID: ReadonlyMap<number, GgmlTypeName> = new Map(
  Object.entries(GgmlType).map(([name, id]) => [id, name as GgmlTypeName]),
);

/** SentencePiece token types (`tokenizer.ggml.token_type`, `class TokenType`). */
export const TokenType = {
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;

export type TokenTypeName = keyof typeof TokenType;

/** GGUF `general.file_type` values (`enum llama_ftype`) for the types the writer produces. */
export const LlamaFileType = {
  ALL_F32: 0,
  MOSTLY_F16: 1,
  MOSTLY_Q4_0: 2,
  MOSTLY_Q8_0: 7,
} as const;
