/**
 * The Qwen families: `qwen3` (dense, QK-norm, MQA), `qwen35` (gated delta-net linear attention
 * in 3 of every 4 layers, gated full attention with multi-section rope in the 4th) and
 * `qwen35moe` (the same with routed experts and a gated shared expert).
 */
import { val } from '../types.js';
import type { ZooBuilder, ZooVocabSource } from './builder.js';
import type { ZooFamily } from './family.js';

/**
 * Qwen3's added tokens at their real ids (151646…): the vocab-only files in llama.cpp's bundle
 * hold `[PADnnn]` placeholders there, so `<tool_call>` would otherwise be four BPE tokens.
 */
const QWEN3_ADDED: ZooVocabSource['overlay'] = [
  ...['object_ref_start', 'object_ref_end', 'box_start', 'box_end', 'quad_start', 'quad_end', 'vision_start', 'vision_end', 'vision_pad', 'image_pad', 'video_pad'].map(
    (n) => ({ text: `<|${n}|>`, type: 'CONTROL' as const }),
  ),
  { text: '<tool_call>', type: 'USER_DEFINED' },
  { text: '</tool_call>', type: 'USER_DEFINED' },
  // USER_DEFINED in Qwen's own files; llama.cpp then warns that they look like control tokens
  ...['fim_prefix', 'fim_middle', 'fim_suffix', 'fim_pad', 'repo_name', 'file_sep'].map((n) => ({ text: `<|${n}|>`, type: 'CONTROL' as const })),
  { text: '<tool_response>', type: 'USER_DEFINED' },
  { text: '</tool_response>', type: 'USER_DEFINED' },
  { text: '<think>', type: 'USER_DEFINED' },
  { text: '</think>', type: 'USER_DEFINED' },
];

const E = 64;

function qwen3Build(b: ZooBuilder): void {
  const nHead = 2;
  const nKv = 1;
  const head = 32;
  const nFf = 128;
  b.kv('feed_forward_length', val.u32(nFf))
    .kv('attention.head_count', val.u32(nHead))
    .kv('attention.head_count_kv', val.u32(nKv))
    .kv('attention.key_length', val.u32(head))
    .kv('attention.value_length', val.u32(head))
    .kv('rope.freq_base', val.f32(1000000))
    .kv('attention.layer_norm_rms_epsilon', val.f32(1e-6));
  for (let i = 0; i < 2; i++) {
    const p = `blk.${i}`;
    b.fill(`${p}.attn_norm.weight`, [E])
      .rand(`${p}.attn_q.weight`, [E, head * nHead])
      .rand(`${p}.attn_k.weight`, [E, head * nKv])
      .rand(`${p}.attn_v.weight`, [E, head * nKv])
      .rand(`${p}.attn_output.weight`, [head * nHead, E])
      .fill(`${p}.attn_q_norm.weight`, [head])
      .fill(`${p}.attn_k_norm.weight`, [head])
      .fill(`${p}.ffn_norm.weight`, [E])
      .rand(`${p}.ffn_gate.weight`, [E, nFf])
      .rand(`${p}.ffn_up.weight`, [E, nFf])
      .rand(`${p}.ffn_down.weight`, [nFf, E]);
  }
}

export const qwen3Family: ZooFamily = {
  arch: 'qwen3',
  nEmbd: E,
  nLayer: 2,
  contextLength: 40960,
  vocab: { file: 'ggml-vocab-qwen2.gguf', overlay: QWEN3_ADDED, eos: '<|im_end|>' },
  template: 'Qwen-Qwen3-0.6B.jinja',
  note: "Qwen2 BPE vocabulary (Qwen3's own); Qwen3's added tokens restored over the [PAD] placeholders at their real ids",
  embdType: 'F16',
  outputType: 'Q8_0',
  dims: 'n_embd 64, 2 layers, 2 heads (kv 1) × 32, QK-norm, n_ff 128',
  build: qwen3Build,
};

