// The native request schema: every key the addon reads from the objects TypeScript hands it, and
// its type, listed once. The mappers (src/native/request.ts) build these objects complete (the
// native side holds no defaults and throws a TypeError naming a missing or mistyped key), and
// their TS types are derived from the lists below. test/native/request-schema.test.ts reads
// the C++ readers (native/js/context.cc, request_js.cc) and checks they read exactly these keys
// with these types. The modes that cross the boundary as bare strings or numbers are named here.
import type { NativeMediaList, NativeModel } from './native-model.js';

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

/** What a request does when its sequence is full (`overflow` of a generation request; engine/context_shift.h). */
export const OVERFLOW_MODES = {
  /** A prompt that does not fit fails with CONTEXT_OVERFLOW; generation ends with `length`. */
  stop: 'stop',
  /** Keep the first nKeep tokens, drop the oldest half of the rest (KV shift), go on. */
  shift: 'shift',
  /** The same window, recomputed from nKeep on (exact; any memory). */
  reprefill: 'reprefill',
} as const;
export type OverflowMode = (typeof OVERFLOW_MODES)[keyof typeof OVERFLOW_MODES];

/** The JS type of each wire type name a key list uses (the readers of native/js/request_js.h). */
export interface WireTypes {
  number: number;
  boolean: boolean;
  string: string;
  'string[]': string[];
  Int32Array: Int32Array;
  'Int32Array | null': Int32Array | null;
  Float32Array: Float32Array;
  /** The addon's Model object (`model.nativeHandle()`). */
  'Model | null': NativeModel | null;
  /** The media of a prompt (`tokenizeMedia(...).media`, native/media/media_js.cc). */
  'MediaList | null': NativeMediaList | null;
}
export type WireTypeName = keyof WireTypes;

/** A key list: each key's wire type name, or one of the named modes above (its values). */
export type WireSchema = Readonly<Record<string, WireTypeName | Readonly<Record<string, string | number>>>>;

/** The object a key list describes: each key with its JS type (a mode: the union of its values). */
export type WireObject<S extends WireSchema> = {
  -readonly [K in keyof S]: S[K] extends WireTypeName ? WireTypes[S[K]] : S[K][keyof S[K]];
};

/**
 * `ctx.submit(request)` (native/js/context.cc Context::Submit, with ReadSampling and
 * ReadDropTokens of request_js.cc): one mapper per request kind in src/native/request.ts.
 */
export const NATIVE_REQUEST_KEYS = {
  id: 'number',
  /** The prompt, tokenized in TS (src/engine/prompt-tokens.ts); for continueSession the tail. */
  promptTokens: 'Int32Array',
  /** The images and audio whose media ids the prompt holds (src/engine/media-prompt.ts); null: text only. */
  media: 'MediaList | null',
  /** The session's handle (Context.openSession); 0: no session. */
  session: 'number',
  /** The session's name, for messages only (never looked up). */
  sessionName: 'string',
  waitForSession: 'boolean',
  /** KV reuse only within this scope (tenant isolation); '': the shared scope. */
  cacheScope: 'string',
  /** LoRA adapters (ids from model.loadAdapter, of this context's model) and their scales, index by index; empty: the base model. */
  adapterIds: 'Int32Array',
  adapterScales: 'Float32Array',
  /** This session's idle TTL; -1: the context's sessionTtlMs. */
  sessionTtlMs: 'number',
  continueSession: 'boolean',
  /** null: nothing to verify. */
  expectCommitted: 'Int32Array | null',
  prefillOnly: 'boolean',
  /** Draft and verify when the context speculates. */
  speculative: 'boolean',
  /** A progress event after each prefill chunk. */
  progress: 'boolean',
  /** What a full sequence does: OVERFLOW_MODES. */
  overflow: 'string',
  /** Tokens a context shift keeps at the start (a leading BOS besides); -1: the whole prompt. */
  nKeep: 'number',
  /** Prompt-cache breakpoints: prompt token counts (ascending, at most 4) whose prefix is kept in the tiers ... */
  retainAt: 'Int32Array',
  /** ... for this many ms each (same length). */
  retainMs: 'Int32Array',
  /** -1: until end of generation or the context end. */
  maxTokens: 'number',
  stop: 'string[]',
  /** Token ids travel with text events. */
  emitTokenIds: 'boolean',
  renderSpecial: 'boolean',
  /** >= 0: each generated token's logprob and this many top alternatives travel with text and final events; -1: none. */
  logprobs: 'number',
  /** Detect tool-call spans (when the context has markers). */
  detectToolCalls: 'boolean',
  greedyToolSyntax: 'boolean',
  /** Tool-call grammar (GBNF; '' : spans unconstrained) and its root rule; see src/grammar. */
  toolGrammar: 'string',
  toolGrammarRoot: 'string',
  /** The tool grammar is active from the first token (toolChoice required / named). */
  toolRequired: 'boolean',
  parallelToolCalls: 'boolean',
  /** The end marker when it is one end-of-generation token; -1 otherwise. */
  toolEndEog: 'number',
  /** Reasoning markers (empty: no reasoning detection). */
  reasoningStart: 'Int32Array',
  reasoningEnd: 'Int32Array',
  /** The prompt opened a reasoning span already: output starts inside it. */
  reasoningOpen: 'boolean',
  /** >= 0: after this many reasoning tokens the end marker is forced; -1: no budget. */
  reasoningBudget: 'number',
  /** Channel headers dropped from text: token ids, sequences separated by -1. */
  textDrop: 'Int32Array',
  temperature: 'number',
  topK: 'number',
  topP: 'number',
  minP: 'number',
  typicalP: 'number',
  repeatPenalty: 'number',
  frequencyPenalty: 'number',
  presencePenalty: 'number',
  penaltyLastN: 'number',
  seed: 'number',
  /** '' : no grammar. */
  grammar: 'string',
  grammarRoot: 'string',
  logitBiasTokens: 'Int32Array',
  logitBiasValues: 'Float32Array',
} as const satisfies WireSchema;
export type NativeRequest = WireObject<typeof NATIVE_REQUEST_KEYS>;

