// The modes that cross the addon boundary, each a named `as const` object and its union type.
// The native side reads them as plain strings and numbers (native/js/context.cc); the mappers
// (src/native/request.ts) and the embed jobs (src/engine/embedding.ts) write them only by name.

/** A context's speculative decoding (`speculative` of the context config and of its ready report). */
export const SPECULATIVE_MODES = {
  /** No drafting. */
  off: 'off',
  /** Drafts looked up in the request's own prompt and output. */
  ngram: 'ngram',
  /** Greedy drafts of a second, smaller model (`draftModel`). */
  draft: 'draft',
  /** Greedy drafts of the model's own multi-token-prediction block. */
  mtp: 'mtp',
} as const;
export type SpeculativeMode = (typeof SPECULATIVE_MODES)[keyof typeof SPECULATIVE_MODES];

/** Flash attention (`flashAttention` of the context config and its ready report): llama.cpp's `enum llama_flash_attn_type`. */
export const FLASH_ATTENTION = {
  auto: -1,
  off: 0,
  on: 1,
} as const;
export type FlashAttentionType = (typeof FLASH_ATTENTION)[keyof typeof FLASH_ATTENTION];

/** What a session command does (`op` of `sessionCommand()`). */
export const SESSION_OPS = {
  /** Releases the session's pinned sequence. */
  end: 'end',
  /** Starts a new session from another's KV and committed tokens. */
  fork: 'fork',
} as const;
export type SessionOp = (typeof SESSION_OPS)[keyof typeof SESSION_OPS];

/** How an embed job pools token vectors (`pooling` of `embed()`): llama.cpp's `enum llama_pooling_type`; `model`: the GGUF's own. */
export const POOLING_TYPES = {
  model: -1,
  mean: 1,
  cls: 2,
  last: 3,
  /** A reranker's classification head (ctx.rerank). */
  rank: 4,
} as const;
export type PoolingType = (typeof POOLING_TYPES)[keyof typeof POOLING_TYPES];
