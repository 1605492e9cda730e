// Every public option schema. Options are validated once here, at the edge; the native
// side trusts what it receives.
import { z } from 'zod';
import { LlamuxError } from './errors.js';
import { MarkerOptionSchema } from './engine/markers.js';
import { ReasoningOptionSchema } from './engine/reasoning.js';
import { deprecate } from './deprecation.js';
import { formatIssues } from './issues.js';
import { Adapter } from './model/adapter.js';

const zodSchema = z.custom<z.core.$ZodType>((v) => typeof v === 'object' && v !== null && '_zod' in v, { message: 'expected a zod schema' });

/** A tool the model may call (`generate({ tools })`): its arguments schema constrains tool-call spans. */
export const GenerateToolSchema = z
  .object({
    name: z.string().min(1).max(256),
    description: z.string().optional(),
    /** JSON Schema (or a zod schema) of the arguments object; absent: the call takes no arguments. */
    parameters: z.union([zodSchema, z.record(z.string(), z.unknown()), z.boolean()]).optional(),
  })
  .strict();
export type GenerateTool = z.input<typeof GenerateToolSchema>;

/**
 * Structured output: `{ type: 'json' }` any JSON object, `{ jsonSchema }` one JSON value of that
 * schema (JSON Schema or a zod schema; compiled like tool arguments), `{ type: 'text' }` free text.
 */
export const ResponseFormatSchema = z.union([
  z.object({ type: z.literal('text') }).strict(),
  z.object({ type: z.literal('json') }).strict(),
  z.object({ jsonSchema: z.union([zodSchema, z.record(z.string(), z.unknown()), z.boolean()]) }).strict(),
]);
export type ResponseFormat = z.input<typeof ResponseFormatSchema>;

export const ToolChoiceSchema = z.union([z.enum(['auto', 'none', 'required']), z.object({ name: z.string().min(1) }).strict()]);

const abortSignal = z.custom<AbortSignal>((v) => v instanceof AbortSignal, { message: 'expected an AbortSignal' });
const positiveInt = z.number().int().positive();
/** `host:port` (IPv4 address or host name: ggml-rpc's client connects over IPv4). */
export const rpcEndpoint = z.string().regex(/^[A-Za-z0-9._-]+:\d{1,5}$/, 'expected "host:port"').refine((v) => {
  const port = Number(v.slice(v.lastIndexOf(':') + 1));
  return port >= 1 && port <= 65535;
}, 'port must be 1..65535');
/** A finite bias, or -Infinity to ban a token. */
const biasValue = z.custom<number>((v) => typeof v === 'number' && (Number.isFinite(v) || v === -Infinity), {
  message: 'expected a finite number or -Infinity',
});

// ---- prompts with media (src/engine/media.ts) ----
const bytes = z.custom<Uint8Array>((v) => v instanceof Uint8Array, { message: 'expected a Uint8Array (or Buffer)' });
/** Encoded media: the file's bytes, or a `data:` URL (base64). */
const mediaSource = z.union([bytes, z.string().min(1)]);

/** One part of a prompt with media. */
export const PromptPartSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text'), text: z.string() }).strict(),
  /** PNG, JPEG, BMP or GIF: a Buffer/Uint8Array of the file, or a `data:image/...;base64,` URL. */
  z.object({ type: z.literal('image'), image: mediaSource }).strict(),
  /** WAV, MP3 or FLAC (projectors with an audio encoder): bytes or a `data:audio/...;base64,` URL. */
  z.object({ type: z.literal('audio'), audio: mediaSource }).strict(),
]);
export type PromptPart = z.input<typeof PromptPartSchema>;
export const PromptPartsSchema = z.array(PromptPartSchema).min(1);

/** Bounds on the media of one prompt (src/engine/media.ts MediaLimits; defaults there). */
export const MediaLimitsSchema = z
  .object({
    maxPixels: z.number().int().positive().optional(),
    maxPerPrompt: z.number().int().positive().max(1024).optional(),
    maxBytes: z.number().int().positive().optional(),
    maxAudioSeconds: z.number().positive().finite().optional(),
  })
  .strict();

