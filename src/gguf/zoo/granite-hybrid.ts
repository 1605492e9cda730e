/**
 * `granitehybrid` (Granite 4.0-H): Mamba-2 layers (ssm_in, grouped conv, dt/A/D per head, grouped
 * RMS norm) with one attention layer (layers whose head_count_kv is 0 are recurrent), dense
 * SwiGLU FFN; the Granite 4.0 chat template.
 */
import { val } from '../types.js';
import type { ZooFamily } from './family.js';

const E = 64;
const KV_HEADS = [0, 0, 1, 0]; // layer 2 is attention
const N_LAYER = KV_HEADS.length;
const N_HEAD = 2;
const HEAD = 32;
const N_FF = 128;
const D_INNER = 2 * E;
const D_STATE = 16;
const N_GROUP = 1;
const N_SSM_HEAD = 4;
const D_CONV = 4;

export const graniteHybridFamily: ZooFamily = {
  arch: 'granitehybrid',
  nEmbd: E,
  nLayer: N_LAYER,
  contextLength: 131072,
  vocab: {
    file: 'ggml-vocab-llama-bpe.gguf',
    overlay: ['<|start_of_role|>', '<|end_of_role|>', '<|tool_call|>'].map((text) => ({ text, type: 'CONTROL' as const })),
    eos: '<|end_of_text|>',
  },
  template: 'ibm-granite-granite-4.0.jinja',
  note: "Granite 4.0's own 100k BPE vocabulary is not in the bundle: the Llama 3 BPE vocabulary stands in (it has <|end_of_text|>), with <|start_of_role|>, <|end_of_role|>, <|tool_call|> written over reserved special tokens",
  embdType: 'F16',
  outputType: 'Q8_0',
  dims: `n_embd ${E}, ${N_LAYER} layers (3 Mamba-2: d_inner ${D_INNER}, ${N_SSM_HEAD} heads, state ${D_STATE}, ${N_GROUP} group, conv ${D_CONV}; 1 attention: ${N_HEAD} heads (kv 1) × ${HEAD}), n_ff ${N_FF}`,
  build(b) {
    const dInProj = 2 * D_INNER + 2 * N_GROUP * D_STATE + N_SSM_HEAD;
    const convDim = D_INNER + 2 * N_GROUP * D_STATE;
    b.kv('feed_forward_length', val.u32(N_FF))
      .kv('attention.head_count', val.u32(N_HEAD))
      .kv('attention.head_count_kv', val.array('u32', KV_HEADS))
      .kv('attention.key_length', val.u32(HEAD))
      .kv('attention.value_length', val.u32(HEAD))
      .kv('rope.dimension_count', val.u32(HEAD))
      .kv('rope.freq_base', val.f32(10000))
      .kv('attention.layer_norm_rms_epsilon', val.f32(1e-5))
      .kv('ssm.conv_kernel', val.u32(D_CONV))
      .kv('ssm.inner_size', val.u32(D_INNER))
      .kv('ssm.state_size', val.u32(D_STATE))
      .kv('ssm.time_step_rank', val.u32(N_SSM_HEAD))
      .kv('ssm.group_count', val.u32(N_GROUP));
    for (let i = 0; i < N_LAYER; i++) {
      const p = `blk.${i}`;
      b.fill(`${p}.attn_norm.weight`, [E]);
      if (KV_HEADS[i] === 0) {
        b.rand(`${p}.ssm_in.weight`, [E, dInProj])
          .rand(`${p}.ssm_conv1d.weight`, [D_CONV, convDim], 0.5)
          .rand(`${p}.ssm_conv1d.bias`, [convDim], 0.05)
          .fill(`${p}.ssm_dt.bias`, [N_SSM_HEAD], 1)
          .values(`${p}.ssm_a`, [1, N_SSM_HEAD], (h) => -(1 + h) / N_SSM_HEAD)
          .fill(`${p}.ssm_d`, [1, N_SSM_HEAD], 1)
          .fill(`${p}.ssm_norm.weight`, [D_INNER / N_GROUP, N_GROUP])
          .rand(`${p}.ssm_out.weight`, [D_INNER, E]);
      } else {
        b.rand(`${p}.attn_q.weight`, [E, HEAD * N_HEAD])
          .rand(`${p}.attn_k.weight`, [E, HEAD * KV_HEADS[i]!])
          .rand(`${p}.attn_v.weight`, [E, HEAD * KV_HEADS[i]!])
          .rand(`${p}.attn_output.weight`, [HEAD * N_HEAD, E]);
      }
      b.fill(`${p}.ffn_norm.weight`, [E])
        .rand(`${p}.ffn_gate.weight`, [E, N_FF])
        .rand(`${p}.ffn_up.weight`, [E, N_FF])
        .rand(`${p}.ffn_down.weight`, [N_FF, E]);
    }
  },
};
