/**
 * Random-weight llama models with realistic shapes, for benchmarks (llama.cpp's cost does not
 * depend on weight values). Generated on demand, streamed tensor by tensor.
 */
import { CHATML_TOOLS_TEMPLATE } from './chat-template.js';
import { LlamaFileType } from './constants.js';
import { Prng, hashSeed } from './prng.js';
import { val } from './types.js';
import type { GgufSpec, GgufTensorSpec, GgufValue } from './types.js';
import { buildSpmVocab, SPACE } from './vocab.js';
import type { SpmVocab } from './vocab.js';
import { writeGgufFile } from './writer.js';

/** Shapes of a llama model. */
export interface LlamaShape {
  readonly nLayer: number;
  readonly nEmbd: number;
  readonly nHead: number;
  readonly nHeadKv: number;
  readonly nFf: number;
  readonly nVocab: number;
  readonly contextLength: number;
}

export type RandomModelPreset = 'tiny' | '250m';

/**
 * - `250m`: 16 layers, n_embd 1024, 16 heads, n_ff 2560, vocab 32,000 (≈ 258 M parameters;
 *   ≈ 275 MB in Q8_0, ≈ 517 MB in F16).
 * - `tiny`: 2 layers, n_embd 128, 4 heads, n_ff 256, vocab 2,048 (≈ 0.9 M parameters).
 */
export const RANDOM_MODEL_PRESETS: Readonly<Record<RandomModelPreset, LlamaShape>> = {
  '250m': { nLayer: 16, nEmbd: 1024, nHead: 16, nHeadKv: 16, nFf: 2560, nVocab: 32000, contextLength: 8192 },
  tiny: { nLayer: 2, nEmbd: 128, nHead: 4, nHeadKv: 4, nFf: 256, nVocab: 2048, contextLength: 4096 },
};

/** Options of {@link writeRandomModel}. Shape fields override the preset's. */
export interface RandomModelOptions extends Partial<LlamaShape> {
  /** Default `'250m'`. */
  readonly preset?: RandomModelPreset;
  /** Type of the 2-D weights (norms stay F32). Default `'Q8_0'`. */
  readonly type?: 'Q8_0' | 'F16' | 'F32';
  /** Default 1. */
  readonly seed?: number;
  /** `tokenizer.chat_template`; default a ChatML template; `null` for none. */
  readonly chatTemplate?: string | null;
}

/** What {@link writeRandomModel} wrote. */
export interface RandomModelInfo extends LlamaShape {
  readonly path: string;
  readonly type: 'Q8_0' | 'F16' | 'F32';
  readonly parameterCount: number;
  readonly fileSize: number;
}

const LETTERS = 'etaoinshrdlcumwfgypbvkjxqz';

/**
 * A SentencePiece-style vocabulary of `size` tokens: `<unk>`, `<s>`, `</s>`, 256 byte tokens,
 * `<|im_start|>`/`<|im_end|>` (CONTROL), then printable ASCII, then lower-case pieces with and
 * without `▁`, shortest first (so every piece's prefixes are pieces too).
 */
export function syntheticVocab(size: number): SpmVocab {
  const words: string[] = [SPACE];
  for (let c = 33; c < 127; c++) words.push(String.fromCharCode(c));
  const budget = size - 3 - 256 - 2;
  let level = [''];
  while (words.length < budget) {
    const next: string[] = [];
    for (const stem of level) for (const l of LETTERS) next.push(stem + l);
    for (const w of next) {
      if (words.length >= budget) break;
      words.push(SPACE + w);
    }
    for (const w of next) {
      if (words.length >= budget) break;
      if (w.length > 1) words.push(w);
    }
    level = next;
  }
  words.length = Math.min(words.length, budget);
  return buildSpmVocab({
    special: [
      { text: '<|im_start|>', type: 'CONTROL' },
      { text: '<|im_end|>', type: 'CONTROL' },
    ],
    words,
    prefixClosure: false,
    addSpacePrefix: true,
    minSize: size,
  });
}

function resolveShape(options: RandomModelOptions): LlamaShape {
  const base = RANDOM_MODEL_PRESETS[options.preset ?? '250m'];
  if (base === undefined) throw new RangeError(`Unknown preset "${String(options.preset)}"`);
  const shape: LlamaShape = {
    nLayer: options.nLayer ?? base.nLayer,
    nEmbd: options.nEmbd ?? base.nEmbd,
    nHead: options.nHead ?? base.nHead,
    nHeadKv: options.nHeadKv ?? options.nHead ?? base.nHeadKv,
    nFf: options.nFf ?? base.nFf,
    nVocab: options.nVocab ?? base.nVocab,
    contextLength: options.contextLength ?? base.contextLength,
  };
  for (const [k, v] of Object.entries(shape)) {
    if (!Number.isInteger(v) || v <= 0) throw new RangeError(`Expected ${k} to be a positive integer but received ${String(v)}`);
  }
  if (shape.nEmbd % shape.nHead !== 0) throw new RangeError('Expected nEmbd to be a multiple of nHead');
  if (shape.nHead % shape.nHeadKv !== 0) throw new RangeError('Expected nHead to be a multiple of nHeadKv');
  if ((shape.nEmbd / shape.nHead) % 2 !== 0) throw new RangeError('Expected an even head size');
  if (shape.nEmbd % 32 !== 0 || shape.nFf % 32 !== 0) throw new RangeError('Expected nEmbd and nFf to be multiples of 32');
  if (shape.nVocab < 3 + 256 + 2 + 95) throw new RangeError('Expected nVocab of at least 356');
  return shape;
}