const fitDevice = z
  .object({
    name: z.string().min(1).max(256),
    description: z.string().max(1024).optional(),
    type: z.enum(['cpu', 'gpu', 'igpu', 'accel']),
    memoryFree: z.number().nonnegative().finite(),
    memoryTotal: z.number().nonnegative().finite(),
  })
  .strict();

export const LoadModelOptionsSchema = z
  .object({
    /** Layers to offload to a GPU: a number (-1: all), or 'auto' (the default): as many layers
     * (and as large a context) as fit in the GPUs' free memory, none without a GPU; the plan
     * and its reasons are on Model.fit. */
    gpuLayers: z.union([z.literal('auto'), z.number().int().min(-1)]).default('auto'),
    /** Load the vocabulary only: tokenize/detokenize work, no contexts. */
    vocabOnly: z.boolean().default(false),
    useMmap: z.boolean().default(true),
    useMlock: z.boolean().default(false),
    /** Validate tensor data while loading (slower). */
    checkTensors: z.boolean().default(false),
    /** Also load the model's multi-token-prediction blocks, for speculative mode 'mtp'
     * (a model without them loads as usual; see ModelMetadata.mtpLayers). Default false: they
     * take memory that only MTP drafting uses. */
    mtp: z.boolean().default(false),
    /** A multimodal projector (`mmproj-*.gguf`) for this model: prompts may then hold images
     * (and audio, when it has an audio encoder); see Model.capabilities. Loaded with libmtmd. */
    projector: z.string().min(1).optional(),
    /** Bounds on the media of one prompt (with a projector). */
    mediaLimits: MediaLimitsSchema.optional(),
    /** Default tool-call markers for contexts of this model (see ContextOptions.toolCallMarkers). */
    toolCallMarkers: MarkerOptionSchema.optional(),
    /** `host:port` of `llamux rpc-server` processes (ggml-rpc): the offloaded layers
     * (`gpuLayers`, all with 'auto') are placed on their devices. The protocol has no
     * authentication: private networks or a tunnel only. */
    rpcServers: z.array(rpcEndpoint).min(1).max(16).optional(),
    /** Share of the offloaded layers per device, in device order: each RPC server's devices
     * (in `rpcServers` order), then local GPUs. Default: by free memory. At most
     * llama.cpp's device count (`systemInfo().maxDevices`) entries are used. */
    tensorSplit: z.array(z.number().nonnegative().finite()).min(1).max(128).optional(),
    /**
     * MoE models: keep every layer's expert tensors (`blk.N.ffn_{up,down,gate,gate_up}_exps`,
     * with their biases and scales) in system RAM while the rest of the offloaded layers goes to
     * the GPU: a small GPU then holds attention, router and shared experts of every layer. No
     * effect on a model without experts, or on layers that run on the CPU anyway. Unset, with
     * gpuLayers 'auto', the plan chooses this (or nCpuMoe) when the experts do not fit; false:
     * no experts move (the plan offloads fewer layers instead).
     */
    cpuMoe: z.boolean().optional(),
    /** Like cpuMoe, for the experts of the first N layers only (0: none; N >= the layer count: all). Not with cpuMoe: true. */
    nCpuMoe: z.number().int().min(0).max(65536).optional(),
    /**
     * gpuLayers 'auto': what the plan reserves device memory for (see Model.fit). Contexts
     * created without a contextSize get the planned one.
     */
    fit: z
      .object({
        /** Context size (KV cells) to fit beside the layers. Default 4096. */
        contextSize: positiveInt.optional(),
        /** Parallel sequences the contexts will run (reported). Default 1. */
        sequences: z.number().int().min(1).max(256).optional(),
        /** The plan shrinks the context down to this, not below, before it leaves layers on the CPU. Default min(4096, contextSize). */
        contextFloor: positiveInt.optional(),
        /** MiB kept free on each GPU. Default: a sixteenth of its memory, 256 to 1024 MiB. */
        marginMb: z.number().min(0).optional(),
        /**
         * The devices and free memory to plan for, instead of what ggml reports (systemInfo().devices):
         * to plan as if less were free, or to test plans on a machine without that GPU. The load
         * still uses the devices llama.cpp has.
         */
        devices: z.array(fitDevice).min(1).max(64).optional(),
      })
      .strict()
      .optional(),
    /** Called with a fraction 0..1 while the weights load. */
    onProgress: z.function().optional(),
    signal: abortSignal.optional(),
  })
  .strict();
