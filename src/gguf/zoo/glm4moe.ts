/**
 * `glm4moe` (GLM-4.5 / 4.6 / 4.7): a dense first layer, then routed experts with sigmoid gating
 * and a shared expert; biased q/k/v; partial rotary embedding; and one NextN/MTP block after the
 * trunk (`nextn_predict_layers` 1) — the multi-token-prediction head llamux drafts with
 * (speculative mode "mtp"). The MTP block's projection passes the token's embedding through, so
 * the head predicts the successor of its input token: the trunk's own next token (see builder.ts).
 */
import { val } from '../types.js';
import type { ZooBuilder, ZooVocabSource } from './builder.js';
import type { ZooFamily } from './family.js';

const E = 64;
const N_TRUNK = 2;
const N_HEAD = 2;
const N_KV = 1;
const HEAD = 32;
const N_FF = 128;
const N_EXPERT = 4;
const N_FF_EXP = 64;

/** GLM's control tokens over the stand-in vocabulary's [PAD] placeholders (one token each). */
const GLM_ADDED: ZooVocabSource['overlay'] = [
  ...['[gMASK]', '<sop>', '<|system|>', '<|user|>', '<|assistant|>', '<|observation|>'].map((text) => ({ text, type: 'CONTROL' as const })),
  ...['<think>', '</think>', '<tool_call>', '</tool_call>', '<arg_key>', '</arg_key>', '<arg_value>', '</arg_value>', '<tool_response>', '</tool_response>'].map(
    (text) => ({ text, type: 'USER_DEFINED' as const }),
  ),
];

function layer(b: ZooBuilder, i: number, moe: boolean): void {
  const p = `blk.${i}`;
  b.fill(`${p}.attn_norm.weight`, [E])
    .rand(`${p}.attn_q.weight`, [E, HEAD * N_HEAD])
    .rand(`${p}.attn_k.weight`, [E, HEAD * N_KV])
    .rand(`${p}.attn_v.weight`, [E, HEAD * N_KV])
    .rand(`${p}.attn_q.bias`, [HEAD * N_HEAD], 0.05)
    .rand(`${p}.attn_k.bias`, [HEAD * N_KV], 0.05)
    .rand(`${p}.attn_v.bias`, [HEAD * N_KV], 0.05)
    .rand(`${p}.attn_output.weight`, [HEAD * N_HEAD, E])
    .fill(`${p}.post_attention_norm.weight`, [E]);
  if (!moe) {
    b.rand(`${p}.ffn_gate.weight`, [E, N_FF]).rand(`${p}.ffn_up.weight`, [E, N_FF]).rand(`${p}.ffn_down.weight`, [N_FF, E]);
    return;
  }
  b.rand(`${p}.ffn_gate_inp.weight`, [E, N_EXPERT])
    .fill(`${p}.exp_probs_b.bias`, [N_EXPERT], 0)
    .rand(`${p}.ffn_gate_exps.weight`, [E, N_FF_EXP, N_EXPERT])
    .rand(`${p}.ffn_up_exps.weight`, [E, N_FF_EXP, N_EXPERT])
    .rand(`${p}.ffn_down_exps.weight`, [N_FF_EXP, E, N_EXPERT])
    .rand(`${p}.ffn_gate_shexp.weight`, [E, N_FF_EXP])
    .rand(`${p}.ffn_up_shexp.weight`, [E, N_FF_EXP])
    .rand(`${p}.ffn_down_shexp.weight`, [N_FF_EXP, E]);
}

export const glm4moeFamily: ZooFamily = {
  arch: 'glm4moe',
  nEmbd: E,
  nLayer: N_TRUNK,
  contextLength: 131072,
  vocab: { file: 'ggml-vocab-qwen2.gguf', overlay: GLM_ADDED },
  template: 'GLM-4.6.jinja',
  note: "Qwen2 BPE vocabulary as a stand-in for GLM's (same size class, not in the bundle); GLM's control tokens written over its [PAD] placeholders",
  embdType: 'F16',
  outputType: 'Q8_0',
  mtp: { layers: 1, embedding: `blk.${N_TRUNK}.nextn.embed_tokens.weight` },
  dims: `n_embd ${E}, ${N_TRUNK} layers (1 dense, 1 with ${N_EXPERT} experts (2 used) × ${N_FF_EXP} + shared), ${N_HEAD} heads (kv ${N_KV}) × ${HEAD}, partial rope; 1 MTP block`,
  build(b) {
    b.kv('nextn_predict_layers', val.u32(1))
      .kv('feed_forward_length', val.u32(N_FF))
      .kv('attention.head_count', val.u32(N_HEAD))
      .kv('attention.head_count_kv', val.u32(N_KV))
      .kv('attention.key_length', val.u32(HEAD))
      .kv('attention.value_length', val.u32(HEAD))
      .kv('rope.dimension_count', val.u32(HEAD / 2))
      .kv('rope.freq_base', val.f32(1000000))
      .kv('attention.layer_norm_rms_epsilon', val.f32(1e-5))
      .kv('expert_count', val.u32(N_EXPERT))
      .kv('expert_used_count', val.u32(2))
      .kv('expert_shared_count', val.u32(1))
      .kv('expert_feed_forward_length', val.u32(N_FF_EXP))
      .kv('leading_dense_block_count', val.u32(1))
      .kv('expert_weights_scale', val.f32(1))
      .kv('expert_weights_norm', val.bool(true))
      .kv('expert_gating_func', val.u32(2)); // sigmoid
    for (let i = 0; i < N_TRUNK; i++) layer(b, i, i >= 1);
    // The MTP block: [enorm(embd(token)) ; hnorm(h)] -> eh_proj -> one MoE block -> the shared head.
    const m = N_TRUNK;
    layer(b, m, true);
    b.fill(`blk.${m}.nextn.enorm.weight`, [E])
      .fill(`blk.${m}.nextn.hnorm.weight`, [E])
      .fill(`blk.${m}.nextn.shared_head_norm.weight`, [E])
      // identity on the token half, nothing from the hidden half
      .values(`blk.${m}.nextn.eh_proj.weight`, [2 * E, E], (k) => (k % (2 * E) === Math.floor(k / (2 * E)) ? 1 : 0));
  },
};
