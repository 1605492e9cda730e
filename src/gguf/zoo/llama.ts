/** `llama`: Llama 3 layout (GQA, SwiGLU), Llama 3 BPE vocabulary and chat template. */
import { val } from '../types.js';
import type { ZooFamily } from './family.js';

const E = 64;
const N_HEAD = 2;
const N_HEAD_KV = 1;
const HEAD = E / N_HEAD;
const N_FF = 128;
const N_LAYER = 2;

export const llamaFamily: ZooFamily = {
  arch: 'llama',
  nEmbd: E,
  nLayer: N_LAYER,
  contextLength: 8192,
  vocab: { file: 'ggml-vocab-llama-bpe.gguf', eos: '<|eot_id|>', eot: '<|eot_id|>' },
  template: 'meta-llama-Llama-3.1-8B-Instruct.jinja',
  embdType: 'F16',
  outputType: 'Q8_0',
  dims: `n_embd ${E}, ${N_LAYER} layers, ${N_HEAD} heads (kv ${N_HEAD_KV}) × ${HEAD}, n_ff ${N_FF}`,
  build(b) {
    b.kv('feed_forward_length', val.u32(N_FF))
      .kv('attention.head_count', val.u32(N_HEAD))
      .kv('attention.head_count_kv', val.u32(N_HEAD_KV))
      .kv('rope.dimension_count', val.u32(HEAD))
      .kv('rope.freq_base', val.f32(500000))
      .kv('attention.layer_norm_rms_epsilon', val.f32(1e-5));
    for (let i = 0; i < N_LAYER; i++) {
      const p = `blk.${i}`;
      b.fill(`${p}.attn_norm.weight`, [E])
        .rand(`${p}.attn_q.weight`, [E, HEAD * N_HEAD])
        .rand(`${p}.attn_k.weight`, [E, HEAD * N_HEAD_KV])
        .rand(`${p}.attn_v.weight`, [E, HEAD * N_HEAD_KV])
        .rand(`${p}.attn_output.weight`, [HEAD * N_HEAD, E])
        .fill(`${p}.ffn_norm.weight`, [E])
        .rand(`${p}.ffn_gate.weight`, [E, N_FF])
        .rand(`${p}.ffn_up.weight`, [E, N_FF])
        .rand(`${p}.ffn_down.weight`, [N_FF, E]);
    }
  },
};