export type LoadModelOptions = Omit<z.input<typeof LoadModelOptionsSchema>, 'onProgress'> & {
  onProgress?: (progress: number) => void;
};

const kvType = z.enum(['f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_1', 'q5_0', 'q5_1']);
export const GGML_TYPE_IDS: Record<z.infer<typeof kvType>, number> = {
  f32: 0, f16: 1, q4_0: 2, q4_1: 3, q5_0: 6, q5_1: 7, q8_0: 8, bf16: 30,
};

/**
 * Speculative decoding (issue 27): 'ngram' drafts from the request's own prompt and output
 * (prompt lookup, no second model) and verifies the draft in the same batch as every other
 * sequence's decode step. Output is exactly what it would be without it (greedy token for
 * token; sampled runs draw the same tokens for a seed). Off on recurrent and hybrid models.
 */
/** One LoRA adapter of a set: `{ adapter, scale }` (scale default 1; 0 turns it off). */
const AdapterUseSchema = z
  .object({
    adapter: z.custom<Adapter>((v) => v instanceof Adapter, { message: 'expected an Adapter from model.loadAdapter()' }),
    scale: z.number().finite().min(-1000).max(1000).default(1),
  })
  .strict();
/** A set of LoRA adapters (each at most once). */
export const AdapterSetSchema = z
  .array(AdapterUseSchema)
  .max(64)
  .refine((set) => new Set(set.map((u) => u.adapter)).size === set.length, { message: 'each adapter may be listed once' });

export const SpeculativeOptionsSchema = z
  .object({
    /**
     * 'ngram': drafts looked up in the request's prompt and output; 'draft': greedy drafts of
     * `model`; 'mtp': greedy drafts of the model's own multi-token-prediction block (a model with
     * `metadata.mtpLayers` > 0, loaded with `{ mtp: true }`).
     */
    mode: z.enum(['ngram', 'draft', 'mtp']),
    /** mode 'draft': a second, smaller model with the same vocabulary (kept alive by the context). */
    model: z
      .custom<DraftModelLike>((v) => typeof v === 'object' && v !== null && typeof (v as { nativeHandle?: unknown }).nativeHandle === 'function', {
        message: 'expected a Model',
      })
      .optional(),
    /** Draft tokens per verification at most; the length adapts to acceptance below it. */
    draftMax: z.number().int().min(1).max(64).default(12),
    /** Shortest suffix of the text looked up earlier in the prompt and output. */
    ngramMin: z.number().int().min(1).max(16).default(2),
    /** Longest suffix looked up (longer matches win). */
    ngramMax: z.number().int().min(1).max(16).default(4),
    /** No drafting while more sequences than this decode: a full batch is compute-bound already. */
    maxSequences: z.number().int().min(1).max(256).default(4),
    /** Draft tokens per batch, all sequences together. */
    tickBudget: z.number().int().min(1).max(1024).default(32),
    /**
     * What drafting one token costs, in plain decode steps: the draft length policy weighs it
     * against the tokens a draft saves. Default: 0.005 (ngram), 0.035 (draft), and for 'mtp'
     * an estimate from the model's shapes (one block and the output head against the trunk).
     */
    draftCost: z.number().positive().max(4).optional(),
  })
  .strict()
  .refine((o) => o.ngramMax >= o.ngramMin, { message: 'ngramMax must be >= ngramMin', path: ['ngramMax'] })
  .refine((o) => (o.mode === 'draft') === (o.model !== undefined), { message: "mode 'draft' needs a model, and only it takes one", path: ['model'] });
