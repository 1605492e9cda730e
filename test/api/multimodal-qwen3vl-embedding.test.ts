// The image embeddings libmtmd computes with the generated Qwen3-VL projector (qwen3vl_merger)
// equal an independent computation from the file's weights (issue 37), paired with the zoo's
// qwen35 (M-RoPE): the ViT of models/qwen3vl.cpp written out in plain loops — two patch
// convolutions summed, the 2x2 group order, patch bias, learned positions, one pre-norm block
// with a fused QKV and 2D vision rotary (y on the first quarter of each head's pairs, x on the
// second), GELU MLP, post norm, each 2x2 group concatenated through mm.0 → GELU → mm.2. A 24x24
// image is the encoder's size (no resize, no interpolation of the position embeddings).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { buildQwen3vlProjectorSpec, type Qwen3vlProjectorDescription } from '../../src/gguf/index.js';
import { native } from '../../src/native/binding.js';
import { encodePng } from '../helpers/images.js';
import { ensureQwen3vlProjector } from '../helpers/projector.js';
import { zooModels } from '../helpers/zoo.js';

type Pixel = readonly [number, number, number];

function weights(projectionDim: number): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  for (const t of buildQwen3vlProjectorSpec({ projectionDim }).spec.tensors) {
    const buf = new Float32Array(t.shape.reduce((a, b) => a * b, 1));
    (t.data as (start: number, out: Float32Array) => void)(0, buf);
    out.set(t.name, buf);
  }
  return out;
}

const gelu = (x: number): number => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

function layerNorm(x: Float64Array, w: Float32Array, b: Float32Array, eps: number): Float64Array {
  const n = x.length;
  const mean = x.reduce((a, v) => a + v, 0) / n;
  const s = 1 / Math.sqrt(x.reduce((a, t) => a + (t - mean) ** 2, 0) / n + eps);
  return Float64Array.from(x, (t, i) => (t - mean) * s * w[i]! + b[i]!);
}

/** out[o] = sum_i W[i + inDim * o] x[i] + bias[o] (ggml_mul_mat with W of ne = [inDim, outDim]). */
function linear(W: Float32Array, bias: Float32Array, x: Float64Array, inDim: number, outDim: number): Float64Array {
  const out = new Float64Array(outDim);
  for (let o = 0; o < outDim; o++) {
    let s = bias[o]!;
    for (let i = 0; i < inDim; i++) s += W[i + inDim * o]! * x[i]!;
    out[o] = s;
  }
  return out;
}

/** ggml's GGML_ROPE_TYPE_VISION on one head: pairs (k, k + D/2) for k < D/2, sections of D/4
 * pairs: the first rotated by y, the second by x, each from frequency index 0 again. */
function visionRope(h: Float64Array, y: number, x: number): Float64Array {
  const D = h.length, half = D / 2, sect = D / 4;
  const scale = 10000 ** (-2 / half);
  const out = Float64Array.from(h);
  for (let k = 0; k < half; k++) {
    const theta = k < sect ? y * scale ** k : x * scale ** (k - sect);
    const c = Math.cos(theta), s = Math.sin(theta);
    out[k] = h[k]! * c - h[k + half]! * s;
    out[k + half] = h[k]! * s + h[k + half]! * c;
  }
  return out;
}

