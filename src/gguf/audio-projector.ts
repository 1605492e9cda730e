/**
 * Audio projectors (an `mmproj` file with an audio encoder) with random weights, for tests: the
 * tensors and keys llama.cpp's clip loader reads for the `qwen2a` family (Qwen2-Audio; its text
 * side is a Qwen model, so it pairs with the zoo's qwen3), sized to a zoo text model's width.
 *
 * Family `qwen2a`: libmtmd turns 16 kHz mono samples into a Whisper log-mel spectrogram (its
 * filterbank is computed in code from `numMelBins`, so the file holds no filters), cut into
 * 30-second windows of 3000 frames. Each window goes through two 1-D convolutions (kernel 3,
 * the second with stride 2) with GELU, learned positions, pre-norm transformer blocks (Whisper:
 * no bias on K), a 2-frame average pool, a final layer norm and one linear map to the text width:
 * 3000 / 2 / 2 = 750 embeddings per window, whatever the clip's length up to 30 s.
 */
import { encoderBlocks, projectorTensors } from './projector.js';
import { val } from './types.js';
import type { GgufSpec, GgufValue } from './types.js';

/** Options of {@link buildAudioProjectorSpec}. */
export interface AudioProjectorOptions {
  /** The text model's embedding width (llama_model_n_embd_inp): the projector's output width. */
  readonly projectionDim: number;
  /** Default 1. Different seeds give different weights. */
  readonly seed?: number;
  /** Mel bins of the spectrogram (the first convolution's input channels). Default 80 (Whisper). */
  readonly numMelBins?: number;
  /** Encoder width. Default 32. */
  readonly audioEmbd?: number;
  /** Default 1. */
  readonly blocks?: number;
  /** Default 2. */
  readonly heads?: number;
  /** Encoder MLP width. Default 48 (different from the width: clip.cpp swaps up/down when they look transposed). */
  readonly feedForward?: number;
}

/** What a test may know about a generated audio projector. */
export interface AudioProjectorDescription {
  readonly family: 'qwen2a';
  readonly projectionDim: number;
  readonly sampleRate: 16000;
  readonly numMelBins: number;
  /** Samples per window the encoder sees (30 s): longer clips are several windows. */
  readonly samplesPerWindow: number;
  /** Embeddings (positions in the text model's context) per 30-second window. */
  readonly tokensPerWindow: number;
  /** Text libmtmd writes around each clip's embeddings. */
  readonly begin: '<|audio_bos|>';
  readonly end: '<|audio_eos|>';
}

/** Mel frames per 30-second window (hop 160 at 16 kHz), as libmtmd's Whisper preprocessor cuts them. */
const FRAMES_PER_WINDOW = 3000;

/** The GGUF content of a qwen2a-style audio projector with random weights, and its description. */
export function buildAudioProjectorSpec(options: AudioProjectorOptions): { spec: GgufSpec; description: AudioProjectorDescription } {
  const seed = options.seed ?? 1;
  const mel = options.numMelBins ?? 80;
  const a = options.audioEmbd ?? 32;
  const blocks = options.blocks ?? 1;
  const heads = options.heads ?? 2;
  const ff = options.feedForward ?? 48;
  const out = options.projectionDim;
  if (a % heads !== 0) throw new RangeError(`audioEmbd ${a} must be a multiple of heads ${heads}`);
  if (ff === a) throw new RangeError('feedForward must differ from audioEmbd (clip.cpp swaps up/down when they look transposed)');
  const positions = FRAMES_PER_WINDOW / 2; // after the stride-2 convolution
  const { tensors, rand, fill } = projectorTensors(seed);
  // conv1d kernels in ggml order: [kernel, in channels, out channels]
  rand('a.conv1d.1.weight', [3, mel, a], 1 / Math.sqrt(3 * mel));
  rand('a.conv1d.1.bias', [1, a], 0.1); // [1, a]: added across the frames
  rand('a.conv1d.2.weight', [3, a, a], 1 / Math.sqrt(3 * a));
  rand('a.conv1d.2.bias', [1, a], 0.1);
  rand('a.position_embd.weight', [a, positions], 0.1);
  encoderBlocks({ rand, fill }, { prefix: 'a', blocks, width: a, feedForward: ff, attention: 'separate', kBias: false });
  fill('a.post_ln.weight', [a], 1);
  fill('a.post_ln.bias', [a], 0);
  rand('mm.a.fc.weight', [a, out], 1 / Math.sqrt(a));
  rand('mm.a.fc.bias', [out], 0.05);

  const metadata: Array<readonly [string, GgufValue]> = [
    ['general.architecture', val.string('clip')],
    ['general.name', val.string('llamux-test-mmproj-qwen2a')],
    ['general.description', val.string(`llamux test projector: random weights with the qwen2a (Whisper encoder) layout, seed ${seed}`)],
    ['general.file_type', val.u32(0)],
    ['clip.has_audio_encoder', val.bool(true)],
    ['clip.projector_type', val.string('qwen2a')],
    ['clip.audio.num_mel_bins', val.u32(mel)],
    ['clip.audio.embedding_length', val.u32(a)],
    ['clip.audio.feed_forward_length', val.u32(ff)],
    ['clip.audio.block_count', val.u32(blocks)],
    ['clip.audio.projection_dim', val.u32(out)],
    ['clip.audio.attention.head_count', val.u32(heads)],
    ['clip.audio.attention.layer_norm_epsilon', val.f32(1e-5)],
  ];
  return {
    spec: { metadata, tensors },
    description: {
      family: 'qwen2a',
      projectionDim: out,
      sampleRate: 16000,
      numMelBins: mel,
      samplesPerWindow: 16000 * 30,
      tokensPerWindow: FRAMES_PER_WINDOW / 2 / 2,
      begin: '<|audio_bos|>',
      end: '<|audio_eos|>',
    },
  };
}
