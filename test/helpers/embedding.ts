// Embedding models (src/gguf/zoo/embedding.ts), generated once into .cache/embed-models, and a
// float64 BERT forward pass written from the architecture's definition (token + position +
// type-0 embeddings, layer norm; per layer: attention with biases, residual, layer norm, GELU
// FFN, residual, layer norm), reading the weights back from the GGUF file: the reference the
// engine's pooled vectors and rank scores are compared with.
import { join } from 'node:path';
import { ensureEmbeddingModels, type EmbeddingModelDescription, type EmbeddingModelName } from '../../src/gguf/zoo/embedding.js';
import { f16ToNumber, readGgufFile, readTensorBytes } from '../../src/gguf/index.js';
import { llamaCppModelsDir, projectRoot } from './paths.js';

export const embedModelsDir = join(projectRoot, '.cache', 'embed-models');

export function embeddingModels(): Promise<Record<EmbeddingModelName, EmbeddingModelDescription>> {
  return ensureEmbeddingModels(embedModelsDir, llamaCppModelsDir);
}

type Tensors = Map<string, { shape: readonly number[]; data: Float64Array }>;

async function loadTensors(path: string): Promise<Tensors> {
  const file = await readGgufFile(path);
  const out: Tensors = new Map();
  for (const t of file.tensors) {
    const bytes = await readTensorBytes(path, t);
    const data = new Float64Array(t.elementCount);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (t.type === 'F32') for (let i = 0; i < data.length; i++) data[i] = view.getFloat32(i * 4, true);
    else if (t.type === 'F16') for (let i = 0; i < data.length; i++) data[i] = f16ToNumber(view.getUint16(i * 2, true));
    else throw new Error(`reference: tensor ${t.name} has type ${t.type}`);
    out.set(t.name, { shape: t.shape, data });
  }
  return out;
}

/** y = W x + b for a ggml matrix of shape [in, out] (row `o` holds the weights of output o). */
function linear(w: { shape: readonly number[]; data: Float64Array }, b: Float64Array | undefined, x: Float64Array): Float64Array {
  const nIn = w.shape[0]!;
  const nOut = w.shape[1] ?? 1;
  const y = new Float64Array(nOut);
  for (let o = 0; o < nOut; o++) {
    let s = b ? b[o]! : 0;
    for (let i = 0; i < nIn; i++) s += w.data[o * nIn + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

function layerNorm(x: Float64Array, w: Float64Array, b: Float64Array, eps: number): Float64Array {
  let mean = 0;
  for (const v of x) mean += v;
  mean /= x.length;
  let v2 = 0;
  for (const v of x) v2 += (v - mean) ** 2;
  const inv = 1 / Math.sqrt(v2 / x.length + eps);
  return x.map((v, i) => (v - mean) * inv * w[i]! + b[i]!);
}

const gelu = (x: number): number => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

export interface BertReference {
  /** Final hidden states, one per token. */
  hidden(tokens: ArrayLike<number>): Float64Array[];
  mean(tokens: ArrayLike<number>): Float64Array;
  cls(tokens: ArrayLike<number>): Float64Array;
  /** The cross-encoder score: cls.output · tanh(cls · h[0] + cls.bias) + cls.output.bias. */
  rank(tokens: ArrayLike<number>): number;
}

export async function bertReference(path: string, dims: { nEmbd: number; nLayer: number; nHead: number; eps: number }): Promise<BertReference> {
  const T = await loadTensors(path);
  const get = (n: string) => {
    const t = T.get(n);
    if (!t) throw new Error(`reference: no tensor ${n}`);
    return t;
  };
  const E = dims.nEmbd;
  const head = E / dims.nHead;
  const row = (n: string, r: number) => get(n).data.subarray(r * E, (r + 1) * E);
  const hidden = (tokens: ArrayLike<number>): Float64Array[] => {
    const n = tokens.length;
    let h: Float64Array[] = [];
    for (let p = 0; p < n; p++) {
      const x = new Float64Array(E);
      const te = row('token_embd.weight', tokens[p]!);
      const pe = row('position_embd.weight', p);
      const ty = row('token_types.weight', 0);
      for (let i = 0; i < E; i++) x[i] = te[i]! + pe[i]! + ty[i]!;
      h.push(layerNorm(x, get('token_embd_norm.weight').data, get('token_embd_norm.bias').data, dims.eps));
    }
    for (let l = 0; l < dims.nLayer; l++) {
      const p = `blk.${l}`;
      const q = h.map((x) => linear(get(`${p}.attn_q.weight`), get(`${p}.attn_q.bias`).data, x));
      const k = h.map((x) => linear(get(`${p}.attn_k.weight`), get(`${p}.attn_k.bias`).data, x));
      const v = h.map((x) => linear(get(`${p}.attn_v.weight`), get(`${p}.attn_v.bias`).data, x));
      const next: Float64Array[] = [];
      for (let t = 0; t < n; t++) {
        const att = new Float64Array(E);
        for (let hd = 0; hd < dims.nHead; hd++) {
          const o = hd * head;
          const scores = new Float64Array(n);
          for (let s = 0; s < n; s++) {
            let d = 0;
            for (let i = 0; i < head; i++) d += q[t]![o + i]! * k[s]![o + i]!;
            scores[s] = d / Math.sqrt(head);
          }
          const m = Math.max(...scores);
          let z = 0;
          for (let s = 0; s < n; s++) z += (scores[s] = Math.exp(scores[s]! - m));
          for (let s = 0; s < n; s++) for (let i = 0; i < head; i++) att[o + i]! += (scores[s]! / z) * v[s]![o + i]!;
        }
        const a = linear(get(`${p}.attn_output.weight`), get(`${p}.attn_output.bias`).data, att);
        for (let i = 0; i < E; i++) a[i]! += h[t]![i]!;
        const ffnIn = layerNorm(a, get(`${p}.attn_output_norm.weight`).data, get(`${p}.attn_output_norm.bias`).data, dims.eps);
        const up = linear(get(`${p}.ffn_up.weight`), get(`${p}.ffn_up.bias`).data, ffnIn).map(gelu);
        const down = linear(get(`${p}.ffn_down.weight`), get(`${p}.ffn_down.bias`).data, up);
        for (let i = 0; i < E; i++) down[i]! += ffnIn[i]!;
        next.push(layerNorm(down, get(`${p}.layer_output_norm.weight`).data, get(`${p}.layer_output_norm.bias`).data, dims.eps));
      }
      h = next;
    }
    return h;
  };
  return {
    hidden,
    mean(tokens) {
      const h = hidden(tokens);
      const out = new Float64Array(E);
      for (const x of h) for (let i = 0; i < E; i++) out[i]! += x[i]! / h.length;
      return out;
    },
    cls: (tokens) => hidden(tokens)[0]!,
    rank(tokens) {
      const c = linear(get('cls.weight'), get('cls.bias').data, hidden(tokens)[0]!).map(Math.tanh);
      return linear(get('cls.output.weight'), get('cls.output.bias').data, c)[0]!;
    },
  };
}

export function norm(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]! * v[i]!;
  return Math.sqrt(s);
}

export function unit(v: ArrayLike<number>): Float64Array {
  const n = norm(v);
  return Float64Array.from(v, (x) => x / n);
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return Infinity;
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}
