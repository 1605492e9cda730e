// The shapes that come back across the addon boundary per request: the events and statistics
// (what goes in is src/native/request-schema.ts; src/native/binding.ts re-exports both).
import type { FlashAttentionType, SpeculativeMode } from './request-schema.js';

export interface NativeStats {
  promptTokens: number;
  reusedTokens: number;
  prefilledTokens: number;
  generatedTokens: number;
  queuedMs: number;
  ttftMs: number;
  prefillMs: number;
  decodeMs: number;
  prefillTokensPerSec: number;
  decodeTokensPerSec: number;
  sampleMs: number;
  cacheOutcome: 'exact' | 'partial' | 'sticky' | 'restored' | 'cold';
  cacheTier: '' | 'live' | 'shared' | 'ram' | 'disk';
  restoreMs: number;
  checkpoint?: number;
  /** Speculative decoding: draft tokens verified, and how many of them the output kept. */
  draftedTokens: number;
  acceptedTokens: number;
  /** Tokens a context shift dropped (`overflow`). */
  shiftedTokens: number;
  /** Prompt-cache breakpoints (retainPrefixes): the longest prefix this request wrote to a tier (0: none), and those no tier took. */
  retainedTokens?: number;
  retainRefused?: number;
}

export interface NativeCacheStats {
  ramBytes: number;
  ramEntries: number;
  ramBudget: number;
  ramEvictions: number;
  sessions: number;
  pinnedSequences: number;
  spills: number;
  restores: number;
  sharedPrefixes: number;
  diskBytes: number;
  diskEntries: number;
  diskBudget: number;
  diskRestores: number;
  /** Disk files removed because they were truncated, corrupt or foreign. */
  diskRejected: number;
  /** KV cells holding tokens (a cell shared by several sequences counts once); -1 for non-KV memories. */
  kvCellsUsed: number;
  kvCellsTotal: number;
  /** Requests that gave their KV up to a full cache and were re-admitted later (their output continues). */
  preemptions: number;
  /** Idle sequences moved to the RAM tier because their cells widened running requests' attention window. */
  idleSpills: number;
  /**
   * Recurrent and hybrid models: checkpoints (partial states at turn boundaries) the sequences
   * hold now, at most 4 per sequence and 256 MiB per sequence, and their bytes (outside the RAM
   * tier's budget; a state saved to the RAM or disk tier carries its sequence's checkpoints
   * inside that tier's budget). 0 for attention-only models.
   */
  checkpoints: number;
  checkpointBytes: number;
  /** Prompts served by restoring a checkpoint (the sequence's KV cut back to it). */
  checkpointRestores: number;
  /** Speculative decoding: verifications run, draft tokens verified, draft tokens accepted. */
  specVerifications: number;
  specDraftedTokens: number;
  specAcceptedTokens: number;
}

/** What llama.cpp applied when it created a context (public as ContextSettings). */
export interface NativeReady {
  contextSize: number;
  /** Tokens one sequence may hold (contextSize with unified KV, contextSize / sequences otherwise). */
  sequenceContextSize: number;
  batchSize: number;
  microBatchSize: number;
  sequences: number;
  threads: number;
  batchThreads: number;
  unifiedKv: boolean;
  flashAttention: FlashAttentionType;
  kvTypeK: number;
  kvTypeV: number;
  /** false for recurrent/hybrid models: prefixes are reused only as whole states. */
  canTruncateKv: boolean;
  /** The drafting mode applied ('off' when not asked, or when the memory cannot drop rejected drafts). */
  speculative: SpeculativeMode;
  /** Why speculation is off although the options asked for it. */
  speculativeOff?: string;
  /**
   * The identity of this context's KV layout (model fingerprint, KV types, unified KV, cells per
   * sequence, flash attention): the disk tier's file compatibility and the base of prefix keys.
   */
  layoutKey: string;
}

/** One generated token's log-probability and its most likely alternatives (best first). */
export interface NativeLogprob {
  token: number;
  logprob: number;
  top: { token: number; logprob: number }[];
}

export type NativeEvent =
  | { type: 'ready'; id: number; ready: NativeReady }
  | { type: 'text'; id: number; text: string; tokens?: Int32Array; logprobs?: NativeLogprob[] }
  | { type: 'reasoning'; id: number; text: string; tokens?: Int32Array }
  | { type: 'progress'; id: number; total: number; cached: number; processed: number; ms: number; retainedTokens?: number; retainRefused?: number }
  | {
      type: 'final';
      id: number;
      finishReason: 'eog' | 'stop' | 'length' | 'toolCall' | 'abort' | 'error' | 'prefill';
      code?: string;
      message?: string;
      stop?: string;
      stats: NativeStats;
      logprobs?: NativeLogprob[];
    }
  | { type: 'toolCallStart'; id: number; index: number }
  | { type: 'toolCallDelta'; id: number; index: number; text: string }
  | { type: 'toolCallEnd'; id: number; index: number; text: string; tokens: Int32Array; truncated: boolean }
  | { type: 'createFailed'; id: number; code: string; message: string }
  | { type: 'rpcFailed'; id: number; code: string; message: string }
  | { type: 'sessionDone'; id: number; code?: string; message?: string }
  | { type: 'embedded'; id: number; code?: string; message?: string; data?: Float32Array; dims?: number; promptTokens?: number; ms?: number }
  | { type: 'closed'; id: number };