export type SpeculativeOptions = z.input<typeof SpeculativeOptionsSchema>;
/** What a draft model must offer (a `Model`; structural to keep options.ts free of model.ts). */
export interface DraftModelLike {
  nativeHandle(): unknown;
}

export const ContextOptionsSchema = z
  .object({
    /** KV cells in all (tokens). With unifiedKv every sequence may grow to this size. */
    contextSize: positiveInt.default(4096),
    /** Parallel sequences (concurrent requests on the GPU/CPU at once). */
    sequences: z.number().int().min(1).max(256).default(1),
    /** Shared KV buffer across sequences (lets prefixes be shared; each sequence can use the whole context). */
    unifiedKv: z.boolean().default(true),
    /**
     * Sliding-window models (gemma 2-4, gpt-oss, ...): keep every position in the sliding-window
     * layers' cache too (llama.cpp's swa_full). true (default): any prefix can be reused, like a
     * plain KV. false: those layers keep about one window per sequence (much less KV memory),
     * and a prompt reuses a sequence only when it extends all of it (the tail cannot be cut back
     * once the window has moved on): other prompts are recomputed, and the report says so.
     */
    swaFull: z.boolean().default(true),
    /**
     * Deterministic mode (issue 26): the logits of a position depend only on the model, the CPU
     * variant, the thread count and the tokens it sees, not on how they were batched (cold,
     * reused prefix, restored from the RAM or disk tier, chunked prefill, any number of
     * concurrent sequences). The CPU kernels run their reference paths: one dot product per
     * output element, flash attention row by row. Not covered: another CPU variant or thread
     * count, GPU backends. Costs prefill speed (docs/benchmark.md).
     */
    deterministic: z.boolean().default(false),
    /** Max tokens per llama_decode call. */
    batchSize: positiveInt.default(512),
    /** Physical micro-batch size. */
    microBatchSize: positiveInt.default(512),
    /** Max prompt tokens a tick may prefill (chunked prefill); default batchSize. */
    prefillChunk: positiveInt.optional(),
    /** Threads for single-token decode (default: all hardware threads). */
    threads: positiveInt.optional(),
    /** Threads for prompt processing (default: threads). */
    batchThreads: positiveInt.optional(),
    flashAttention: z.enum(['auto', 'on', 'off']).default('auto'),
    kvCacheTypeK: kvType.optional(),
    kvCacheTypeV: kvType.optional(),
    /** Requests allowed to wait for a free sequence before QUEUE_FULL. */
    maxQueued: z.number().int().min(0).default(1024),
    /**
     * Tool-call markers: a preset name, explicit markers, 'auto' (detect from the vocabulary
     * and chat template; the default, falling back to the model's loadModel option), or false.
     */
    toolCallMarkers: MarkerOptionSchema.optional(),
    /**
     * Reasoning markers: a preset name (`think`, `harmony`, `gemma4`), explicit `{ start, end }`,
     * 'auto' (detect from the chat template; the default) or false (reasoning is plain text).
     */
    reasoningMarkers: ReasoningOptionSchema.optional(),
    /** Reuse KV across requests (live sequences, sessions, tiers). false: every prompt is prefilled in full. */
    prefixCache: z.boolean().default(true),
    /**
     * Recurrent/hybrid models: checkpoints (partial states at turn boundaries) kept per sequence,
     * so a prompt diverging from a sequence or a saved state restores one instead of
     * recomputing everything. Each costs the model's recurrent state size in host memory
     * (at most 256 MiB per sequence in all). 0: none.
     */
    kvCheckpoints: z.number().int().min(0).max(32).default(4),
    /**
     * Speculative decoding: false (default), 'ngram' (defaults below) or its options. Requests
     * opt out with `speculative: false`. See SpeculativeOptionsSchema.
     */
    speculative: z
      .union([z.literal(false), z.literal('ngram'), SpeculativeOptionsSchema])
      .default(false)
      .transform((v) => (v === false ? undefined : SpeculativeOptionsSchema.parse(v === 'ngram' ? { mode: 'ngram' } : v))),
    /** RAM tier of saved sequence states, in MiB (0 disables it). */
    cacheRamMb: z.number().min(0).default(256),
    /** Disk tier folder for saved sequence states (survives restarts); off when unset. */
    cacheDir: z.string().min(1).optional(),
    /**
     * With cacheDir: write each finished request's KV state to the disk tier (copied on the
     * engine thread, written by the I/O thread), so a conversation survives kill -9. false:
     * states reach disk only when they leave RAM or the context closes.
     */
    cacheWriteThrough: z.boolean().default(true),
    /** Disk tier budget in MiB. */
    cacheDiskMb: z.number().min(0).default(4096),
    /**
     * Idle KV older than this (ms) moves to the RAM tier while other requests decode and the
     * idle cells outnumber theirs: with unified KV, idle cells widen every running request's
     * attention window. 0 (default): never. llamux's llama.cpp skips masked cells in whole runs
     * and splits a decode step's KV between threads by visible cells, so a 2,000-token idle
     * session now costs a short request's decode ~1 % on a 2-core CPU (5 % before, 33 % on a
     * Sapphire Rapids CPU), while moving it stalls the engine for the state copy (~0.5 s on the
     * bench VM): worth it only to free cells, or with an unpatched LLAMA_CPP_DIR build.
     */
    idleKvSpillMs: z.number().int().min(0).default(0),
    /** Idle sessions release their pinned sequence after this many milliseconds. */
    sessionTtlMs: z.number().int().positive().default(600_000),
    /** LoRA adapters every request uses unless it names its own `adapters` (default: none). */
    adapters: AdapterSetSchema.default([]),
  })
  .strict();