/** Qwen3.5's layers: linear attention (gated delta net) except every 4th. */
const Q35 = {
  nLayer: 4,
  nHead: 2,
  nKv: 1,
  head: 32,
  nRot: 32,
  sections: [6, 5, 5, 0],
  convKernel: 4,
  dState: 16, // head size of the delta-net keys and values
  nGroup: 2, // key heads
  dtRank: 4, // value heads
} as const;

function qwen35Common(b: ZooBuilder, moe: boolean): void {
  const { nLayer, nHead, nKv, head, nRot, sections, convKernel, dState, nGroup, dtRank } = Q35;
  const dInner = dState * dtRank;
  const keyDim = dState * nGroup;
  const convDim = 2 * keyDim + dInner;
  const nFf = 128;
  b.kv('feed_forward_length', val.u32(nFf))
    .kv('attention.head_count', val.u32(nHead))
    .kv('attention.head_count_kv', val.u32(nKv))
    .kv('attention.key_length', val.u32(head))
    .kv('attention.value_length', val.u32(head))
    .kv('rope.dimension_count', val.u32(nRot))
    .kv('rope.dimension_sections', val.array('i32', sections))
    .kv('rope.freq_base', val.f32(10000000))
    .kv('attention.layer_norm_rms_epsilon', val.f32(1e-6))
    .kv('ssm.conv_kernel', val.u32(convKernel))
    .kv('ssm.inner_size', val.u32(dInner))
    .kv('ssm.state_size', val.u32(dState))
    .kv('ssm.time_step_rank', val.u32(dtRank))
    .kv('ssm.group_count', val.u32(nGroup))
    .kv('full_attention_interval', val.u32(4));
  const nExpert = 4;
  const nFfExp = 64;
  const nFfShexp = 64;
  if (moe) {
    b.kv('expert_count', val.u32(nExpert))
      .kv('expert_used_count', val.u32(2))
      .kv('expert_feed_forward_length', val.u32(nFfExp))
      .kv('expert_shared_feed_forward_length', val.u32(nFfShexp));
  }
  for (let i = 0; i < nLayer; i++) {
    const p = `blk.${i}`;
    b.fill(`${p}.attn_norm.weight`, [E]).fill(`${p}.post_attention_norm.weight`, [E]);
    if ((i + 1) % 4 !== 0) {
      b.rand(`${p}.attn_qkv.weight`, [E, convDim])
        .rand(`${p}.attn_gate.weight`, [E, dInner])
        .rand(`${p}.ssm_conv1d.weight`, [convKernel, convDim], 0.5)
        .fill(`${p}.ssm_dt.bias`, [dtRank], 1)
        .values(`${p}.ssm_a`, [dtRank], (h) => -(1 + h) / dtRank) // -exp(A_log)
        .rand(`${p}.ssm_beta.weight`, [E, dtRank])
        .rand(`${p}.ssm_alpha.weight`, [E, dtRank])
        .fill(`${p}.ssm_norm.weight`, [dState])
        .rand(`${p}.ssm_out.weight`, [dInner, E]);
    } else {
      b.rand(`${p}.attn_q.weight`, [E, head * nHead * 2]) // query and output gate
        .rand(`${p}.attn_k.weight`, [E, head * nKv])
        .rand(`${p}.attn_v.weight`, [E, head * nKv])
        .rand(`${p}.attn_output.weight`, [head * nHead, E])
        .fill(`${p}.attn_q_norm.weight`, [head])
        .fill(`${p}.attn_k_norm.weight`, [head]);
    }
    if (moe) {
      b.rand(`${p}.ffn_gate_inp.weight`, [E, nExpert])
        .rand(`${p}.ffn_gate_exps.weight`, [E, nFfExp, nExpert])
        .rand(`${p}.ffn_up_exps.weight`, [E, nFfExp, nExpert])
        .rand(`${p}.ffn_down_exps.weight`, [nFfExp, E, nExpert])
        .rand(`${p}.ffn_gate_inp_shexp.weight`, [E])
        .rand(`${p}.ffn_gate_shexp.weight`, [E, nFfShexp])
        .rand(`${p}.ffn_up_shexp.weight`, [E, nFfShexp])
        .rand(`${p}.ffn_down_shexp.weight`, [nFfShexp, E]);
    } else {
      b.rand(`${p}.ffn_gate.weight`, [E, nFf]).rand(`${p}.ffn_up.weight`, [E, nFf]).rand(`${p}.ffn_down.weight`, [nFf, E]);
    }
  }
  if (!moe) {
    // Qwen3.5's MTP block (as its GGUFs ship it): a gated full-attention layer and an FFN after
    // [enorm(embd(token)) ; hnorm(h)] -> eh_proj, which passes the token's embedding through
    // (the block predicts the trunk's next token: glm4moe.ts says why).
    const p = `blk.${nLayer}`;
    b.kv('nextn_predict_layers', val.u32(1))
      .fill(`${p}.attn_norm.weight`, [E])
      .fill(`${p}.post_attention_norm.weight`, [E])
      .rand(`${p}.attn_q.weight`, [E, head * nHead * 2])
      .rand(`${p}.attn_k.weight`, [E, head * nKv])
      .rand(`${p}.attn_v.weight`, [E, head * nKv])
      .rand(`${p}.attn_output.weight`, [head * nHead, E])
      .fill(`${p}.attn_q_norm.weight`, [head])
      .fill(`${p}.attn_k_norm.weight`, [head])
      .rand(`${p}.ffn_gate.weight`, [E, nFf])
      .rand(`${p}.ffn_up.weight`, [E, nFf])
      .rand(`${p}.ffn_down.weight`, [nFf, E])
      .fill(`${p}.nextn.enorm.weight`, [E])
      .fill(`${p}.nextn.hnorm.weight`, [E])
      .fill(`${p}.nextn.shared_head_norm.weight`, [E])
      .values(`${p}.nextn.eh_proj.weight`, [2 * E, E], (k) => (k % (2 * E) === Math.floor(k / (2 * E)) ? 1 : 0));
  }
}

