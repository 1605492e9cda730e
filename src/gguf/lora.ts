// LoRA adapter GGUFs, in the layout llama.cpp's llama_adapter_lora_init reads (as its
// convert_lora_to_gguf.py writes them): general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, and per adapted base tensor W (ggml shape [in, out]) the pair
// `<W>.lora_a` [in, rank] and `<W>.lora_b` [rank, out]. llama.cpp adds
// scale * (alpha / rank) * B (A x) to W x (scale alone when alpha is 0): row k of A is a
// direction of the input, column k of B what it adds to each output.
import type { GgufSpec, GgufTensorSpec, GgufValue } from './types.js';
import { val } from './types.js';

/** One adapted base tensor. */
export interface LoraTensorSpec {
  /** The base tensor's name (e.g. `output.weight`). */
  readonly base: string;
  /** The base tensor's ggml shape `[in, out]`. */
  readonly shape: readonly [number, number];
  /** A: `rank` rows of `in` values (row k: the input direction of rank k). */
  readonly a: Float32Array;
  /** B: `out` rows of `rank` values (row o: what each rank adds to output o). */
  readonly b: Float32Array;
}

export interface LoraAdapterSpec {
  /** The base model's `general.architecture` (llama.cpp refuses another). */
  readonly architecture: string;
  /** `adapter.lora.alpha`: deltas are scaled by alpha / rank (0: by 1). */
  readonly alpha: number;
  readonly rank: number;
  readonly tensors: readonly LoraTensorSpec[];
  readonly name?: string;
  /** More metadata (e.g. `llama.vocab_size`, which llamux checks against the model's vocabulary). */
  readonly metadata?: ReadonlyArray<readonly [string, GgufValue]>;
}

/** The GGUF content of a LoRA adapter (write it with encodeGguf / writeGgufFile). */
export function buildLoraAdapter(spec: LoraAdapterSpec): GgufSpec {
  const tensors: GgufTensorSpec[] = [];
  for (const t of spec.tensors) {
    const [inDim, outDim] = t.shape;
    if (t.a.length !== inDim * spec.rank || t.b.length !== outDim * spec.rank) {
      throw new RangeError(`LoRA tensor ${t.base}: A needs ${inDim * spec.rank} values and B ${outDim * spec.rank}`);
    }
    tensors.push({ name: `${t.base}.lora_a`, shape: [inDim, spec.rank], type: 'F32', data: t.a });
    tensors.push({ name: `${t.base}.lora_b`, shape: [spec.rank, outDim], type: 'F32', data: t.b });
  }
  return {
    metadata: [
      ['general.architecture', val.string(spec.architecture)],
      ['general.type', val.string('adapter')],
      ['general.name', val.string(spec.name ?? 'llamux-test-lora')],
      ['adapter.type', val.string('lora')],
      ['adapter.lora.alpha', val.f32(spec.alpha)],
      ...(spec.metadata ?? []),
    ],
    tensors,
  };
}