export type ContextOptions = z.input<typeof ContextOptionsSchema>;

export const SamplingOptionsSchema = z
  .object({
    /** 0 = greedy. */
    temperature: z.number().min(0).default(0.8),
    topK: z.number().int().min(0).default(40),
    topP: z.number().gt(0).max(1).default(0.95),
    minP: z.number().min(0).max(1).default(0.05),
    typicalP: z.number().gt(0).max(1).default(1),
    repeatPenalty: z.number().gt(0).default(1),
    frequencyPenalty: z.number().default(0),
    presencePenalty: z.number().default(0),
    penaltyLastN: z.number().int().min(-1).default(64),
    /** RNG seed; default random (drawn once per request). */
    seed: z.number().int().min(0).max(0xffffffff).default(() => Math.floor(Math.random() * 0xffffffff)),
    /** Token id -> additive logit bias (use -Infinity to ban). */
    logitBias: z.record(z.string().regex(/^\d+$/), biasValue).or(z.map(z.number().int().min(0), biasValue)).optional(),
    /** A GBNF grammar the output must follow. */
    grammar: z.string().min(1).optional(),
    grammarRoot: z.string().min(1).default('root'),
  })
  .strict();

/**
 * Token ids as a plain array. One loop instead of zod's per-element schema: a 4k-token prompt
 * validated element by element cost 1–16 ms per request.
 */
const tokenIdArray = z.custom<number[]>(
  (v) => {
    if (!Array.isArray(v)) return false;
    for (let i = 0; i < v.length; i++) {
      const t = v[i];
      if (typeof t !== 'number' || !Number.isInteger(t) || t < 0) return false;
    }
    return true;
  },
  { message: 'expected token ids: an array of non-negative integers' },
);

