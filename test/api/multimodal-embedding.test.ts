// The image embeddings libmtmd computes with the generated gemma3 projector equal an independent
// computation from the file's weights (issue 37): the SigLIP-style ViT, pooling, norm and
// projection written out here in plain loops, in the order clip.cpp's graph defines (patch
// convolution, learned positions, one pre-norm block, post norm, 2x2 average pool, RMS norm,
// the transposed input projection). A 32x32 image is the encoder's size, so no resize happens.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { buildProjectorSpec } from '../../src/gguf/index.js';
import { native } from '../../src/native/binding.js';
import { patternPng, encodePng } from '../helpers/images.js';
import { ensureProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

type Pixel = readonly [number, number, number];

function weights(projectionDim: number): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  for (const t of buildProjectorSpec({ projectionDim }).spec.tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    const buf = new Float32Array(n);
    (t.data as (start: number, out: Float32Array) => void)(0, buf);
    out.set(t.name, buf);
  }
  return out;
}

const gelu = (x: number): number => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

function layerNorm(x: Float32Array, w: Float32Array, b: Float32Array | undefined, eps: number, rms = false): Float32Array {
  const n = x.length;
  const mean = rms ? 0 : x.reduce((a, v) => a + v, 0) / n;
  const v = x.reduce((a, t) => a + (t - mean) ** 2, 0) / n;
  const s = 1 / Math.sqrt(v + eps);
  return Float32Array.from(x, (t, i) => (t - mean) * s * w[i]! + (b ? b[i]! : 0));
}

/** out[o] = sum_i W[i + inDim * o] x[i] + bias[o] (ggml_mul_mat with W of ne = [inDim, outDim]). */
function linear(W: Float32Array, bias: Float32Array | undefined, x: Float32Array, inDim: number, outDim: number): Float32Array {
  const out = new Float32Array(outDim);
  for (let o = 0; o < outDim; o++) {
    let s = bias ? bias[o]! : 0;
    for (let i = 0; i < inDim; i++) s += W[i + inDim * o]! * x[i]!;
    out[o] = s;
  }
  return out;
}

