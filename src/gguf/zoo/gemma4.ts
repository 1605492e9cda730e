/**
 * `gemma4`: interleaved sliding-window attention (3 sliding layers, then a full one), different
 * head sizes for sliding and full layers, proportional rope factors on the full layers, QK-norm
 * and V-norm, pre and post norms around attention and FFN, a per-layer output scale, final logit
 * soft-capping (30) and embeddings scaled by sqrt(n_embd); Gemma 4 vocabulary and template.
 */
import { val } from '../types.js';
import type { ZooFamily } from './family.js';

const E = 32;
const N_LAYER = 4;
const SWA = [true, true, true, false];
const N_HEAD = 2;
const N_KV = 1;
const HEAD_FULL = 64;
const HEAD_SWA = 32;
const N_FF = 128;
const WINDOW = 128;

export const gemma4Family: ZooFamily = {
  arch: 'gemma4',
  nEmbd: E,
  nLayer: N_LAYER,
  contextLength: 131072,
  vocab: { file: 'ggml-vocab-gemma-4.gguf' },
  template: 'google-gemma-4-31B-it.jinja',
  // final soft-capping at 30 compresses large logits: the margin peaks near this head scale
  scales: { headScale: 1.5 },
  embdType: 'Q8_0',
  outputType: 'Q8_0',
  dims: `n_embd ${E}, ${N_LAYER} layers (sliding window ${WINDOW} on 3 of 4; heads ${HEAD_SWA} sliding / ${HEAD_FULL} full), ${N_HEAD} heads (kv ${N_KV}), n_ff ${N_FF}, softcap 30`,
  build(b) {
    b.kv('feed_forward_length', val.u32(N_FF))
      .kv('attention.head_count', val.u32(N_HEAD))
      .kv('attention.head_count_kv', val.u32(N_KV))
      .kv('attention.key_length', val.u32(HEAD_FULL))
      .kv('attention.value_length', val.u32(HEAD_FULL))
      .kv('attention.key_length_swa', val.u32(HEAD_SWA))
      .kv('attention.value_length_swa', val.u32(HEAD_SWA))
      .kv('rope.dimension_count', val.u32(HEAD_FULL))
      .kv('rope.dimension_count_swa', val.u32(HEAD_SWA))
      .kv('rope.freq_base', val.f32(1000000))
      .kv('rope.freq_base_swa', val.f32(10000))
      .kv('attention.layer_norm_rms_epsilon', val.f32(1e-6))
      .kv('attention.sliding_window', val.u32(WINDOW))
      .kv('attention.sliding_window_pattern', val.array('bool', SWA))
      .kv('attention.shared_kv_layers', val.u32(0))
      .kv('embedding_length_per_layer_input', val.u32(0))
      .kv('final_logit_softcapping', val.f32(30));
    let ropeFreqs = false;
    for (let i = 0; i < N_LAYER; i++) {
      const p = `blk.${i}`;
      const head = SWA[i] ? HEAD_SWA : HEAD_FULL;
      b.fill(`${p}.attn_norm.weight`, [E])
        .rand(`${p}.attn_q.weight`, [E, head * N_HEAD])
        .rand(`${p}.attn_k.weight`, [E, head * N_KV])
        .rand(`${p}.attn_v.weight`, [E, head * N_KV])
        .rand(`${p}.attn_output.weight`, [head * N_HEAD, E])
        .fill(`${p}.attn_q_norm.weight`, [head])
        .fill(`${p}.attn_k_norm.weight`, [head])
        .fill(`${p}.post_attention_norm.weight`, [E])
        .fill(`${p}.layer_output_scale.weight`, [1], 1);
      if (!SWA[i] && !ropeFreqs) {
        b.fill('rope_freqs.weight', [HEAD_FULL / 2], 1);
        ropeFreqs = true;
      }
      b.fill(`${p}.ffn_norm.weight`, [E])
        .rand(`${p}.ffn_gate.weight`, [E, N_FF])
        .rand(`${p}.ffn_up.weight`, [E, N_FF])
        .rand(`${p}.ffn_down.weight`, [N_FF, E])
        .fill(`${p}.post_ffw_norm.weight`, [E]);
    }
  },
};
