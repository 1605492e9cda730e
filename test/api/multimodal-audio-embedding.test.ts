// The audio embeddings libmtmd computes with the generated qwen2a projector equal an independent
// computation from the file's weights (issue 37), written out here in plain loops (float64):
// the Whisper log-mel spectrogram (reflect-padded, 30 s of trailing silence, periodic Hann
// window of 400, hop 160, Slaney mel filterbank, log10, clamped 8 below the peak, (x + 4) / 4),
// its first window of 3000 frames, two 1-D convolutions (kernel 3, strides 1 and 2) with erf
// GELU, learned positions, one pre-norm block (no K bias), a 2-frame average pool, the final
// norm and the linear map to the text width. ggml's 1-D convolution multiplies in F16 (im2col):
// the reference rounds the same operands, so the tolerance is float32's, not half's.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { buildAudioProjectorSpec } from '../../src/gguf/index.js';
import { f16FromNumber, f16ToNumber } from '../../src/gguf/f16.js';
import { native } from '../../src/native/binding.js';
import { encodeWav, testSignal } from '../helpers/audio.js';
import { ensureAudioProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

function weights(projectionDim: number): Map<string, Float64Array> {
  const out = new Map<string, Float64Array>();
  for (const t of buildAudioProjectorSpec({ projectionDim }).spec.tensors) {
    const buf = new Float32Array(t.shape.reduce((a, b) => a * b, 1));
    (t.data as (start: number, out: Float32Array) => void)(0, buf);
    out.set(t.name, Float64Array.from(buf));
  }
  return out;
}

// erf to 1.2e-7 (Numerical Recipes' erfc by Chebyshev fit): far below float32's own error here
function erf(x: number): number {
  const z = Math.abs(x);
  const t = 1 / (1 + 0.5 * z);
  const r = t * Math.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0 ? 1 - r : r - 1;
}
const geluErf = (x: number): number => 0.5 * x * (1 + erf(x / Math.SQRT2));
// ggml_conv_1d multiplies through im2col in F16: its input and its kernel are rounded to half
const half = (x: number): number => f16ToNumber(f16FromNumber(x));

/** Whisper's log-mel spectrogram of `samples` (16 kHz): [mel][frame], the first `frames` frames. */
function logMel(samples: Float64Array, nMel: number, frames: number): Float64Array[] {
  const N = 400, hop = 160, bins = N / 2 + 1, rate = 16000, pad = N / 2;
  const padded = new Float64Array(samples.length + rate * 30 + 2 * pad);
  for (let i = 0; i < pad; i++) padded[i] = samples[pad - i]!; // reflection, without the edge sample
  padded.set(samples, pad);
  const nLen = (padded.length - N) / hop + 1;
  expect(nLen).toBeGreaterThanOrEqual(frames);
  // Slaney mel scale and area-normalized triangles over the FFT bins
  const toMel = (f: number) => (f < 1000 ? (f * 3) / 200 : 15 + Math.log(f / 1000) / (Math.log(6.4) / 27));
  const toHz = (m: number) => (m < 15 ? (m * 200) / 3 : 1000 * Math.exp((m - 15) * (Math.log(6.4) / 27)));
  const hz = Array.from({ length: nMel + 2 }, (_, i) => toHz((toMel(rate / 2) * i) / (nMel + 1)));
  const filters = Array.from({ length: nMel }, (_, m) =>
    Array.from({ length: bins }, (_, k) => {
      const f = (k * rate) / N;
      const [l, c, r] = [hz[m]!, hz[m + 1]!, hz[m + 2]!];
      const w = f >= l && f <= c ? (f - l) / (c - l) : f > c && f <= r ? (r - f) / (r - c) : 0;
      return (w * 2) / (r - l);
    }),
  );
  const hann = Array.from({ length: N }, (_, j) => 0.5 * (1 - Math.cos((2 * Math.PI * j) / N)));
  const cos = Array.from({ length: N }, (_, j) => Math.cos((2 * Math.PI * j) / N));
  const sin = Array.from({ length: N }, (_, j) => Math.sin((2 * Math.PI * j) / N));
  const mel = Array.from({ length: nMel }, () => new Float64Array(frames));
  const frame = new Float64Array(N);
  const power = new Float64Array(bins);
  let peak = -Infinity;
  for (let t = 0; t < frames; t++) {
    for (let j = 0; j < N; j++) frame[j] = hann[j]! * padded[t * hop + j]!;
    const silent = frame.every((x) => x === 0); // the 30 s of padding: no power in any bin
    for (let k = 0; k < bins && !silent; k++) {
      let re = 0, im = 0;
      for (let j = 0; j < N; j++) {
        const idx = (k * j) % N;
        re += frame[j]! * cos[idx]!;
        im -= frame[j]! * sin[idx]!;
      }
      power[k] = re * re + im * im;
    }
    for (let m = 0; m < nMel; m++) {
      let s = 0;
      for (let k = 0; k < bins && !silent; k++) s += power[k]! * filters[m]![k]!;
      const v = Math.log10(Math.max(s, 5.960464477539063e-8));
      mel[m]![t] = v;
      peak = Math.max(peak, v);
    }
  }
  // the frames past `frames` are silence (the clip is shorter than the window): the peak is here
  for (const row of mel) for (let t = 0; t < frames; t++) row[t] = (Math.max(row[t]!, peak - 8) + 4) / 4;
  return mel;
}

const layerNorm = (x: Float64Array, w: Float64Array, b: Float64Array, eps: number): Float64Array => {
  const mean = x.reduce((a, v) => a + v, 0) / x.length;
  const v = x.reduce((a, t) => a + (t - mean) ** 2, 0) / x.length;
  return x.map((t, i) => ((t - mean) / Math.sqrt(v + eps)) * w[i]! + b[i]!);
};

/** out[o] = sum_i W[i + inDim * o] x[i] + bias[o] (ggml_mul_mat with W of ne = [inDim, outDim]). */
function linear(W: Float64Array, bias: Float64Array | undefined, x: Float64Array, inDim: number, outDim: number): Float64Array {
  const out = new Float64Array(outDim);
  for (let o = 0; o < outDim; o++) {
    let s = bias ? bias[o]! : 0;
    for (let i = 0; i < inDim; i++) s += W[i + inDim * o]! * x[i]!;
    out[o] = s;
  }
  return out;
}

/** ggml_conv_1d_ph then GELU: out[t][o] = gelu(b[o] + sum_{c,k} W[k + K c + K C o] in[c][t s + k - 1]), zero padding 1, W and in rounded to F16. */
function conv1d(W: Float64Array, b: Float64Array, input: Float64Array[], inCh: number, outCh: number, stride: number): Float64Array[] {
  const Wh = W.map(half);
  const inh = input.map((r) => r.map(half));
  const len = input[0]!.length;
  const outLen = Math.floor((len + 2 - 3) / stride) + 1;
  const out = Array.from({ length: outCh }, () => new Float64Array(outLen));
  for (let o = 0; o < outCh; o++) {
    for (let t = 0; t < outLen; t++) {
      let s = b[o]!;
      for (let c = 0; c < inCh; c++) {
        const row = inh[c]!;
        for (let k = 0; k < 3; k++) {
          const at = t * stride + k - 1;
          if (at >= 0 && at < len) s += Wh[k + 3 * c + 3 * inCh * o]! * row[at]!;
        }
      }
      out[o]![t] = geluErf(s);
    }
  }
  return out;
}

function reference(w: Map<string, Float64Array>, samples: Float64Array, nMel: number, A: number, F: number, H: number, textEmbd: number): Float64Array[] {
  const g = (n: string) => w.get(n)!;
  const eps = 1e-5, D = A / H;
  const mel = logMel(samples, nMel, 3000);
  const c1 = conv1d(g('a.conv1d.1.weight'), g('a.conv1d.1.bias'), mel, nMel, A, 1);
  const c2 = conv1d(g('a.conv1d.2.weight'), g('a.conv1d.2.bias'), c1, A, A, 2);
  const P = c2[0]!.length; // 1500 positions
  const pos = g('a.position_embd.weight');
  let h = Array.from({ length: P }, (_, p) => Float64Array.from({ length: A }, (_, i) => c2[i]![p]! + pos[i + A * p]!));
  const n1 = h.map((x) => layerNorm(x, g('a.blk.0.ln1.weight'), g('a.blk.0.ln1.bias'), eps));
  const q = n1.map((x) => linear(g('a.blk.0.attn_q.weight'), g('a.blk.0.attn_q.bias'), x, A, A));
  const k = n1.map((x) => linear(g('a.blk.0.attn_k.weight'), undefined, x, A, A));
  const v = n1.map((x) => linear(g('a.blk.0.attn_v.weight'), g('a.blk.0.attn_v.bias'), x, A, A));
  const scores = new Float64Array(P);
  h = h.map((x, i) => {
    const o = new Float64Array(A);
    for (let head = 0; head < H; head++) {
      let mx = -Infinity;
      for (let j = 0; j < P; j++) {
        let s = 0;
        for (let d = 0; d < D; d++) s += q[i]![head * D + d]! * k[j]![head * D + d]!;
        scores[j] = s / Math.sqrt(D);
        mx = Math.max(mx, scores[j]!);
      }
      let z = 0;
      for (let j = 0; j < P; j++) z += scores[j] = Math.exp(scores[j]! - mx);
      for (let j = 0; j < P; j++) for (let d = 0; d < D; d++) o[head * D + d] += (scores[j]! / z) * v[j]![head * D + d]!;
    }
    const att = linear(g('a.blk.0.attn_out.weight'), g('a.blk.0.attn_out.bias'), o, A, A);
    const r = x.map((t, d) => t + att[d]!);
    const n2 = layerNorm(r, g('a.blk.0.ln2.weight'), g('a.blk.0.ln2.bias'), eps);
    const up = linear(g('a.blk.0.ffn_up.weight'), g('a.blk.0.ffn_up.bias'), n2, A, F).map(geluErf);
    const down = linear(g('a.blk.0.ffn_down.weight'), g('a.blk.0.ffn_down.bias'), up, F, A);
    return r.map((t, d) => t + down[d]!);
  });
  const out: Float64Array[] = [];
  for (let p = 0; p + 1 < P; p += 2) {
    const pooled = h[p]!.map((t, d) => (t + h[p + 1]![d]!) / 2);
    const n = layerNorm(pooled, g('a.post_ln.weight'), g('a.post_ln.bias'), eps);
    out.push(linear(g('mm.a.fc.weight'), g('mm.a.fc.bias'), n, A, textEmbd));
  }
  return out;
}

describe('qwen2a projector audio embeddings (libmtmd) against an independent computation', () => {
  let model: Model;
  let nEmbd: number;
  beforeAll(async () => {
    const text = (await zooModels(['qwen3']))['qwen3'];
    nEmbd = text.nEmbd;
    model = await loadModel(text.path, { projector: (await ensureAudioProjector({ projectionDim: nEmbd })).path });
  });
  afterAll(async () => {
    await model?.dispose();
  });

  it('equals the reference within float32 tolerance', async () => {
    const w = weights(nEmbd);
    const signal = testSignal(1.25, 5);
    const wav = encodeWav(signal);
    // what the decoder hands libmtmd: the 16-bit samples over 32768
    const samples = Float64Array.from({ length: signal.length }, (_, i) => wav.readInt16LE(44 + 2 * i) / 32768);
    const got = await native.mediaEmbeddings(model.nativeHandle(), wav);
    const want = reference(w, samples, 80, 32, 48, 2, nEmbd);
    expect(want.length).toBe(750);
    expect(got.length).toBe(want.length * nEmbd);
    let maxErr = 0;
    let maxAbs = 0;
    want.forEach((row, t) => row.forEach((v, d) => {
      maxErr = Math.max(maxErr, Math.abs(got[t * nEmbd + d]! - v));
      maxAbs = Math.max(maxAbs, Math.abs(v));
    }));
    expect(maxAbs).toBeGreaterThan(0.1);
    // With the F16 rounding of the convolutions reproduced, what is left is float32 arithmetic
    // (~1e-6 relative) and the few convolution inputs whose float32 value lies on the other side
    // of a half-way point than the float64 one: one F16 step (2^-11 of a value near 1) times a
    // kernel weight (at most 1/sqrt(240)), spread by the layers after: measured 2.7e-5 of the
    // output's scale on x64; without the F16 rounding the error is 3e-4, over the bound.
    expect(maxErr).toBeLessThan(2e-4 * maxAbs);
  });
});
