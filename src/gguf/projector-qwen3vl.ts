/**
 * A Qwen3-VL-style projector (`qwen3vl_merger`, the family Qwen3-VL and Qwen3.5's own mmproj
 * files use) with random weights, for tests: the layout llama.cpp's clip loader reads for it
 * (tools/mtmd/clip.cpp, models/qwen3vl.cpp).
 *
 * The ViT: two patch convolutions (`v.patch_embd.weight` and `.weight.1`, the two temporal
 * frames; a still image goes through both and they are summed), the patches reordered into 2×2
 * groups, a patch bias and learned position embeddings (`v.position_embd.weight`, one per patch
 * of an `imageSize`² image: other sizes would be interpolated), pre-norm blocks with one fused
 * biased QKV and 2D vision M-RoPE (y, x), a GELU MLP, a final layer norm; then every 2×2 group
 * concatenated and mapped by `mm.0` → GELU → `mm.2` to the text width. No deepstack layers.
 *
 * Images keep their size when it is a multiple of patchSize × 2 and between 8 and 4096
 * embeddings (libmtmd's limits for the family): an image w×h gives (w/2p)·(h/2p) embeddings
 * and, on the text model's M-RoPE, advances the position by max(w/2p, h/2p).
 */
import { encoderBlocks, projectorTensors, visionMetadata } from './projector.js';
import { val } from './types.js';
import type { GgufSpec } from './types.js';

/** Options of {@link buildQwen3vlProjectorSpec}. */
export interface Qwen3vlProjectorOptions {
  /** The text model's embedding width: the projector's output width. */
  readonly projectionDim: number;
  /** Default 1. Different seeds give different weights. */
  readonly seed?: number;
  /** Side of the square image the position embeddings are learned for. Default 24 (9 embeddings). */
  readonly imageSize?: number;
  /** Default 4. */
  readonly patchSize?: number;
  /** ViT width. Default 32. */
  readonly visionEmbd?: number;
  /** Default 1. */
  readonly blocks?: number;
  /** Default 2 (head size 16: four rotary sections of 4). */
  readonly heads?: number;
  /** ViT MLP width. Default 48. */
  readonly feedForward?: number;
  /** Merger hidden width. Default 64. */
  readonly mergerHidden?: number;
}

/** What a test may know about a generated Qwen3-VL projector. */
export interface Qwen3vlProjectorDescription {
  readonly family: 'qwen3vl';
  readonly projectionDim: number;
  readonly imageSize: number;
  readonly patchSize: number;
  readonly visionEmbd: number;
  readonly heads: number;
  readonly feedForward: number;
  readonly mergerHidden: number;
  readonly blocks: number;
}

/** The GGUF content of a qwen3vl_merger projector with random weights, and its description. */
export function buildQwen3vlProjectorSpec(options: Qwen3vlProjectorOptions): { spec: GgufSpec; description: Qwen3vlProjectorDescription } {
  const seed = options.seed ?? 1;
  const imageSize = options.imageSize ?? 24;
  const patch = options.patchSize ?? 4;
  const v = options.visionEmbd ?? 32;
  const blocks = options.blocks ?? 1;
  const heads = options.heads ?? 2;
  const ff = options.feedForward ?? 48;
  const hidden = options.mergerHidden ?? 64;
  const out = options.projectionDim;
  const side = imageSize / patch;
  if (!Number.isInteger(side) || side % 2 !== 0) throw new RangeError(`imageSize ${imageSize} must be a multiple of 2 × patchSize (${2 * patch})`);
  if (v % heads !== 0 || (v / heads) % 4 !== 0) throw new RangeError(`visionEmbd ${v} / heads ${heads} must be a multiple of 4 (M-RoPE sections)`);
  if (ff === v) throw new RangeError('feedForward must differ from visionEmbd (clip.cpp swaps up/down when they look transposed)');
  const { tensors, rand, fill } = projectorTensors(seed);
  // conv2d kernels in ggml order: [kernel w, kernel h, in channels, out channels]
  rand('v.patch_embd.weight', [patch, patch, 3, v], 1 / Math.sqrt(patch * patch * 6));
  rand('v.patch_embd.weight.1', [patch, patch, 3, v], 1 / Math.sqrt(patch * patch * 6));
  rand('v.patch_embd.bias', [v], 0.1);
  rand('v.position_embd.weight', [v, side * side], 0.1);
  encoderBlocks({ rand, fill }, { prefix: 'v', blocks, width: v, feedForward: ff, attention: 'fused' });
  fill('v.post_ln.weight', [v], 1);
  fill('v.post_ln.bias', [v], 0);
  rand('mm.0.weight', [4 * v, hidden]);
  rand('mm.0.bias', [hidden], 0.05);
  rand('mm.2.weight', [hidden, out]);
  rand('mm.2.bias', [out], 0.05);
  const metadata = [
    ...visionMetadata({ family: 'qwen3vl', projectorType: 'qwen3vl_merger', seed, imageSize, patch, embd: v, feedForward: ff, blocks, heads, projectionDim: out }),
    ['clip.vision.spatial_merge_size', val.u32(2)] as const,
  ];
  return {
    spec: { metadata, tensors },
    description: { family: 'qwen3vl', projectionDim: out, imageSize, patchSize: patch, visionEmbd: v, heads, feedForward: ff, mergerHidden: hidden, blocks },
  };
}