/** Parameter count of a llama shape (untied output head). */
export function llamaParameterCount(s: LlamaShape): number {
  const headDim = s.nEmbd / s.nHead;
  const kv = headDim * s.nHeadKv;
  const perLayer = 2 * s.nEmbd + 2 * s.nEmbd * s.nEmbd + 2 * s.nEmbd * kv + 3 * s.nEmbd * s.nFf;
  return 2 * s.nVocab * s.nEmbd + s.nEmbd + s.nLayer * perLayer;
}

/**
 * The GGUF content of a random-weight llama model. Tensor data comes from per-tensor seeded
 * generators (uniform in ±0.02, norms 1), produced chunk by chunk while writing.
 */
export function randomModelSpec(options: RandomModelOptions = {}): GgufSpec {
  const s = resolveShape(options);
  const type = options.type ?? 'Q8_0';
  const seed = options.seed ?? 1;
  const vocab = syntheticVocab(s.nVocab);
  const headDim = s.nEmbd / s.nHead;
  const kv = headDim * s.nHeadKv;
  const fileType = type === 'Q8_0' ? LlamaFileType.MOSTLY_Q8_0 : type === 'F16' ? LlamaFileType.MOSTLY_F16 : LlamaFileType.ALL_F32;
  const metadata: Array<[string, GgufValue]> = [
    ['general.architecture', val.string('llama')],
    ['general.name', val.string(`llamux-random-${options.preset ?? '250m'}-${type.toLowerCase()}`)],
    ['general.description', val.string(`llamux random-weight benchmark model (generated, seed ${seed})`)],
    ['general.file_type', val.u32(fileType)],
    ['general.quantization_version', val.u32(2)],
    ['llama.vocab_size', val.u32(s.nVocab)],
    ['llama.context_length', val.u32(s.contextLength)],
    ['llama.embedding_length', val.u32(s.nEmbd)],
    ['llama.block_count', val.u32(s.nLayer)],
    ['llama.feed_forward_length', val.u32(s.nFf)],
    ['llama.attention.head_count', val.u32(s.nHead)],
    ['llama.attention.head_count_kv', val.u32(s.nHeadKv)],
    ['llama.rope.dimension_count', val.u32(headDim)],
    ['llama.rope.freq_base', val.f32(10000)],
    ['llama.attention.layer_norm_rms_epsilon', val.f32(1e-5)],
    ...vocab.metadata(),
  ];
  const template = options.chatTemplate === undefined ? CHATML_TOOLS_TEMPLATE : options.chatTemplate;
  if (template !== null) metadata.push(['tokenizer.chat_template', val.string(template)]);

  const random = (name: string, shape: number[]): GgufTensorSpec => {
    let prng: Prng | undefined;
    return {
      name,
      shape,
      type,
      data: (start, out) => {
        if (start === 0 || prng === undefined) prng = new Prng(hashSeed(seed, name));
        prng.fillUniform(out, 0.02);
      },
    };
  };
  const ones = (name: string, n: number): GgufTensorSpec => ({
    name,
    shape: [n],
    type: 'F32',
    data: (_start, out) => out.fill(1),
  });
  const tensors: GgufTensorSpec[] = [
    random('token_embd.weight', [s.nEmbd, s.nVocab]),
    ones('output_norm.weight', s.nEmbd),
    random('output.weight', [s.nEmbd, s.nVocab]),
  ];
  for (let i = 0; i < s.nLayer; i++) {
    const b = `blk.${i}`;
    tensors.push(
      ones(`${b}.attn_norm.weight`, s.nEmbd),
      random(`${b}.attn_q.weight`, [s.nEmbd, s.nEmbd]),
      random(`${b}.attn_k.weight`, [s.nEmbd, kv]),
      random(`${b}.attn_v.weight`, [s.nEmbd, kv]),
      random(`${b}.attn_output.weight`, [s.nEmbd, s.nEmbd]),
      ones(`${b}.ffn_norm.weight`, s.nEmbd),
      random(`${b}.ffn_gate.weight`, [s.nEmbd, s.nFf]),
      random(`${b}.ffn_up.weight`, [s.nEmbd, s.nFf]),
      random(`${b}.ffn_down.weight`, [s.nFf, s.nEmbd]),
    );
  }
  return { metadata, tensors };
}

/**
 * Writes a random-weight llama model to `path` (atomically, streamed: memory stays at a few
 * MiB). Deterministic for a given options object. The 250m preset takes seconds in Q8_0.
 *
 * @example
 * const info = await writeRandomModel('.cache/bench/random-250m-q8_0.gguf', { preset: '250m', type: 'Q8_0' });
 */
export async function writeRandomModel(path: string, options: RandomModelOptions = {}): Promise<RandomModelInfo> {
  const shape = resolveShape(options);
  const type = options.type ?? 'Q8_0';
  const layout = await writeGgufFile(path, randomModelSpec(options));
  return { path, type, ...shape, parameterCount: llamaParameterCount(shape), fileSize: layout.fileSize };
}
