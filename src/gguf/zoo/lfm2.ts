/**
 * `lfm2`: gated short-convolution layers (in_proj to B, C, x; a depthwise conv over the last 3
 * positions; out_proj) interleaved with QK-norm GQA attention (layers whose head_count_kv is 0
 * are convolutions), SwiGLU FFN, the final norm stored as `token_embd_norm`; LFM2.5 template.
 */
import { val } from '../types.js';
import type { ZooFamily } from './family.js';

const E = 64;
const KV_HEADS = [0, 1, 0, 1];
const N_LAYER = KV_HEADS.length;
const N_HEAD = 2;
const HEAD = E / N_HEAD;
const N_FF = 128;
const L_CACHE = 3;

export const lfm2Family: ZooFamily = {
  arch: 'lfm2',
  nEmbd: E,
  nLayer: N_LAYER,
  contextLength: 128000,
  vocab: {
    file: 'ggml-vocab-qwen2.gguf',
    overlay: ['<|startoftext|>', '<|tool_list_start|>', '<|tool_list_end|>', '<|tool_call_start|>', '<|tool_call_end|>', '<|tool_response_start|>', '<|tool_response_end|>'].map(
      (text) => ({ text, type: 'CONTROL' as const }),
    ),
    bos: '<|startoftext|>',
    eos: '<|im_end|>',
  },
  template: 'LFM2.5-Instruct.jinja',
  note: "LFM2's own 65k BPE vocabulary is not in the bundle: the Qwen2 BPE vocabulary stands in (it has <|im_start|>/<|im_end|>), with LFM2's <|startoftext|> and tool tokens written over [PAD] placeholders",
  embdType: 'F16',
  outputType: 'Q8_0',
  outputNorm: 'token_embd_norm.weight',
  dims: `n_embd ${E}, ${N_LAYER} layers (2 short-conv, L=${L_CACHE}; 2 attention: ${N_HEAD} heads (kv 1) × ${HEAD}), n_ff ${N_FF}`,
  build(b) {
    b.kv('feed_forward_length', val.u32(N_FF))
      .kv('attention.head_count', val.u32(N_HEAD))
      .kv('attention.head_count_kv', val.array('u32', KV_HEADS))
      .kv('rope.freq_base', val.f32(1000000))
      .kv('attention.layer_norm_rms_epsilon', val.f32(1e-5))
      .kv('shortconv.l_cache', val.u32(L_CACHE));
    for (let i = 0; i < N_LAYER; i++) {
      const p = `blk.${i}`;
      b.fill(`${p}.attn_norm.weight`, [E]);
      if (KV_HEADS[i] === 0) {
        b.rand(`${p}.shortconv.conv.weight`, [L_CACHE, E], 0.5)
          .rand(`${p}.shortconv.in_proj.weight`, [E, 3 * E])
          .rand(`${p}.shortconv.out_proj.weight`, [E, E]);
      } else {
        b.fill(`${p}.attn_q_norm.weight`, [HEAD])
          .fill(`${p}.attn_k_norm.weight`, [HEAD])
          .rand(`${p}.attn_q.weight`, [E, E])
          .rand(`${p}.attn_k.weight`, [E, HEAD * KV_HEADS[i]!])
          .rand(`${p}.attn_v.weight`, [E, HEAD * KV_HEADS[i]!])
          .rand(`${p}.attn_output.weight`, [E, E]);
      }
      b.fill(`${p}.ffn_norm.weight`, [E])
        .rand(`${p}.ffn_gate.weight`, [E, N_FF])
        .rand(`${p}.ffn_up.weight`, [E, N_FF])
        .rand(`${p}.ffn_down.weight`, [N_FF, E]);
    }
  },
};