function reference(d: Qwen3vlProjectorDescription, w: Map<string, Float32Array>, pixel: (x: number, y: number) => Pixel, S: number): Float64Array[] {
  const P = d.patchSize, G = S / P, V = d.visionEmbd, F = d.feedForward, H = d.heads, Dh = V / H, eps = 1e-6;
  const g = (n: string) => w.get(n)!;
  const img = (c: number, x: number, y: number) => (pixel(x, y)[c]! / 255 - 0.5) / 0.5;
  // patches in the merger's order: 2x2 groups in raster order, (dy, dx) inside each
  const order: Array<[number, number]> = [];
  for (let my = 0; my < G / 2; my++) for (let mx = 0; mx < G / 2; mx++) for (let dy = 0; dy < 2; dy++) for (let dx = 0; dx < 2; dx++) order.push([mx * 2 + dx, my * 2 + dy]);
  const K0 = g('v.patch_embd.weight'), K1 = g('v.patch_embd.weight.1');
  let h: Float64Array[] = order.map(([gx, gy]) => {
    const v = new Float64Array(V);
    for (let co = 0; co < V; co++) {
      let s = 0;
      for (let ci = 0; ci < 3; ci++) for (let ky = 0; ky < P; ky++) for (let kx = 0; kx < P; kx++) {
        const k = kx + P * (ky + P * (ci + 3 * co));
        s += (K0[k]! + K1[k]!) * img(ci, gx * P + kx, gy * P + ky);
      }
      v[co] = s + g('v.patch_embd.bias')[co]! + g('v.position_embd.weight')[co + V * (gy * G + gx)]!;
    }
    return v;
  });
  for (let b = 0; b < d.blocks; b++) {
    const p = `v.blk.${b}`;
    const qkv = h.map((x) => linear(g(`${p}.attn_qkv.weight`), g(`${p}.attn_qkv.bias`), layerNorm(x, g(`${p}.ln1.weight`), g(`${p}.ln1.bias`), eps), V, 3 * V));
    const head = (t: number, part: number, hd: number) => qkv[t]!.slice(part * V + hd * Dh, part * V + (hd + 1) * Dh);
    const attn = h.map((_, i) => {
      const o = new Float64Array(V);
      for (let hd = 0; hd < H; hd++) {
        const q = visionRope(head(i, 0, hd), order[i]![1], order[i]![0]);
        const scores = h.map((__, j) => {
          const k = visionRope(head(j, 1, hd), order[j]![1], order[j]![0]);
          let s = 0;
          for (let e = 0; e < Dh; e++) s += q[e]! * k[e]!;
          return s / Math.sqrt(Dh);
        });
        const mx = Math.max(...scores);
        const ex = scores.map((s) => Math.exp(s - mx));
        const z = ex.reduce((a, c) => a + c, 0);
        for (let j = 0; j < ex.length; j++) {
          const vj = head(j, 2, hd);
          for (let e = 0; e < Dh; e++) o[hd * Dh + e] += (ex[j]! / z) * vj[e]!;
        }
      }
      return linear(g(`${p}.attn_out.weight`), g(`${p}.attn_out.bias`), o, V, V);
    });
    h = h.map((x, i) => Float64Array.from(x, (t, e) => t + attn[i]![e]!));
    h = h.map((x) => {
      const up = linear(g(`${p}.ffn_up.weight`), g(`${p}.ffn_up.bias`), layerNorm(x, g(`${p}.ln2.weight`), g(`${p}.ln2.bias`), eps), V, F).map(gelu);
      const down = linear(g(`${p}.ffn_down.weight`), g(`${p}.ffn_down.bias`), up, F, V);
      return Float64Array.from(x, (t, e) => t + down[e]!);
    });
  }
  h = h.map((x) => layerNorm(x, g('v.post_ln.weight'), g('v.post_ln.bias'), eps));
  const out: Float64Array[] = [];
  for (let t = 0; t < h.length / 4; t++) {
    const cat = new Float64Array(4 * V);
    for (let k = 0; k < 4; k++) cat.set(h[t * 4 + k]!, k * V);
    const mid = linear(g('mm.0.weight'), g('mm.0.bias'), cat, 4 * V, d.mergerHidden).map(gelu);
    out.push(linear(g('mm.2.weight'), g('mm.2.bias'), mid, d.mergerHidden, d.projectionDim));
  }
  return out;
}

describe('qwen3vl projector embeddings (libmtmd) against an independent computation', () => {
  let model: Model;
  let desc: Qwen3vlProjectorDescription;
  beforeAll(async () => {
    const text = (await zooModels(['qwen35']))['qwen35'];
    const proj = await ensureQwen3vlProjector({ projectionDim: text.nEmbd });
    desc = proj;
    model = await loadModel(text.path, { projector: proj.path });
  });
  afterAll(async () => {
    await model?.dispose();
  });

  it('pairs with the M-RoPE text model', () => {
    expect(model.capabilities.vision).toBe(true);
    expect(model.projector?.mrope).toBe(true);
  });

  it('equals the reference within float tolerance, for two images', async () => {
    const w = weights(desc.projectionDim);
    for (const seed of [21, 22]) {
      const pixel = (x: number, y: number): Pixel => {
        const h = Math.imul(x * 73856093 ^ y * 19349663 ^ seed * 83492791, 0x9e3779b1) >>> 0;
        return [h & 0xff, (h >>> 8) & 0xff, (h >>> 16) & 0xff];
      };
      const png = encodePng(24, 24, pixel);
      const got = await native.mediaEmbeddings(model.nativeHandle(), png);
      const want = reference(desc, w, pixel, 24);
      expect(want.length).toBe(9);
      expect(got.length).toBe(want.length * desc.projectionDim);
      let maxErr = 0;
      let maxAbs = 0;
      want.forEach((row, t) => row.forEach((v, e) => {
        maxErr = Math.max(maxErr, Math.abs(got[t * desc.projectionDim + e]! - v));
        maxAbs = Math.max(maxAbs, Math.abs(v));
      }));
      expect(maxAbs).toBeGreaterThan(0.1);
      console.log(`qwen3vl embedding: max error ${maxErr.toExponential(2)} of max ${maxAbs.toFixed(3)}`);
      // ggml's GELU reads a table of F16 inputs (relative step 2^-11 ≈ 4.9e-4, slope ≤ 1.13) at
      // the ViT MLP and the merger; every other op is F32 (errors ~1e-7 per op, ~1e-5 summed over
      // these sizes, on any SIMD variant's summation order). So ~5e-4 of the output's scale at
      // most; measured 4e-4. The bound: 2e-3 of it.
      expect(maxErr).toBeLessThan(2e-3 * maxAbs);
    }
  });
});
