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

/** The shapes of a glm4moe model (the zoo's, or a larger one for benchmarks). */
export interface Glm4moeDims {
  readonly nEmbd: number;
  /** Trunk layers (the MTP block comes after them). */
  readonly nTrunk: number;
  /** The first this many trunk layers are dense, the others use experts (GLM-4.5: 1). */
  readonly nDense: number;
  readonly nHead: number;
  readonly nKv: number;
  readonly head: number;
  readonly nFf: number;
  readonly nExpert: number;
  readonly nFfExp: number;
}

const ZOO_DIMS: Glm4moeDims = { nEmbd: 64, nTrunk: 2, nDense: 1, nHead: 2, nKv: 1, head: 32, nFf: 128, nExpert: 4, nFfExp: 64 };

/** GLM's control tokens over the stand-in vocabulary's [PAD] placeholders (one token each). */
const GLM_ADDED: ZooVocabSource['overlay'] = [
  ...['[gMASK]', '<sop>', '<|system|>', '<|user|>', '<|assistant|>', '<|observation|>'].map((text) => ({ text, type: 'CONTROL' as const })),
  ...['<think>', '</think>', '<tool_call>', '</tool_call>', '<arg_key>', '</arg_key>', '<arg_value>', '</arg_value>', '<tool_response>', '</tool_response>'].map(
    (text) => ({ text, type: 'USER_DEFINED' as const }),
  ),
];

function layer(b: ZooBuilder, d: Glm4moeDims, i: number, moe: boolean): void {
  const { nEmbd: E, nHead, nKv, head, nFf, nExpert, nFfExp } = d;
  const p = `blk.${i}`;
  b.fill(`${p}.attn_norm.weight`, [E])
    .rand(`${p}.attn_q.weight`, [E, head * nHead])
    .rand(`${p}.attn_k.weight`, [E, head * nKv])
    .rand(`${p}.attn_v.weight`, [E, head * nKv])
    .rand(`${p}.attn_q.bias`, [head * nHead], 0.05)
    .rand(`${p}.attn_k.bias`, [head * nKv], 0.05)
    .rand(`${p}.attn_v.bias`, [head * nKv], 0.05)
    .rand(`${p}.attn_output.weight`, [head * nHead, E])
    .fill(`${p}.post_attention_norm.weight`, [E]);
  if (!moe) {
    b.rand(`${p}.ffn_gate.weight`, [E, nFf]).rand(`${p}.ffn_up.weight`, [E, nFf]).rand(`${p}.ffn_down.weight`, [nFf, E]);
    return;
  }
  b.rand(`${p}.ffn_gate_inp.weight`, [E, nExpert])
    .fill(`${p}.exp_probs_b.bias`, [nExpert], 0)
    .rand(`${p}.ffn_gate_exps.weight`, [E, nFfExp, nExpert])
    .rand(`${p}.ffn_up_exps.weight`, [E, nFfExp, nExpert])
    .rand(`${p}.ffn_down_exps.weight`, [nFfExp, E, nExpert])
    .rand(`${p}.ffn_gate_shexp.weight`, [E, nFfExp])
    .rand(`${p}.ffn_up_shexp.weight`, [E, nFfExp])
    .rand(`${p}.ffn_down_shexp.weight`, [nFfExp, E]);
}

/**
 * A glm4moe family of the given shapes. `vocab` defaults to the zoo's (Qwen2's with GLM's
 * tokens); a benchmark may take a smaller one (its output head is what an MTP step costs).
 */
export function glm4moeFamilyWith(d: Glm4moeDims, vocab: ZooVocabSource = GLM_VOCAB, note = GLM_NOTE): ZooFamily {
  const { nEmbd: E, nTrunk, nDense, nHead, nKv, head, nFf, nExpert, nFfExp } = d;
  return {
    arch: 'glm4moe',
    nEmbd: E,
    nLayer: nTrunk,
    contextLength: 131072,
    vocab,
    template: 'GLM-4.6.jinja',
    note,
    embdType: 'F16',
    outputType: 'Q8_0',
    mtp: { layers: 1, embedding: `blk.${nTrunk}.nextn.embed_tokens.weight` },
    dims: `n_embd ${E}, ${nTrunk} layers (${nDense} dense${nTrunk > nDense ? `, ${nTrunk - nDense} with ${nExpert} experts (2 used) × ${nFfExp} + shared` : ''}), ${nHead} heads (kv ${nKv}) × ${head}, partial rope; 1 MTP block`,
    build(b) {
      b.kv('nextn_predict_layers', val.u32(1))
        .kv('feed_forward_length', val.u32(nFf))
        .kv('attention.head_count', val.u32(nHead))
        .kv('attention.head_count_kv', val.u32(nKv))
        .kv('attention.key_length', val.u32(head))
        .kv('attention.value_length', val.u32(head))
        .kv('rope.dimension_count', val.u32(head / 2))
        .kv('rope.freq_base', val.f32(1000000))
        .kv('attention.layer_norm_rms_epsilon', val.f32(1e-5))
        .kv('expert_count', val.u32(nExpert))
        .kv('expert_used_count', val.u32(2))
        .kv('expert_shared_count', val.u32(1))
        .kv('expert_feed_forward_length', val.u32(nFfExp))
        .kv('leading_dense_block_count', val.u32(nDense))
        .kv('expert_weights_scale', val.f32(1))
        .kv('expert_weights_norm', val.bool(true))
        .kv('expert_gating_func', val.u32(2)); // sigmoid
      for (let i = 0; i < nTrunk; i++) layer(b, d, i, i >= nDense);
      // The MTP block: [enorm(embd(token)) ; hnorm(h)] -> eh_proj -> one MoE block -> the shared head.
      const m = nTrunk;
      layer(b, d, m, true);
      b.fill(`blk.${m}.nextn.enorm.weight`, [E])
        .fill(`blk.${m}.nextn.hnorm.weight`, [E])
        .fill(`blk.${m}.nextn.shared_head_norm.weight`, [E])
        // identity on the token half, nothing from the hidden half
        .values(`blk.${m}.nextn.eh_proj.weight`, [2 * E, E], (k) => (k % (2 * E) === Math.floor(k / (2 * E)) ? 1 : 0));
    },
  };
}

const GLM_VOCAB: ZooVocabSource = { file: 'ggml-vocab-qwen2.gguf', overlay: GLM_ADDED };
const GLM_NOTE = "Qwen2 BPE vocabulary as a stand-in for GLM's (same size class, not in the bundle); GLM's control tokens written over its [PAD] placeholders";

export const glm4moeFamily: ZooFamily = glm4moeFamilyWith(ZOO_DIMS);