const QWEN35_VOCAB: ZooVocabSource = { file: 'ggml-vocab-qwen35.gguf', overlay: QWEN3_ADDED, eos: '<|im_end|>' };
const QWEN35_NOTE =
  "the bundle's Qwen3.5 vocab-only file (151,936 tokens, pre-tokenizer qwen35); Qwen3's added tokens restored over its [PAD] placeholders";
const Q35_DIMS = `n_embd 64, 4 layers (3 delta-net: ${Q35.nGroup} key / ${Q35.dtRank} value heads × ${Q35.dState}, conv ${Q35.convKernel}; 1 gated attention: 2 heads (kv 1) × 32, imrope)`;

export const qwen35Family: ZooFamily = {
  arch: 'qwen35',
  nEmbd: E,
  nLayer: Q35.nLayer,
  contextLength: 262144,
  vocab: QWEN35_VOCAB,
  template: 'Qwen3.5-4B.jinja',
  note: QWEN35_NOTE,
  embdType: 'F16',
  outputType: 'Q8_0',
  dims: `${Q35_DIMS}, n_ff 128; 1 MTP block`,
  mtp: { layers: 1, embedding: `blk.${Q35.nLayer}.nextn.embed_tokens.weight` },
  build: (b) => qwen35Common(b, false),
};

export const qwen35moeFamily: ZooFamily = {
  arch: 'qwen35moe',
  nEmbd: E,
  nLayer: Q35.nLayer,
  contextLength: 262144,
  vocab: QWEN35_VOCAB,
  template: 'Qwen3.5-4B.jinja',
  note: QWEN35_NOTE,
  embdType: 'F16',
  outputType: 'Q8_0',
  dims: `${Q35_DIMS}, 4 experts (2 used) × 64 + shared expert 64`,
  build: (b) => qwen35Common(b, true),
};