const GenerateFieldsSchema = SamplingOptionsSchema.extend({
  /** Text (tokenized with the model's vocabulary), token ids, or content parts (text, images, audio: a model loaded with a projector). */
  prompt: z.union([z.string(), z.custom<Int32Array>((v) => v instanceof Int32Array, { message: 'expected an Int32Array' }), tokenIdArray, PromptPartsSchema]),
  /** Add BOS etc. when the prompt is text. */
  addSpecial: z.boolean().default(true),
  /** Parse special-token text (e.g. "<|im_start|>") in a text prompt. Off by default: never for untrusted text. */
  parseSpecial: z.boolean().default(false),
  /** Generated-token limit; default: until end of generation or the context end. */
  maxTokens: z.number().int().positive().optional(),
  /** Stop strings: generation ends before any of them, and no text from it onwards is emitted. */
  stop: z.array(z.string().min(1)).max(64).default([]),
  /**
   * The output's shape: one JSON value (`{ jsonSchema }` or `{ type: 'json' }`), enforced by a
   * grammar over the whole output; generation ends when the value is complete. Not with
   * `grammar` or `tools`.
   */
  responseFormat: ResponseFormatSchema.optional(),
  /**
   * Log-probabilities: each generated token's, and its `logprobs` most likely alternatives
   * (0 to 20), from the model's distribution at that position (log-softmax of the raw logits,
   * before logit bias, penalties, grammars and temperature). On text events and the result.
   */
  logprobs: z.number().int().min(0).max(20).optional(),
  /** Include token ids in text events and the result (default false). */
  emitTokenIds: z.boolean().optional(),
  /** @deprecated Renamed `emitTokenIds`; accepted for one release. */
  tokens: z.boolean().optional(),
  /** Render control tokens (e.g. <|im_end|>) into the text. */
  renderSpecial: z.boolean().default(false),
  /** Detect tool-call spans when the context has markers (default true). */
  detectToolCalls: z.boolean().optional(),
  /** @deprecated Renamed `detectToolCalls`; accepted for one release. */
  toolCalls: z.boolean().optional(),
  /** Sample tool-call wrapper syntax greedily (payloads keep the request's sampler). */
  greedyToolSyntax: z.boolean().default(true),
  /** Tools the model may call: tool-call spans are constrained to the family's call syntax, one of these names and its arguments schema. */
  tools: z.array(GenerateToolSchema).max(512).optional(),
  /** 'auto': free text until a span opens; 'required' / { name }: a call first; 'none': no span detection. */
  toolChoice: ToolChoiceSchema.default('auto'),
  /** false: generation ends when the first tool-call span closes (finishReason 'toolCall'). */
  parallelToolCalls: z.boolean().default(true),
  /** GBNF (rule root) for the span body between the markers, instead of the JSON call syntax built from `tools`. */
  toolCallGrammar: z.string().min(1).optional(),
  /** Detect reasoning spans when the context has reasoning markers: their tokens are `reasoning` events, apart from text (default true). */
  detectReasoning: z.boolean().default(true),
  /** Reasoning tokens allowed before the span's end marker is forced (then generation goes on); default: no limit. */
  reasoningBudget: z.number().int().min(0).optional(),
  /** Output starts inside a reasoning span; default: when the prompt's last reasoning start marker has no end marker after it. */
  reasoningOpen: z.boolean().optional(),
  signal: abortSignal.optional(),
  /** Pin a sequence to this session across requests: a prompt extending the last one prefills only the new tokens. */
  sessionId: z.string().min(1).max(256).optional(),
  /** Wait for the session's running request instead of failing with SESSION_BUSY. */
  waitForSession: z.boolean().default(false),
  /**
   * Cache scope (tenant isolation): the request reuses only KV computed under the same scope,
   * and KV it computes is reused only by that scope; scoped KV never enters the shared RAM or
   * disk prefix tiers. Default: the shared scope.
   */
  cacheScope: z.string().min(1).max(256).optional(),
  /** A key from prefillOnly(): the prompt continues that prefix. */
  parentKey: z.string().regex(/^[0-9a-f]{64}$/).optional(),
  /**
   * LoRA adapters for this request, with their scales (`model.loadAdapter()`); `[]`: the base
   * model. Default: the context's `adapters`. KV is reused only under the same set and scales.
   */
  adapters: AdapterSetSchema.optional(),
  /** Speculative decoding for this request when the context has it (default true); false: plain decoding. */
  speculative: z.boolean().default(true),
  /** `progress` events while the prompt is prefilled: one after each prefill chunk (tokens done of the total). */
  progress: z.boolean().default(false),
  /**
   * When the sequence is full (context shift). 'stop' (default): a prompt that does not fit
   * fails with CONTEXT_OVERFLOW and generation ends with finishReason 'length'. 'shift': the
   * first `nKeep` tokens stay, the oldest half of the rest is dropped and generation goes on;
   * the remaining KV is moved (fast), so it no longer equals a fresh prefill and no cache serves
   * it to another request (the request's own session continues on it). Where the memory cannot
   * move KV (recurrent and hybrid models) it re-prefills instead. 'reprefill': the same window,
   * recomputed from `nKeep` on (exact, on every model). A prompt longer than the sequence is cut
   * the same way before it is prefilled. `shiftedTokens` in the result counts what was dropped.
   */
  overflow: z.enum(['stop', 'shift', 'reprefill']).default('stop'),
  /** Tokens a context shift keeps at the start (a leading BOS is kept besides, as llama-server counts n_keep); -1: the whole prompt. */
  nKeep: z.number().int().min(-1).max(1 << 24).default(0),
  /**
   * Prompt-cache breakpoints (at most 4, ascending): the KV of the prompt's first `tokens` tokens
   * is saved to the RAM and disk tiers when this request prefills it, and kept there for `ttlMs`
   * ahead of unretained states (a hint under the tiers' budgets; a breakpoint the request reused
   * from a saved state extends its retention). The result's `cache.retainedTokens` and
   * `cache.retainRefused` report what was kept. Not with a cacheScope (scoped KV stays out of the tiers).
   */
  retainPrefixes: z
    .array(z.object({ tokens: z.number().int().min(1).max(2 ** 31 - 1), ttlMs: z.number().int().min(1).max(2 ** 31 - 1) }).strict())
    .max(4)
    .refine((a) => a.every((p, i) => i === 0 || p.tokens > a[i - 1]!.tokens), { message: 'retainPrefixes must ascend by tokens' })
    .optional(),
  /** Events buffered for a slow consumer before its sequence pauses. */
  highWaterMark: positiveInt.default(256),
}).strict();

