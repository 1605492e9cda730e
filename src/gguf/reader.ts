import { open } from 'node:fs/promises';
import {
  GGML_BLOCK,
  GGML_MAX_DIMS,
  GGML_TYPE_NAME_BY_ID,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GgufType,
  SCALAR_SIZE,
  SCALAR_TYPE_BY_ID,
} from './constants.js';
import type { GgmlTypeName, GgufScalarType } from './constants.js';
import { GgufFormatError } from './errors.js';
import type { GgufValue } from './types.js';

/** One tensor's description from the header (its data is not read). */
export interface GgufTensorInfo {
  readonly name: string;
  /** ggml order: `shape[0]` is the row length. */
  readonly shape: readonly number[];
  /** ggml type id as stored. */
  readonly typeId: number;
  readonly type: GgmlTypeName;
  /** Offset from the start of the data section. */
  readonly offset: number;
  /** Absolute file offset of the tensor's first byte. */
  readonly fileOffset: number;
  readonly byteSize: number;
  readonly elementCount: number;
}

/** A parsed GGUF header: metadata and tensor infos. */
export interface GgufFile {
  readonly version: number;
  /** Data alignment in effect (`general.alignment` or 32). */
  readonly alignment: number;
  /** Metadata in file order. */
  readonly metadata: ReadonlyMap<string, GgufValue>;
  readonly tensors: readonly GgufTensorInfo[];
  /** Absolute offset of the data section (the header's size including its padding). */
  readonly dataOffset: number;
  /** Bytes the data section needs: the tensors with padding between them. */
  readonly dataSize: number;
  /** Size of the file (or buffer) the header was read from. */
  readonly fileSize: number;
}

/** Options of {@link parseGguf}. */
export interface ParseGgufOptions {
  /**
   * Size of the whole file when `bytes` is only its beginning. Lengths are capped against it.
   * Default: `bytes.length`.
   */
  readonly fileSize?: number;
  /** Check that every tensor's data lies within the file. Default true. */
  readonly checkData?: boolean;
}

/** Options of {@link readGgufFile}. */
export interface ReadGgufFileOptions {
  /** Refuse headers larger than this many bytes. Default 256 MiB. */
  readonly maxHeaderBytes?: number;
  /** Check that every tensor's data lies within the file. Default true. */
  readonly checkData?: boolean;
}

/** Thrown inside the parser when a prefix of the file was too short; never escapes. */
class NeedMore {
  constructor(readonly needed: number) {}
}

const decoder = new TextDecoder('utf-8', { ignoreBOM: true });
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

class Cursor {
  pos = 0;
  readonly #view: DataView;

