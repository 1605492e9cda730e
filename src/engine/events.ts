/**
 * Why a generation ended: an end-of-generation token, a stop string, `maxTokens` or the
 * context end, or a `prefillOnly()` that warmed its prompt. Errors and aborts reject
 * instead (see LlamuxError).
 */
export const FinishReason = {
  /** An end-of-generation token. */
  Eog: 'eog',
  /** A stop string (`stop` holds which). */
  Stop: 'stop',
  /** `maxTokens`, or the end of the sequence's context. */
  Length: 'length',
  /** The first tool-call span closed and `parallelToolCalls` is false. */
  ToolCall: 'toolCall',
  /** `prefillOnly()` warmed its prompt. */
  Prefill: 'prefill',
} as const;
export type FinishReason = (typeof FinishReason)[keyof typeof FinishReason];

export interface GenerateTimings {
  /** Waiting for a free sequence. */
  queuedMs: number;
  /** Submit to first sampled token; -1 if none. */
  ttftMs: number;
  prefillMs: number;
  decodeMs: number;
  prefillTokensPerSec: number;
  decodeTokensPerSec: number;
  /** Time spent choosing tokens (sampler chains and grammars), all generated tokens together. */
  sampleMs: number;
  /** Speculative decoding: draft tokens verified (0 without speculation). */
  draftedTokens: number;
  /** Of the drafted tokens, those the output kept (each saved one decode step). */
  acceptedTokens: number;
}

/** A complete tool-call span: the exact bytes between the start and end markers, and every token of the span. */
export interface ToolCallSpan {
  index: number;
  /** Bytes between the start and end markers (markers excluded; payload markers included). Equals the concatenation of the span's deltas. */
  text: string;
  /** Exact token ids of the span, start and end markers included: replay these to hit the KV cache. */
  tokens: Int32Array;
}

/** How a request's prompt was served from KV that was already computed. */
export interface CacheReport {
  /**
   * `exact`: the whole prompt was in a live sequence; `partial`: a prefix was (from an idle
   * sequence, or shared with another one); `sticky`: the prompt extended its session's
   * tokens; `restored`: a saved state was restored from the RAM or disk tier; `cold`: nothing reused.
   */
  outcome: 'exact' | 'partial' | 'sticky' | 'restored' | 'cold';
  /** Where the reused KV came from. */
  tier?: 'live' | 'shared' | 'ram' | 'disk';
  reusedTokens: number;
  prefilledTokens: number;
  restoreMs: number;
  /**
   * Recurrent and hybrid models (whose memory cannot drop a tail): the reused KV was cut back
   * to a checkpoint, a partial state saved at a turn boundary (the end of a prompt but its last
   * token, the end of a request), and this is its position (= `reusedTokens`). Absent when no
   * checkpoint was restored.
   */
  checkpoint?: number;
  /**
   * `retainPrefixes`: the longest breakpoint prefix this request prefilled and wrote to the
   * RAM or disk tier (0: none; a breakpoint it reused is not written again).
   */
  retainedTokens: number;
  /** `retainPrefixes`: breakpoints whose prefix no tier took (no tier, over the budgets, shorter than a 16-token block, scoped KV). */
  retainRefused: number;
}

/** The reasoning a model wrote (the spans between its reasoning markers). */
export interface ReasoningResult {
  /** Reasoning text, markers excluded. Equals the concatenation of the reasoning events' text. */
  text: string;
  /** Every token of the reasoning spans, markers included (a forced end marker too): replay these to hit the KV cache. */
  tokens: Int32Array;
}

/**
 * A generated token's log-probability (natural log, <= 0) under the model's distribution at
 * its position: the log-softmax of the raw logits, before logit bias, penalties, grammars and
 * temperature. `top`: the most likely tokens there, best first (ties by id), `logprobs` of them.
 */
export interface TokenLogprob {
  token: number;
  logprob: number;
  top: { token: number; logprob: number }[];
}

export interface GenerateResult {
  /** Text outside tool-call spans and reasoning spans. */
  text: string;
  /** Reasoning, apart from text; present when the model wrote a reasoning span (or the prompt opened one). */
  reasoning?: ReasoningResult;
  /** Complete tool-call spans, in order. */
  toolCalls: ToolCallSpan[];
  /** A span still open when generation ended: never a complete call. */
  truncatedToolCall?: ToolCallSpan;
  /** Generated token ids (when `emitTokenIds: true`). */
  tokens?: Int32Array;
  /**
   * With the `logprobs` option: one entry per generated token (`generatedTokens` entries, in
   * order; tokens of a stop string, tool-call and reasoning spans included).
   */
  logprobs?: TokenLogprob[];
  finishReason: FinishReason;
  /** The stop string that ended generation (finishReason 'stop'). */
  stop?: string;
  promptTokens: number;
  /** Prompt tokens whose KV was already computed (reused). */
  reusedTokens: number;
  /** Prompt tokens decoded for this request: promptTokens - reusedTokens. */
  prefilledTokens: number;
  generatedTokens: number;
  /**
   * Tokens dropped by context shifts (`overflow: 'shift' | 'reprefill'`): from a prompt that did
   * not fit and from the window while generating. 0 when nothing was dropped.
   */
  shiftedTokens: number;
  timings: GenerateTimings;
  cache: CacheReport;
}

/** A text delta. Never splits a UTF-8 character; never contains text at or past a stop string. */
export interface TextEvent {
  type: 'text';
  text: string;
  /** Token ids sampled since the previous event (when `emitTokenIds: true`). */
  tokens?: Int32Array;
  /** With the `logprobs` option: the tokens sampled since the previous text event (a token whose text is held back, e.g. a possible stop string, may come before its text). */
  logprobs?: TokenLogprob[];
}

/** A reasoning delta (text between the reasoning markers; `tokens` holds every token sampled since the previous reasoning event, markers included). */
export interface ReasoningEvent {
  type: 'reasoning';
  text: string;
  tokens: Int32Array;
}

/** The last event of a successful generation. */
export interface FinalEvent extends GenerateResult {
  type: 'final';
}

export interface ToolCallStartEvent {
  type: 'toolCallStart';
  index: number;
}
/** Bytes the model sampled inside a span (never split inside a UTF-8 character). */
export interface ToolCallDeltaEvent {
  type: 'toolCallDelta';
  index: number;
  text: string;
}
export interface ToolCallEndEvent extends ToolCallSpan {
  type: 'toolCallEnd';
}
/** A span that was still open at end of generation, length or abort. */
export interface ToolCallTruncatedEvent extends ToolCallSpan {
  type: 'toolCallTruncated';
}

/**
 * Prefill progress (the `progress: true` option): after each chunk of the prompt the engine
 * decoded. `processed` of `total` prompt tokens are in the KV, `cached` of them were reused;
 * `ms` since the prefill began. The last one has processed === total.
 */
export interface ProgressEvent {
  type: 'progress';
  total: number;
  cached: number;
  processed: number;
  ms: number;
  /** `retainPrefixes`: the longest breakpoint prefix saved so far (0: none), and the breakpoints no tier took. */
  retainedTokens: number;
  retainRefused: number;
}

export type GenerateEvent =
  | TextEvent
  | ReasoningEvent
  | ProgressEvent
  | ToolCallStartEvent
  | ToolCallDeltaEvent
  | ToolCallEndEvent
  | ToolCallTruncatedEvent
  | FinalEvent;
