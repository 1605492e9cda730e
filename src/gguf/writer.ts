import { open, rename, rm } from 'node:fs/promises';
import {
  GGML_BLOCK,
  GGML_MAX_DIMS,
  GGML_MAX_NAME,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_VERSION,
  GgmlType,
  GgufType,
  SCALAR_TYPE_ID,
} from './constants.js';
import type { GgmlTypeName } from './constants.js';
import { ByteWriter, encodeString, padding, writeValue } from './byte-writer.js';
import { encodeF16 } from './f16.js';
import { encodeQ4_0, encodeQ8_0 } from './quant.js';
import type { GgufMetadata, GgufSpec, GgufTensorSpec, GgufValue, TensorData } from './types.js';

/** Where each tensor landed, as returned by the writers. */
export interface GgufWrittenTensor {
  readonly name: string;
  readonly shape: readonly number[];
  readonly type: GgmlTypeName;
  /** Offset from the start of the data section (a multiple of the alignment). */
  readonly offset: number;
  /** Encoded size in bytes, without padding. */
  readonly byteSize: number;
}

/** Layout of a written file. */
export interface GgufLayout {
  readonly alignment: number;
  /** Absolute file offset of the data section. */
  readonly dataOffset: number;
  /** Total file size in bytes. */
  readonly fileSize: number;
  readonly tensors: readonly GgufWrittenTensor[];
}

/** Options of {@link writeGgufFile}. */
export interface WriteGgufFileOptions {
  /**
   * Elements encoded per chunk (rounded to a multiple of 32); bounds the writer's memory.
   * Default 1 Mi elements (4 MiB of F32).
   */
  readonly chunkElements?: number;
  /**
   * Write to a temporary file next to `path` and rename it into place at the end, so a reader
   * never sees a half-written model. Default true.
   */
  readonly atomic?: boolean;
}

const DEFAULT_CHUNK = 1 << 20;

function metadataEntries(metadata: GgufMetadata): ReadonlyArray<readonly [string, GgufValue]> {
  return metadata instanceof Map ? [...metadata.entries()] : (metadata as ReadonlyArray<readonly [string, GgufValue]>);
}

/** Reads `general.alignment` from metadata: a u32 power of two, or the default 32. */
export function metadataAlignment(metadata: GgufMetadata): number {
  for (const [key, value] of metadataEntries(metadata)) {
    if (key !== 'general.alignment') continue;
    if (value.type !== 'u32') {
      throw new TypeError(`Expected general.alignment to be a u32 but received ${value.type}`);
    }
    const a = value.value;
    if (!Number.isInteger(a) || a <= 0 || (a & (a - 1)) !== 0) {
      throw new RangeError(`Expected general.alignment to be a power of two but received ${a}`);
    }
    return a;
  }
  return GGUF_DEFAULT_ALIGNMENT;
}

/** Encoded byte size of a tensor of `type` and `shape`. Throws when the row is not whole blocks. */
export function tensorByteSize(type: GgmlTypeName, shape: readonly number[]): number {
  const block = GGML_BLOCK[type];
  if (block === undefined) throw new TypeError(`Unknown ggml type ${String(type)}`);
  const [blockElements, blockBytes] = block;
  let n = 1;
  for (const d of shape) n *= d;
  if (shape[0]! % blockElements !== 0) {
    throw new RangeError(`Expected the row length of a ${type} tensor to be a multiple of ${blockElements} but received ${shape[0]}`);
  }
  return (n / blockElements) * blockBytes;
}

interface PlannedTensor extends GgufWrittenTensor {
  readonly count: number;
  readonly data: TensorData;
}

interface Plan {
  readonly header: Uint8Array; // includes the padding before the data section
  readonly layout: GgufLayout;
  readonly tensors: readonly PlannedTensor[];
}