function reference(w: Map<string, Float32Array>, pixel: (x: number, y: number) => Pixel, textEmbd: number): Float32Array[] {
  const S = 32, P = 4, G = S / P, V = 32, F = 48, H = 2, D = V / H, M = 2, eps = 1e-6;
  const g = (n: string) => w.get(n)!;
  // normalized planar image: (v / 255 - 0.5) / 0.5
  const img = (c: number, x: number, y: number) => (pixel(x, y)[c]! / 255 - 0.5) / 0.5;
  // patches (p = gy * G + gx), each V wide
  let h: Float32Array[] = [];
  const K = g('v.patch_embd.weight'); // [kx, ky, ci, co]
  for (let gy = 0; gy < G; gy++) {
    for (let gx = 0; gx < G; gx++) {
      const v = new Float32Array(V);
      for (let co = 0; co < V; co++) {
        let s = g('v.patch_embd.bias')[co]!;
        for (let ci = 0; ci < 3; ci++) for (let ky = 0; ky < P; ky++) for (let kx = 0; kx < P; kx++) s += K[kx + P * (ky + P * (ci + 3 * co))]! * img(ci, gx * P + kx, gy * P + ky);
        v[co] = s + g('v.position_embd.weight')[co + V * (gy * G + gx)]!;
      }
      h.push(v);
    }
  }
  // one pre-norm block
  const n1 = h.map((x) => layerNorm(x, g('v.blk.0.ln1.weight'), g('v.blk.0.ln1.bias'), eps));
  const q = n1.map((x) => linear(g('v.blk.0.attn_q.weight'), g('v.blk.0.attn_q.bias'), x, V, V));
  const k = n1.map((x) => linear(g('v.blk.0.attn_k.weight'), g('v.blk.0.attn_k.bias'), x, V, V));
  const vv = n1.map((x) => linear(g('v.blk.0.attn_v.weight'), g('v.blk.0.attn_v.bias'), x, V, V));
  const attn = h.map((_, i) => {
    const o = new Float32Array(V);
    for (let head = 0; head < H; head++) {
      const scores = k.map((kj) => {
        let s = 0;
        for (let d = 0; d < D; d++) s += q[i]![head * D + d]! * kj[head * D + d]!;
        return s / Math.sqrt(D);
      });
      const mx = Math.max(...scores);
      const e = scores.map((s) => Math.exp(s - mx));
      const z = e.reduce((a, b) => a + b, 0);
      for (let j = 0; j < e.length; j++) for (let d = 0; d < D; d++) o[head * D + d] += (e[j]! / z) * vv[j]![head * D + d]!;
    }
    return linear(g('v.blk.0.attn_out.weight'), g('v.blk.0.attn_out.bias'), o, V, V);
  });
  h = h.map((x, i) => Float32Array.from(x, (t, d) => t + attn[i]![d]!));
  h = h.map((x) => {
    const n2 = layerNorm(x, g('v.blk.0.ln2.weight'), g('v.blk.0.ln2.bias'), eps);
    const up = linear(g('v.blk.0.ffn_up.weight'), g('v.blk.0.ffn_up.bias'), n2, V, F).map(gelu);
    const down = linear(g('v.blk.0.ffn_down.weight'), g('v.blk.0.ffn_down.bias'), Float32Array.from(up), F, V);
    return Float32Array.from(x, (t, d) => t + down[d]!);
  });
  h = h.map((x) => layerNorm(x, g('v.post_ln.weight'), g('v.post_ln.bias'), eps));
  // 2x2 average pool over the patch grid, then RMS norm and the projection (used transposed)
  const out: Float32Array[] = [];
  const proj = g('mm.input_projection.weight'); // ne = [textEmbd, V]
  for (let py = 0; py < G / M; py++) {
    for (let px = 0; px < G / M; px++) {
      const pooled = new Float32Array(V);
      for (let dy = 0; dy < M; dy++) for (let dx = 0; dx < M; dx++) {
        const p = h[(py * M + dy) * G + px * M + dx]!;
        for (let d = 0; d < V; d++) pooled[d] += p[d]! / (M * M);
      }
      const r = layerNorm(pooled, g('mm.soft_emb_norm.weight'), undefined, eps, true);
      const e = new Float32Array(textEmbd);
      for (let o = 0; o < textEmbd; o++) for (let d = 0; d < V; d++) e[o] += proj[o + textEmbd * d]! * r[d]!;
      out.push(e);
    }
  }
  return out;
}

describe('gemma3 projector embeddings (libmtmd) against an independent computation', () => {
  let model: Model;
  let nEmbd: number;
  beforeAll(async () => {
    const text = (await zooModels(['qwen3']))['qwen3'];
    nEmbd = text.nEmbd;
    model = await loadModel(text.path, { projector: (await ensureProjector({ projectionDim: nEmbd })).path });
  });
  afterAll(async () => {
    await model?.dispose();
  });

  it('equals the reference within float tolerance, for two images', async () => {
    const w = weights(nEmbd);
    for (const seed of [11, 12]) {
      const pixel = (x: number, y: number): Pixel => {
        const h = Math.imul(x * 73856093 ^ y * 19349663 ^ seed * 83492791, 0x9e3779b1) >>> 0;
        return [h & 0xff, (h >>> 8) & 0xff, (h >>> 16) & 0xff];
      };
      const png = encodePng(32, 32, pixel);
      expect(png.equals(patternPng(32, 32, seed))).toBe(true);
      const got = await native.mediaEmbeddings(model.nativeHandle(), png);
      const want = reference(w, pixel, nEmbd);
      expect(got.length).toBe(want.length * nEmbd);
      let maxErr = 0;
      let maxAbs = 0;
      want.forEach((row, t) => row.forEach((v, d) => {
        maxErr = Math.max(maxErr, Math.abs(got[t * nEmbd + d]! - v));
        maxAbs = Math.max(maxAbs, Math.abs(v));
      }));
      expect(maxAbs).toBeGreaterThan(0.1);
      // ggml's GELU goes through a table of F16 values: measured 4e-4 of the output's scale
      expect(maxErr).toBeLessThan(2e-3 * maxAbs);
    }
  });
});
