/**
 * `gpt-oss` (llama.cpp's OPENAI_MOE): alternating sliding-window / full attention with learned
 * attention sinks, biased q/k/v/o projections, yarn rope, and 4 experts (2 used) with biases and
 * the clamped SwiGLU; the OpenAI harmony chat template.
 */
import { val } from '../types.js';
import type { ZooFamily } from './family.js';

const E = 64;
const N_LAYER = 2;
const N_HEAD = 2;
const N_KV = 1;
const HEAD = 32;
const N_EXPERT = 4;
const N_FF_EXP = 64;
const WINDOW = 128;

export const gptOssFamily: ZooFamily = {
  arch: 'gpt-oss',
  nEmbd: E,
  nLayer: N_LAYER,
  contextLength: 131072,
  vocab: {
    file: 'ggml-vocab-llama-bpe.gguf',
    overlay: ['<|start|>', '<|end|>', '<|message|>', '<|channel|>', '<|constrain|>', '<|return|>', '<|call|>'].map((text) => ({ text, type: 'CONTROL' as const })),
    eos: '<|return|>',
    eot: '<|end|>',
  },
  template: 'openai-gpt-oss-120b.jinja',
  note: "gpt-oss's o200k_harmony vocabulary is not in the bundle: the Llama 3 BPE vocabulary (also tiktoken-style) stands in, with the harmony control tokens written over reserved special tokens",
  embdType: 'F16',
  outputType: 'Q8_0',
  dims: `n_embd ${E}, ${N_LAYER} layers (sliding window ${WINDOW} / full), ${N_HEAD} heads (kv ${N_KV}) × ${HEAD} with sinks, ${N_EXPERT} experts (2 used) × ${N_FF_EXP}`,
  build(b) {
    b.kv('feed_forward_length', val.u32(N_FF_EXP))
      .kv('expert_feed_forward_length', val.u32(N_FF_EXP))
      .kv('expert_count', val.u32(N_EXPERT))
      .kv('expert_used_count', val.u32(2))
      .kv('attention.head_count', val.u32(N_HEAD))
      .kv('attention.head_count_kv', val.u32(N_KV))
      .kv('attention.key_length', val.u32(HEAD))
      .kv('attention.value_length', val.u32(HEAD))
      .kv('rope.dimension_count', val.u32(HEAD))
      .kv('rope.freq_base', val.f32(150000))
      .kv('rope.scaling.type', val.string('yarn'))
      .kv('rope.scaling.factor', val.f32(32))
      .kv('rope.scaling.original_context_length', val.u32(4096))
      .kv('attention.layer_norm_rms_epsilon', val.f32(1e-5))
      .kv('attention.sliding_window', val.u32(WINDOW));
    for (let i = 0; i < N_LAYER; i++) {
      const p = `blk.${i}`;
      b.fill(`${p}.attn_norm.weight`, [E])
        .fill(`${p}.post_attention_norm.weight`, [E])
        .rand(`${p}.attn_q.weight`, [E, HEAD * N_HEAD])
        .rand(`${p}.attn_q.bias`, [HEAD * N_HEAD], 0.05)
        .rand(`${p}.attn_k.weight`, [E, HEAD * N_KV])
        .rand(`${p}.attn_k.bias`, [HEAD * N_KV], 0.05)
        .rand(`${p}.attn_v.weight`, [E, HEAD * N_KV])
        .rand(`${p}.attn_v.bias`, [HEAD * N_KV], 0.05)
        .rand(`${p}.attn_output.weight`, [HEAD * N_HEAD, E])
        .rand(`${p}.attn_output.bias`, [E], 0.05)
        .rand(`${p}.attn_sinks.weight`, [N_HEAD], 1)
        .rand(`${p}.ffn_gate_inp.weight`, [E, N_EXPERT])
        .rand(`${p}.ffn_gate_inp.bias`, [N_EXPERT], 0.05)
        .rand(`${p}.ffn_gate_exps.weight`, [E, N_FF_EXP, N_EXPERT])
        .rand(`${p}.ffn_gate_exps.bias`, [N_FF_EXP, N_EXPERT], 0.05)
        .rand(`${p}.ffn_up_exps.weight`, [E, N_FF_EXP, N_EXPERT])
        .rand(`${p}.ffn_up_exps.bias`, [N_FF_EXP, N_EXPERT], 0.05)
        .rand(`${p}.ffn_down_exps.weight`, [N_FF_EXP, E, N_EXPERT])
        .rand(`${p}.ffn_down_exps.bias`, [E, N_EXPERT], 0.05);
    }
  },
};