function planTensor(t: GgufTensorSpec, offset: number): PlannedTensor {
  const nameBytes = encodeString(t.name);
  if (nameBytes.length === 0 || nameBytes.length >= GGML_MAX_NAME) {
    throw new RangeError(`Expected a tensor name of 1 to ${GGML_MAX_NAME - 1} bytes but received "${t.name}"`);
  }
  if (!(t.type in GgmlType)) throw new TypeError(`Unknown ggml type ${String(t.type)} for tensor "${t.name}"`);
  if (!Array.isArray(t.shape) || t.shape.length < 1 || t.shape.length > GGML_MAX_DIMS) {
    throw new RangeError(`Expected 1 to ${GGML_MAX_DIMS} dimensions for tensor "${t.name}"`);
  }
  let count = 1;
  for (const d of t.shape) {
    if (!Number.isSafeInteger(d) || d < 0) {
      throw new RangeError(`Expected non-negative integer dimensions for tensor "${t.name}" but received ${String(d)}`);
    }
    count *= d;
  }
  if (!Number.isSafeInteger(count)) throw new RangeError(`Tensor "${t.name}" is too large`);
  const byteSize = tensorByteSize(t.type, t.shape);
  const data = t.data;
  if (data instanceof Uint8Array) {
    if (data.length !== byteSize) {
      throw new RangeError(`Expected ${byteSize} raw bytes for tensor "${t.name}" but received ${data.length}`);
    }
  } else {
    if (t.type !== 'F32' && t.type !== 'F16' && t.type !== 'Q8_0' && t.type !== 'Q4_0') {
      throw new TypeError(`Tensor "${t.name}": only F32, F16, Q8_0 and Q4_0 can be encoded from values; pass raw bytes for ${t.type}`);
    }
    if (typeof data !== 'function' && data.length !== count) {
      throw new RangeError(`Expected ${count} values for tensor "${t.name}" but received ${data.length}`);
    }
  }
  return { name: t.name, shape: [...t.shape], type: t.type, offset, byteSize, count, data };
}

function plan(spec: GgufSpec): Plan {
  const entries = metadataEntries(spec.metadata);
  const alignment = metadataAlignment(spec.metadata);
  const w = new ByteWriter();
  w.u32(GGUF_MAGIC);
  w.u32(GGUF_VERSION);
  w.u64(BigInt(spec.tensors.length));
  w.u64(BigInt(entries.length));
  const seenKeys = new Set<string>();
  for (const [key, value] of entries) {
    if (seenKeys.has(key)) throw new RangeError(`Duplicate metadata key "${key}"`);
    seenKeys.add(key);
    w.string(key);
    writeValue(w, key, value);
  }
  const tensors: PlannedTensor[] = [];
  const seenNames = new Set<string>();
  let offset = 0;
  for (const t of spec.tensors) {
    if (seenNames.has(t.name)) throw new RangeError(`Duplicate tensor name "${t.name}"`);
    seenNames.add(t.name);
    const p = planTensor(t, offset);
    tensors.push(p);
    offset += p.byteSize + padding(p.byteSize, alignment);
    w.string(p.name);
    w.u32(p.shape.length);
    for (const d of p.shape) w.u64(BigInt(d));
    w.u32(GgmlType[p.type]);
    w.u64(BigInt(p.offset));
  }
  w.pad(alignment);
  const header = w.result();
  return {
    header,
    tensors,
    layout: {
      alignment,
      dataOffset: header.length,
      fileSize: header.length + offset,
      tensors: tensors.map(({ name, shape, type, offset: o, byteSize }) => ({ name, shape, type, offset: o, byteSize })),
    },
  };
}

/**
 * Yields the file's bytes: the header, then each tensor in chunks, then its padding.
 * Chunk buffers are reused: consume (write or copy) each one before asking for the next.
 */
