/**
 * Multimodal projectors (the `mmproj` file libmtmd loads beside a text model) with random
 * weights, for tests: the tensor layout and keys llama.cpp's clip loader (tools/mtmd/clip.cpp)
 * reads for a projector family, sized to pair with a zoo text model (`projectionDim` is the
 * text model's embedding width).
 *
 * Family `gemma3`: a SigLIP-style ViT (patch convolution with bias, learned position
 * embeddings, pre-norm blocks with biased attention and a GELU MLP, a final layer norm), then
 * an average pool of `scaleFactor`² patches, an RMS norm (`mm.soft_emb_norm`) and a linear map
 * to the text width (`mm.input_projection`). Images are resized to `imageSize`² (fixed size),
 * so every image is `(imageSize / patchSize / scaleFactor)²` embeddings.
 */
import { hashSeed, Prng } from './prng.js';
import { val } from './types.js';
import type { GgufSpec, GgufTensorSpec, GgufValue } from './types.js';

/**
 * The tensor list of a generated projector and its two kinds of F32 tensors: `rand` (uniform in
 * ±scale from a stream seeded by the file's seed and the tensor's name, so a tensor's values do
 * not depend on the others) and `fill` (a constant). Shared by the projector generators.
 */
export function projectorTensors(seed: number): {
  tensors: GgufTensorSpec[];
  rand: (name: string, shape: number[], scale?: number) => void;
  fill: (name: string, shape: number[], value: number) => void;
} {
  const tensors: GgufTensorSpec[] = [];
  const rand = (name: string, shape: number[], scale = 1 / Math.sqrt(shape[0]!)): void => {
    let prng: Prng | undefined;
    tensors.push({
      name,
      shape,
      type: 'F32',
      data: (start, buf) => {
        if (start === 0 || prng === undefined) prng = new Prng(hashSeed(seed, `mmproj:${name}`));
        prng.fillUniform(buf, scale);
      },
    });
  };
  const fill = (name: string, shape: number[], value: number): void => {
    tensors.push({ name, shape, type: 'F32', data: (_s, buf) => buf.fill(value) });
  };
  return { tensors, rand, fill };
}

/**
 * The pre-norm transformer blocks every generated encoder has (`<prefix>.blk.<i>`: ln1, attention,
 * ln2, GELU MLP), in the tensor order clip.cpp reads. Attention is one fused `attn_qkv` (Qwen-VL)
 * or separate q/k/v (`kBias: false`: Whisper's K has no bias, clip.cpp asserts it).
 */
export function encoderBlocks(
  t: Pick<ReturnType<typeof projectorTensors>, 'rand' | 'fill'>,
  o: { prefix: string; blocks: number; width: number; feedForward: number; attention: 'fused' | 'separate'; kBias?: boolean },
): void {
  const { rand, fill } = t;
  const w = o.width;
  const ff = o.feedForward;
  for (let i = 0; i < o.blocks; i++) {
    const p = `${o.prefix}.blk.${i}`;
    fill(`${p}.ln1.weight`, [w], 1);
    fill(`${p}.ln1.bias`, [w], 0);
    if (o.attention === 'fused') {
      rand(`${p}.attn_qkv.weight`, [w, 3 * w]);
      rand(`${p}.attn_qkv.bias`, [3 * w], 0.05);
      rand(`${p}.attn_out.weight`, [w, w]);
      rand(`${p}.attn_out.bias`, [w], 0.05);
    } else {
      for (const a of ['attn_q', 'attn_k', 'attn_v', 'attn_out']) {
        rand(`${p}.${a}.weight`, [w, w]);
        if (a !== 'attn_k' || o.kBias !== false) rand(`${p}.${a}.bias`, [w], 0.05);
      }
    }
    fill(`${p}.ln2.weight`, [w], 1);
    fill(`${p}.ln2.bias`, [w], 0);
    rand(`${p}.ffn_up.weight`, [w, ff]);
    rand(`${p}.ffn_up.bias`, [ff], 0.05);
    rand(`${p}.ffn_down.weight`, [ff, w]);
    rand(`${p}.ffn_down.bias`, [w], 0.05);
  }
}

/** Options of {@link buildProjectorSpec}. */
export interface ProjectorOptions {
  /** The text model's embedding width (llama_model_n_embd_inp): the projector's output width. */
  readonly projectionDim: number;
  /** Default 1. Different seeds give different weights. */
  readonly seed?: number;
  /** Side of the (square) image the encoder sees, in pixels. Default 32. */
  readonly imageSize?: number;
  /** Default 4: (32 / 4)² = 64 patches. */
  readonly patchSize?: number;
  /** Patches pooled per side. Default 2: 16 embeddings per image. */
  readonly scaleFactor?: number;
  /** ViT width. Default 32. */
  readonly visionEmbd?: number;
  /** Default 1. */
  readonly blocks?: number;
  /** Default 2. */
  readonly heads?: number;
  /** ViT MLP width. Default 48 (different from the width, so clip.cpp's legacy up/down swap never applies). */
  readonly feedForward?: number;
}

