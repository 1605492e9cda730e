import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { val } from '../../src/gguf/types.js';
import type { GgufSpec, GgufValue } from '../../src/gguf/types.js';

/** Metadata with every GGUF value type, arrays of each item type and edge values. */
export function everyValueType(): Array<[string, GgufValue]> {
  return [
    ['general.architecture', val.string('llama')],
    ['t.u8', val.u8(255)],
    ['t.i8', val.i8(-128)],
    ['t.u16', val.u16(65535)],
    ['t.i16', val.i16(-32768)],
    ['t.u32', val.u32(0xffffffff)],
    ['t.i32', val.i32(-0x80000000)],
    ['t.f32', val.f32(Math.fround(3.25))],
    ['t.f64', val.f64(Math.PI)],
    ['t.u64', val.u64(0xffffffffffffffffn)],
    ['t.i64', val.i64(-(1n << 63n))],
    ['t.bool.true', val.bool(true)],
    ['t.bool.false', val.bool(false)],
    ['t.string', val.string('héllo ▁ wörld 🦙 \u0000 end')],
    ['t.string.empty', val.string('')],
    ['t.arr.u8', val.array('u8', [0, 1, 255])],
    ['t.arr.i8', val.array('i8', [-128, 0, 127])],
    ['t.arr.u16', val.array('u16', [0, 65535])],
    ['t.arr.i16', val.array('i16', [-32768, 32767])],
    ['t.arr.u32', val.array('u32', [0, 0xffffffff])],
    ['t.arr.i32', val.array('i32', [-0x80000000, 0x7fffffff])],
    ['t.arr.f32', val.array('f32', [0.5, -1.25, Math.fround(1e30)])],
    ['t.arr.f64', val.array('f64', [Number.MIN_VALUE, -Number.MAX_VALUE])],
    ['t.arr.u64', val.array('u64', [0n, 0xffffffffffffffffn])],
    ['t.arr.i64', val.array('i64', [-(1n << 63n), (1n << 63n) - 1n])],
    ['t.arr.bool', val.array('bool', [true, false, true])],
    ['t.arr.string', val.array('string', ['a', '', '<tool_call>', '▁word', '日本'])],
    ['t.arr.empty', val.array('string', [])],
  ];
}

/** A small model-like spec: every value type and tensors of F32, F16, Q8_0 and raw Q4_K. */
export function kitchenSink(extra: Array<[string, GgufValue]> = []): GgufSpec {
  return {
    metadata: [...everyValueType(), ...extra],
    tensors: [
      { name: 'a.f32', shape: [3], type: 'F32', data: [1, -2, 3.5] },
      { name: 'b.f16', shape: [4, 2], type: 'F16', data: Float32Array.from([0, 1, -1, 0.5, 65504, 2 ** -24, -0, 1e-3]) },
      { name: 'c.q8_0', shape: [64, 2], type: 'Q8_0', data: (start, out) => out.forEach((_, i) => (out[i] = Math.sin(start + i))) },
      { name: 'd.q4_k', shape: [256], type: 'Q4_K', data: new Uint8Array(144).fill(7) },
    ],
  };
}

/** A fresh temporary directory and its cleanup. */
export async function tempDir(): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'llamux-gguf-'));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/** Compares a read value with a written one (f32 values are stored rounded). */
export function normalize(v: GgufValue): unknown {
  if (v.type === 'f32') return Math.fround(v.value);
  if (v.type === 'array' && v.itemType === 'f32') return v.value.map((x) => Math.fround(x));
  return v.value;
}