function* fileChunks(p: Plan, chunkElements: number): Generator<Uint8Array, void, void> {
  yield p.header;
  const alignment = p.layout.alignment;
  const zeros = new Uint8Array(alignment);
  const chunk = Math.max(32, chunkElements - (chunkElements % 32));
  let values: Float32Array | undefined;
  let bytes: Uint8Array | undefined;
  for (const t of p.tensors) {
    const data = t.data;
    if (data instanceof Uint8Array) {
      if (data.length > 0) yield data;
    } else {
      const bytesPerElement = t.type === 'F32' ? 4 : t.type === 'F16' ? 2 : t.type === 'Q8_0' ? 34 / 32 : 18 / 32;
      for (let start = 0; start < t.count; start += chunk) {
        const n = Math.min(chunk, t.count - start);
        let src: Float32Array;
        if (typeof data === 'function') {
          values ??= new Float32Array(chunk);
          src = n === chunk ? values : values.subarray(0, n);
          data(start, src);
        } else if (data instanceof Float32Array) {
          src = data.subarray(start, start + n);
        } else {
          values ??= new Float32Array(chunk);
          src = values.subarray(0, n);
          for (let i = 0; i < n; i++) src[i] = data[start + i]!;
        }
        const nBytes = n * bytesPerElement;
        bytes ??= new Uint8Array(chunk * 4);
        const out = bytes.subarray(0, nBytes);
        if (t.type === 'F32') {
          const f = new Float32Array(out.buffer, out.byteOffset, n);
          f.set(src);
          if (!LITTLE_ENDIAN) swap32(out);
        } else if (t.type === 'F16') {
          encodeF16(src, out);
        } else if (t.type === 'Q8_0') {
          encodeQ8_0(src, out, 0, n, 0);
        } else {
          encodeQ4_0(src, out, 0, n, 0);
        }
        yield out;
      }
    }
    const pad = padding(t.byteSize, alignment);
    if (pad > 0) yield zeros.subarray(0, pad);
  }
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function swap32(b: Uint8Array): void {
  for (let i = 0; i + 3 < b.length; i += 4) {
    const a0 = b[i]!;
    const a1 = b[i + 1]!;
    b[i] = b[i + 3]!;
    b[i + 1] = b[i + 2]!;
    b[i + 2] = a1;
    b[i + 3] = a0;
  }
}

/**
 * Computes the layout of a GGUF file without writing it (validates the spec).
 *
 * @throws TypeError or RangeError naming the key or tensor at fault.
 */
export function planGguf(spec: GgufSpec): GgufLayout {
  return plan(spec).layout;
}

/**
 * Encodes a whole GGUF v3 file in memory. For small models and tests; use
 * {@link writeGgufFile} for large ones.
 *
 * @throws TypeError or RangeError naming the key or tensor at fault.
 */
export function encodeGguf(spec: GgufSpec, options?: { chunkElements?: number }): Uint8Array {
  const p = plan(spec);
  const out = new Uint8Array(p.layout.fileSize);
  let o = 0;
  for (const c of fileChunks(p, options?.chunkElements ?? DEFAULT_CHUNK)) {
    out.set(c, o);
    o += c.length;
  }
  if (o !== out.length) throw new Error(`internal: wrote ${o} bytes, planned ${out.length}`);
  return out;
}

let tmpCounter = 0;

/**
 * Streams a GGUF v3 file to `path`: the header, then tensor after tensor, each encoded chunk by
 * chunk, so memory stays at a few MiB whatever the model size (with {@link TensorFill} sources).
 * Data is 32-byte aligned unless the metadata sets `general.alignment` (a u32 power of two).
 *
 * @throws TypeError or RangeError for an invalid spec (before anything is written), or the
 *   file system's error.
 * @example
 * await writeGgufFile('m.gguf', {
 *   metadata: [['general.architecture', val.string('llama')]],
 *   tensors: [{ name: 'x', shape: [32], type: 'Q8_0', data: new Float32Array(32) }],
 * });
 */
export async function writeGgufFile(path: string, spec: GgufSpec, options?: WriteGgufFileOptions): Promise<GgufLayout> {
  const p = plan(spec);
  const atomic = options?.atomic ?? true;
  const target = atomic ? `${path}.${process.pid}.${++tmpCounter}.tmp` : path;
  const handle = await open(target, 'w');
  let ok = false;
  try {
    let position = 0;
    for (const c of fileChunks(p, options?.chunkElements ?? DEFAULT_CHUNK)) {
      let done = 0;
      while (done < c.length) {
        const { bytesWritten } = await handle.write(c, done, c.length - done, position);
        done += bytesWritten;
        position += bytesWritten;
      }
    }
    if (position !== p.layout.fileSize) throw new Error(`internal: wrote ${position} bytes, planned ${p.layout.fileSize}`);
    ok = true;
  } finally {
    await handle.close();
    if (!ok && atomic) await rm(target, { force: true });
  }
  if (atomic) await rename(target, path);
  return p.layout;
}