  constructor(
    readonly bytes: Uint8Array,
    readonly fileSize: number,
  ) {
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get remaining(): number {
    return this.fileSize - this.pos;
  }

  fail(message: string, at = this.pos): never {
    throw new GgufFormatError(`Invalid GGUF file: ${message} (at byte ${at})`, { offset: at });
  }

  need(n: number, what: string): void {
    const end = this.pos + n;
    if (end > this.fileSize) this.fail(`truncated while reading ${what}: needs ${n} bytes, ${this.remaining} left`);
    if (end > this.bytes.length) throw new NeedMore(end);
  }

  u8(what: string): number {
    this.need(1, what);
    return this.#view.getUint8(this.pos++);
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.#view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  u64(what: string): bigint {
    this.need(8, what);
    const v = this.#view.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }
  /** A u64 that must fit a JS number and be at most `max`. */
  count(what: string, max: number): number {
    const at = this.pos;
    const v = this.u64(what);
    if (v > MAX_SAFE || Number(v) > max) this.fail(`${what} ${v} exceeds what the file can hold (${max})`, at);
    return Number(v);
  }
  string(what: string): string {
    const at = this.pos;
    const n = this.u64(`${what} length`);
    if (n > BigInt(this.remaining)) this.fail(`${what} length ${n} exceeds the ${this.remaining} bytes left`, at);
    const len = Number(n);
    this.need(len, what);
    const s = decoder.decode(this.bytes.subarray(this.pos, this.pos + len));
    this.pos += len;
    return s;
  }
  scalar(type: GgufScalarType, what: string): number | bigint | boolean | string {
    if (type === 'string') return this.string(what);
    const size = SCALAR_SIZE[type];
    this.need(size, what);
    const p = this.pos;
    this.pos += size;
    const v = this.#view;
    switch (type) {
      case 'u8':
        return v.getUint8(p);
      case 'i8':
        return v.getInt8(p);
      case 'u16':
        return v.getUint16(p, true);
      case 'i16':
        return v.getInt16(p, true);
      case 'u32':
        return v.getUint32(p, true);
      case 'i32':
        return v.getInt32(p, true);
      case 'f32':
        return v.getFloat32(p, true);
      case 'f64':
        return v.getFloat64(p, true);
      case 'u64':
        return v.getBigUint64(p, true);
      case 'i64':
        return v.getBigInt64(p, true);
      case 'bool':
        return v.getUint8(p) !== 0;
    }
  }
}

function readValue(c: Cursor, key: string): GgufValue {
  const at = c.pos;
  const typeId = c.u32(`type of "${key}"`);
  if (typeId === GgufType.ARRAY) {
    const itemAt = c.pos;
    const itemId = c.u32(`item type of "${key}"`);
    if (itemId === GgufType.ARRAY) c.fail(`nested arrays are not supported ("${key}")`, itemAt);
    const itemType = SCALAR_TYPE_BY_ID.get(itemId);
    if (itemType === undefined) c.fail(`unknown array item type ${itemId} for "${key}"`, itemAt);
    const minSize = itemType === 'string' ? 8 : SCALAR_SIZE[itemType];
    const n = c.count(`length of array "${key}"`, Math.floor(c.remaining / minSize));
    const items: unknown[] = new Array<unknown>(n);
    for (let i = 0; i < n; i++) items[i] = c.scalar(itemType, `"${key}"[${i}]`);
    return { type: 'array', itemType, value: items } as GgufValue;
  }
  const type = SCALAR_TYPE_BY_ID.get(typeId);
  if (type === undefined) c.fail(`unknown value type ${typeId} for "${key}"`, at);
  return { type, value: c.scalar(type, `value of "${key}"`) } as GgufValue;
}

function parse(bytes: Uint8Array, fileSize: number, checkData: boolean): GgufFile {
  const c: Cursor = new Cursor(bytes, fileSize);
  const magic = c.u32('magic');
  if (magic !== GGUF_MAGIC) c.fail('bad magic, not a GGUF file', 0);
  const version = c.u32('version');
  if (version === 0x03000000 || version === 0x02000000) c.fail('big-endian GGUF files are not supported', 4);
  if (version === 1) c.fail('GGUF version 1 is not supported', 4);
  if (version !== 2 && version !== 3) c.fail(`unsupported GGUF version ${version}`, 4);
  // Minimum encoded sizes cap the counts: a tensor info is at least 8+4+4+8 bytes, a KV 8+4+1.
  const nTensors = c.count('tensor count', Math.floor(c.remaining / 24));
  const nKv = c.count('metadata count', Math.floor(c.remaining / 13));

  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < nKv; i++) {
    const at = c.pos;
    const key = c.string(`key of metadata entry ${i}`);
    if (metadata.has(key)) c.fail(`duplicate metadata key "${key}"`, at);
    metadata.set(key, readValue(c, key));
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const a = metadata.get('general.alignment');
  if (a !== undefined) {
    if (a.type !== 'u32') c.fail(`general.alignment must be a u32, not ${a.type}`);
    if (a.value === 0 || (a.value & (a.value - 1)) !== 0) c.fail(`general.alignment ${a.value} is not a power of two`);
    alignment = a.value;
  }

  const tensors: GgufTensorInfo[] = [];
  const names = new Set<string>();
  let expectedOffset = 0;
  const pending: Array<Omit<GgufTensorInfo, 'fileOffset'>> = [];
  for (let i = 0; i < nTensors; i++) {
    const at = c.pos;
    const name = c.string(`name of tensor ${i}`);
    if (Buffer.byteLength(name) >= 64) c.fail(`tensor name "${name.slice(0, 80)}" is 64 bytes or longer`, at);
    if (names.has(name)) c.fail(`duplicate tensor name "${name}"`, at);
    names.add(name);
    const dimsAt = c.pos;
    const nDims = c.u32(`dimension count of "${name}"`);
    if (nDims > GGML_MAX_DIMS) c.fail(`tensor "${name}" has ${nDims} dimensions (max ${GGML_MAX_DIMS})`, dimsAt);
    const shape: number[] = [];
    let elementCount = 1;
    for (let d = 0; d < nDims; d++) {
      const dAt = c.pos;
      const ne = c.u64(`dimension ${d} of "${name}"`);
      if (ne >= 1n << 63n) c.fail(`tensor "${name}" has a negative dimension`, dAt);
      if (ne > MAX_SAFE) c.fail(`tensor "${name}" dimension ${ne} is too large`, dAt);
      shape.push(Number(ne));
      elementCount *= Number(ne);
      if (!Number.isSafeInteger(elementCount)) c.fail(`tensor "${name}" has too many elements`, dAt);
    }
    const typeAt = c.pos;
    const typeId = c.u32(`type of "${name}"`);
    const type = GGML_TYPE_NAME_BY_ID.get(typeId);
    if (type === undefined) c.fail(`tensor "${name}" has unknown ggml type ${typeId}`, typeAt);
    const [blockElements, blockBytes] = GGML_BLOCK[type];
    const rowLength = shape[0] ?? 1;
    if (rowLength % blockElements !== 0) {
      c.fail(`tensor "${name}" of type ${type} has rows of ${rowLength} elements, not a multiple of ${blockElements}`, typeAt);
    }
    const byteSize = (elementCount / blockElements) * blockBytes;
    const offAt = c.pos;
    const off = c.u64(`offset of "${name}"`);
    if (off !== BigInt(expectedOffset)) {
      c.fail(`tensor "${name}" has data offset ${off}, expected ${expectedOffset}`, offAt);
    }
    const offset = expectedOffset;
    const padded = byteSize + ((alignment - (byteSize % alignment)) % alignment);
    expectedOffset += padded;
    if (!Number.isSafeInteger(expectedOffset)) c.fail('data section too large', offAt);
    pending.push({ name, shape, typeId, type, offset, byteSize, elementCount });
  }
  const headerEnd = c.pos;
  const dataOffset = nTensors > 0 ? headerEnd + ((alignment - (headerEnd % alignment)) % alignment) : headerEnd;
  for (const t of pending) tensors.push({ ...t, fileOffset: dataOffset + t.offset });
  if (checkData && nTensors > 0) {
    const last = tensors[tensors.length - 1]!;
    const end = last.fileOffset + last.byteSize;
    if (end > fileSize) {
      c.fail(`tensor data is truncated: the data section needs ${end} bytes, the file has ${fileSize}`, fileSize);
    }
  }
  return { version, alignment, metadata, tensors, dataOffset, dataSize: expectedOffset, fileSize };
}

/**
 * Parses a GGUF header (metadata and tensor infos, not the data) from bytes.
 *
 * @throws GgufFormatError (`code: 'MODEL_INVALID'`) on garbage, truncation, impossible sizes or
 *   anything llama.cpp's loader would refuse in the header. Lengths are capped against the file
 *   size, so a corrupt length never makes it allocate or loop unboundedly.
 */
export function parseGguf(bytes: Uint8Array, options?: ParseGgufOptions): GgufFile {
  const fileSize = options?.fileSize ?? bytes.length;
  try {
    return parse(bytes, fileSize, options?.checkData ?? true);
  } catch (err) {
    if (err instanceof NeedMore) {
      throw new GgufFormatError(`Invalid GGUF file: header continues past the ${bytes.length} bytes given`, {
        offset: bytes.length,
      });
    }
    throw err;
  }
}

/**
 * Reads a GGUF file's header (metadata and tensor infos) from disk, reading only as much of the
 * file as the header needs.
 *
 * @throws GgufFormatError (`code: 'MODEL_INVALID'`) for invalid files; the file system's error
 *   (e.g. `ENOENT`) when it cannot be opened.
 * @example
 * const gguf = await readGgufFile('model.gguf');
 * console.log(gguf.metadata.get('general.architecture')?.value, gguf.tensors.length);
 */
export async function readGgufFile(path: string, options?: ReadGgufFileOptions): Promise<GgufFile> {
  const maxHeader = options?.maxHeaderBytes ?? 256 * 1024 * 1024;
  const handle = await open(path, 'r');
  try {
    const { size } = await handle.stat();
    let window = Math.min(size, 1 << 20, maxHeader);
    for (;;) {
      const buf = new Uint8Array(window);
      let got = 0;
      while (got < window) {
        const { bytesRead } = await handle.read(buf, got, window - got, got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      const bytes = buf.subarray(0, got);
      try {
        return parse(bytes, got < window ? got : size, options?.checkData ?? true);
      } catch (err) {
        if (!(err instanceof NeedMore)) throw err;
        if (window >= maxHeader) {
          throw new GgufFormatError(`Invalid GGUF file: header is larger than ${maxHeader} bytes`, { offset: window });
        }
        window = Math.min(size, maxHeader, Math.max(window * 2, err.needed + 65536));
      }
    }
  } finally {
    await handle.close();
  }
}

/** Reads one tensor's raw bytes (as stored, in its ggml type). */
export async function readTensorBytes(path: string, tensor: GgufTensorInfo): Promise<Uint8Array> {
  const handle = await open(path, 'r');
  try {
    const buf = new Uint8Array(tensor.byteSize);
    let got = 0;
    while (got < buf.length) {
      const { bytesRead } = await handle.read(buf, got, buf.length - got, tensor.fileOffset + got);
      if (bytesRead === 0) {
        throw new GgufFormatError(`Invalid GGUF file: data of tensor "${tensor.name}" is truncated`, {
          offset: tensor.fileOffset + got,
        });
      }
      got += bytesRead;
    }
    return buf;
  } finally {
    await handle.close();
  }
}

/** The plain value of metadata `key`, or `undefined`. */
export function metadataValue(file: GgufFile, key: string): GgufValue['value'] | undefined {
  return file.metadata.get(key)?.value;
}