type RenamedFlags = { emitTokenIds?: boolean; tokens?: boolean; detectToolCalls?: boolean; toolCalls?: boolean };
type WithFlags<T> = Omit<T, keyof RenamedFlags> & { emitTokenIds: boolean; detectToolCalls: boolean };

/** The switches' defaults, and the one-release aliases `tokens` and `toolCalls` (each warns once). */
function withFlags<T extends RenamedFlags>(o: T): WithFlags<T> {
  const { emitTokenIds, tokens, detectToolCalls, toolCalls, ...rest } = o;
  if (tokens !== undefined) deprecate('LLAMUX_DEP_TOKENS_OPTION', 'The generate option "tokens" is deprecated: use "emitTokenIds"');
  if (toolCalls !== undefined) deprecate('LLAMUX_DEP_TOOLCALLS_OPTION', 'The generate option "toolCalls" is deprecated: use "detectToolCalls"');
  return { ...rest, emitTokenIds: emitTokenIds ?? tokens ?? false, detectToolCalls: detectToolCalls ?? toolCalls ?? true };
}

export const GenerateOptionsSchema = GenerateFieldsSchema.transform(withFlags);
export type GenerateOptions = z.input<typeof GenerateOptionsSchema>;
export type ParsedGenerateOptions = z.output<typeof GenerateOptionsSchema>;