/** `new native.Context(model, config, onEvents)` (native/js/context.cc Context::Context): src/native/request.ts contextConfig. */
export const NATIVE_CONTEXT_KEYS = {
  contextSize: 'number',
  batchSize: 'number',
  microBatchSize: 'number',
  sequences: 'number',
  /** 0: all hardware threads. */
  threads: 'number',
  /** 0: same as threads. */
  batchThreads: 'number',
  unifiedKv: 'boolean',
  swaFull: 'boolean',
  /** Issue 26: the context's CPU thread pools compute with ggml's reference kernels. */
  deterministic: 'boolean',
  flashAttention: FLASH_ATTENTION,
  /** ggml type ids; -1: llama.cpp's default. */
  kvTypeK: 'number',
  kvTypeV: 'number',
  maxQueued: 'number',
  /** Prompt tokens per tick; 0: batchSize. */
  prefillChunk: 'number',
  cacheRamBytes: 'number',
  sessionTtlMs: 'number',
  idleKvSpillMs: 'number',
  prefixCache: 'boolean',
  kvCheckpoints: 'number',
  /** Speculative decoding (the spec* limits below apply to it). */
  speculative: SPECULATIVE_MODES,
  /** mode 'draft': the draft model (same vocabulary); null otherwise. */
  draftModel: 'Model | null',
  specDraftMax: 'number',
  specNgramMin: 'number',
  specNgramMax: 'number',
  /** No drafting while more sequences than this decode. */
  specMaxSequences: 'number',
  /** Draft tokens per batch, all sequences together. */
  specTickBudget: 'number',
  /** One draft token's cost in decode steps; 0: the mode's default (mtp: estimated from the model). */
  specDraftCost: 'number',
  /** '' disables the disk tier. */
  cacheDir: 'string',
  cacheDiskBytes: 'number',
  diskWriteThrough: 'boolean',
  /** Tool-call markers (token ids); empty start: the plain text path. */
  markerStart: 'Int32Array',
  markerEnd: 'Int32Array',
  markerPayloadStart: 'Int32Array',
  markerPayloadEnd: 'Int32Array',
} as const satisfies WireSchema;
export type NativeContextOptions = WireObject<typeof NATIVE_CONTEXT_KEYS>;

/** `ctx.sessionCommand(command)` for session.end() / fork() (Context::SessionCommand): queued with the requests, answered by a sessionDone event. */
export const NATIVE_SESSION_COMMAND_KEYS = {
  id: 'number',
  op: SESSION_OPS,
  /** The session to end, or the fork's new session (handles). */
  session: 'number',
  /** Its name, for messages only. */
  sessionName: 'string',
  /** fork: the session to copy (0 for end). */
  from: 'number',
  /** fork: wait while `from` runs a request instead of SESSION_BUSY. */
  wait: 'boolean',
  /** -1: the context's sessionTtlMs. */
  sessionTtlMs: 'number',
} as const satisfies WireSchema;
export type NativeSessionCommand = WireObject<typeof NATIVE_SESSION_COMMAND_KEYS>;

/** `ctx.embed(job)` for ctx.embed() / rerank() (Context::Embed): one job, answered by an `embedded` event. */
export const NATIVE_EMBED_JOB_KEYS = {
  id: 'number',
  /** The inputs' tokens one after another. */
  tokens: 'Int32Array',
  /** Tokens per input. */
  lengths: 'Int32Array',
  pooling: POOLING_TYPES,
} as const satisfies WireSchema;
export type NativeEmbedJob = WireObject<typeof NATIVE_EMBED_JOB_KEYS>;