/** What a test may know about a generated projector. */
export interface ProjectorDescription {
  readonly family: 'gemma3';
  readonly projectionDim: number;
  readonly imageSize: number;
  readonly patchSize: number;
  readonly scaleFactor: number;
  /** Embeddings (positions in the text model's context) per image. */
  readonly tokensPerImage: number;
}

/** The clip keys every generated vision projector writes (GELU MLP, mean/std 0.5). */
export function visionMetadata(o: {
  family: string; projectorType: string; seed: number; imageSize: number; patch: number; embd: number; feedForward: number; blocks: number; heads: number; projectionDim: number;
}): Array<readonly [string, GgufValue]> {
  return [
    ['general.architecture', val.string('clip')],
    ['general.name', val.string(`llamux-test-mmproj-${o.family}`)],
    ['general.description', val.string(`llamux test projector: random weights with the ${o.family} layout, seed ${o.seed}`)],
    ['general.file_type', val.u32(0)],
    ['clip.has_vision_encoder', val.bool(true)],
    ['clip.projector_type', val.string(o.projectorType)],
    ['clip.use_gelu', val.bool(true)],
    ['clip.vision.image_size', val.u32(o.imageSize)],
    ['clip.vision.patch_size', val.u32(o.patch)],
    ['clip.vision.embedding_length', val.u32(o.embd)],
    ['clip.vision.feed_forward_length', val.u32(o.feedForward)],
    ['clip.vision.block_count', val.u32(o.blocks)],
    ['clip.vision.projection_dim', val.u32(o.projectionDim)],
    ['clip.vision.attention.head_count', val.u32(o.heads)],
    ['clip.vision.attention.layer_norm_epsilon', val.f32(1e-6)],
    ['clip.vision.image_mean', val.array('f32', [0.5, 0.5, 0.5])],
    ['clip.vision.image_std', val.array('f32', [0.5, 0.5, 0.5])],
  ];
}

/** The GGUF content of a gemma3-style projector with random weights, and its description. */
export function buildProjectorSpec(options: ProjectorOptions): { spec: GgufSpec; description: ProjectorDescription } {
  const seed = options.seed ?? 1;
  const imageSize = options.imageSize ?? 32;
  const patch = options.patchSize ?? 4;
  const merge = options.scaleFactor ?? 2;
  const v = options.visionEmbd ?? 32;
  const blocks = options.blocks ?? 1;
  const heads = options.heads ?? 2;
  const ff = options.feedForward ?? 48;
  const out = options.projectionDim;
  const side = imageSize / patch;
  if (!Number.isInteger(side) || side % merge !== 0) throw new RangeError(`imageSize ${imageSize} must be a multiple of patchSize × scaleFactor (${patch * merge})`);
  if (v % heads !== 0) throw new RangeError(`visionEmbd ${v} must be a multiple of heads ${heads}`);
  if (ff === v) throw new RangeError('feedForward must differ from visionEmbd (clip.cpp swaps up/down when they look transposed)');
  const nPatches = side * side;
  const { tensors, rand, fill } = projectorTensors(seed);
  // conv2d kernel in ggml order: [kernel w, kernel h, in channels, out channels]
  rand('v.patch_embd.weight', [patch, patch, 3, v], 1 / Math.sqrt(patch * patch * 3));
  rand('v.patch_embd.bias', [v], 0.1);
  rand('v.position_embd.weight', [v, nPatches], 0.1);
  encoderBlocks({ rand, fill }, { prefix: 'v', blocks, width: v, feedForward: ff, attention: 'separate' });
  fill('v.post_ln.weight', [v], 1);
  fill('v.post_ln.bias', [v], 0);
  fill('mm.soft_emb_norm.weight', [v], 1);
  // used transposed (siglip.cpp): [text width, vision width] in ggml order
  rand('mm.input_projection.weight', [out, v], 1 / Math.sqrt(v));

  const metadata: Array<readonly [string, GgufValue]> = [
    ...visionMetadata({ family: 'gemma3', projectorType: 'gemma3', seed, imageSize, patch, embd: v, feedForward: ff, blocks, heads, projectionDim: out }),
    ['clip.vision.projector.scale_factor', val.u32(merge)],
  ];
  const n = (side / merge) ** 2;
  return {
    spec: { metadata, tensors },
    description: { family: 'gemma3', projectionDim: out, imageSize, patchSize: patch, scaleFactor: merge, tokensPerImage: n },
  };
}