/** `session.continue()` / `ctx.continue()`: generate options without a prompt, plus `expectCommitted`. */
export const ContinueOptionsSchema = GenerateFieldsSchema.omit({ prompt: true, sessionId: true, parentKey: true, retainPrefixes: true })
  .extend({
    /** The caller's view of the committed tokens; a difference fails with TRANSCRIPT_MISMATCH. */
    expectCommitted: z.union([z.custom<Int32Array>((v) => v instanceof Int32Array, { message: 'expected an Int32Array' }), tokenIdArray]).optional(),
  })
  .strict()
  .transform(withFlags);
export type ParsedContinueOptions = z.output<typeof ContinueOptionsSchema>;

/** `ctx.infill()`: generate options without a prompt, plus the text around the cursor (src/engine/infill.ts builds the prompt). */
export const InfillOptionsSchema = GenerateFieldsSchema.omit({ prompt: true, sessionId: true, parentKey: true, retainPrefixes: true })
  .extend({
    /** The code before the cursor. */
    prefix: z.string(),
    /** The code after the cursor. */
    suffix: z.string(),
    /** Other files for context (repo-level fill-in-the-middle), before the prefix. */
    extra: z
      .array(z.object({ filename: z.string().max(4096).optional(), text: z.string() }).strict())
      .max(1024)
      .optional(),
  })
  .strict()
  .transform(withFlags);
export type InfillOptions = z.input<typeof InfillOptionsSchema>;

export const SessionOptionsSchema = z
  .object({
    /** The session's id (default: a random UUID). */
    id: z.string().min(1).max(256).optional(),
    /** Idle time after which the engine releases the session (default: the context's sessionTtlMs). */
    ttlMs: z.number().int().positive().optional(),
  })
  .strict();
export type SessionOptions = z.input<typeof SessionOptionsSchema>;

export const PrefillOptionsSchema = z
  .object({
    parentKey: z.string().regex(/^[0-9a-f]{64}$/).optional(),
    /** LoRA adapters the prefix is computed with (default: the context's); part of the key. */
    adapters: AdapterSetSchema.optional(),
    /** Add BOS etc. to a text prompt; default: true without parentKey, false with one. */
    addSpecial: z.boolean().optional(),
    parseSpecial: z.boolean().default(false),
    sessionId: z.string().min(1).max(256).optional(),
    signal: abortSignal.optional(),
  })
  .strict()
  .transform((o) => ({ ...o, addSpecial: o.addSpecial ?? o.parentKey === undefined }));
export type PrefillOptions = z.input<typeof PrefillOptionsSchema>;
export type ParsedPrefillOptions = z.output<typeof PrefillOptionsSchema>;

export const TokenizeOptionsSchema = z
  .object({
    addSpecial: z.boolean().default(true),
    parseSpecial: z.boolean().default(false),
    /** Stop (CONTEXT_OVERFLOW) once the text passes this many tokens, without tokenizing the rest. */
    maxTokens: z.number().int().positive().optional(),
    signal: abortSignal.optional(),
  })
  .strict();
export type TokenizeOptions = Omit<z.input<typeof TokenizeOptionsSchema>, 'signal'>;
/** tokenizeAsync options (and tokenize's when it is given a signal). */
export type TokenizeAsyncOptions = TokenizeOptions & { signal?: AbortSignal };

export const DetokenizeOptionsSchema = z.object({ special: z.boolean().default(false) }).strict();
export type DetokenizeOptions = z.input<typeof DetokenizeOptionsSchema>;

/** Parses `input` with `schema`; on failure throws INVALID_ARGUMENT naming each bad option. */
export function parseOptions<S extends z.ZodType>(schema: S, input: unknown, what: string): z.output<S> {
  const r = schema.safeParse(input ?? {});
  if (r.success) return r.data;
  throw new LlamuxError('INVALID_ARGUMENT', `Invalid ${what}: ${formatIssues(r.error.issues, { kind: 'option', input, what })}`, { issues: r.error.issues });
}
