// The mappers from validated options to what the native addon reads: one per request kind
// (generate, continue, prefillOnly, session command) plus the context config. Each returns a
// complete object: every key the native side reads (listed in src/native/request-schema.ts) is
// present, and the native side holds no defaults (native/js/context.cc throws a TypeError
// naming a missing or mistyped key). Defaults live in src/options.ts; this file only encodes
// (undefined maxTokens → -1, no session → 0).
import { resolve as resolvePath } from 'node:path';
import type { NativeReady } from './binding.js';
import { LlamuxError } from '../errors.js';
import { FLASH_ATTENTION, SESSION_OPS, SPECULATIVE_MODES, type NativeContextOptions, type NativeRequest, type NativeSessionCommand } from './request-schema.js';
import { compileResponseFormat, compileToolGrammar, SchemaGrammarError } from '../grammar/index.js';
import type { ResolvedMarkers } from '../engine/markers.js';
import { promptOpensReasoning, type ResolvedReasoningMarkers } from '../engine/reasoning.js';
import { GGML_TYPE_IDS, type ContextOptionsSchema, type ParsedContinueOptions, type ParsedGenerateOptions } from '../options.js';
import { isZodSchema, parametersJsonSchema } from '../tool-schema.js';
import { toInt32Array } from '../engine/tokens.js';
import { adapterFields, type AdapterUse } from '../model/adapter.js';
import { mediaOf } from '../engine/media.js';
import type { z } from 'zod';

export type ParsedContextOptions = z.output<typeof ContextOptionsSchema>;

/** The session a request runs on (a `Session`). */
export interface SessionRef {
  /** Its name, for messages. */
  readonly id: string;
  /** Its native handle: what the engine knows it by. */
  readonly handle: number;
  /** This session's idle TTL; undefined: the context's sessionTtlMs. */
  readonly ttlMs: number | undefined;
}

/** The tool-call fields of a request: the span grammar and when it is active. */
export type ToolFields = Pick<NativeRequest, 'detectToolCalls' | 'toolGrammar' | 'toolGrammarRoot' | 'toolRequired' | 'parallelToolCalls' | 'toolEndEog'>;

/** The vocabulary question the tool fields ask (a Model answers it). */
export interface EogVocab {
  isEndOfGeneration(token: number): boolean;
  /** Tokenizes marker text (for the control tokens of a call syntax); absent: matched by spelling. */
  tokenize?(text: string, options: { addSpecial: boolean; parseSpecial: boolean }): Int32Array;
}

const SYNTAX_TOKENS: Partial<Record<string, readonly string[]>> = {
  harmony: ['<|channel|>', '<|constrain|>', '<|message|>'],
  deepseek: ['<｜tool▁sep｜>'],
  'gemma4-native': ['<|"|>'],
};

/** The control tokens of a call syntax, when each is one token of the vocabulary. */
function syntaxTokens(preset: string | undefined, vocab: EogVocab): Record<string, number> | undefined {
  const texts = preset === undefined ? undefined : SYNTAX_TOKENS[preset];
  if (!vocab.tokenize || !texts) return undefined;
  const out: Record<string, number> = {};
  for (const text of texts) {
    const ids = vocab.tokenize(text, { addSpecial: false, parseSpecial: true });
    if (ids.length === 1) out[text] = ids[0]!;
  }
  return out;
}

/** The reasoning fields of a request. */
export type ReasoningFields = Pick<NativeRequest, 'reasoningStart' | 'reasoningEnd' | 'reasoningOpen' | 'reasoningBudget' | 'textDrop'>;

const NO_EXPECT = null;
const EMPTY_I32 = new Int32Array(0);
const EMPTY_F32 = new Float32Array(0);

/**
 * The tool fields of `tools` / `toolChoice` / `parallelToolCalls` / `toolCallGrammar` /
 * `detectToolCalls`: the span grammar (compiled and cached in src/grammar) and when it is active.
 * @throws LlamuxError INVALID_ARGUMENT (a combination that cannot run), before anything is queued
 */
export function toolFields(o: ParsedGenerateOptions | ParsedContinueOptions, markers: ResolvedMarkers | undefined, vocab: EogVocab): ToolFields {
  const none: ToolFields = {
    detectToolCalls: o.detectToolCalls,
    toolGrammar: '',
    toolGrammarRoot: 'root',
    toolRequired: false,
    parallelToolCalls: o.parallelToolCalls,
    toolEndEog: -1,
  };
  if (o.toolChoice === 'none') return { ...none, detectToolCalls: false };
  const tools = o.tools ?? [];
  const constrained = tools.length > 0 || o.toolCallGrammar !== undefined;
  if (!constrained) {
    if (o.toolChoice !== 'auto') throw new LlamuxError('INVALID_ARGUMENT', `toolChoice ${JSON.stringify(o.toolChoice)} needs tools (or toolCallGrammar)`);
    return none;
  }
  const m = markers;
  if (!m) throw new LlamuxError('INVALID_ARGUMENT', 'tools need tool-call markers, and this context has none (set toolCallMarkers when creating it)');
  if (!o.detectToolCalls) throw new LlamuxError('INVALID_ARGUMENT', 'tools need tool-call detection: remove detectToolCalls: false (or use toolChoice "none")');
  if (o.grammar !== undefined) throw new LlamuxError('INVALID_ARGUMENT', 'grammar and tools cannot be combined: the tool grammar constrains tool-call spans, grammar the whole output');
  const endIsEog = m.end.length === 1 && vocab.isEndOfGeneration(m.end[0]!);
  const g = compileToolGrammar({
    tools: tools.map((t) => ({ name: t.name, parameters: t.parameters === undefined ? undefined : isZodSchema(t.parameters) ? parametersJsonSchema(t.parameters) : t.parameters })),
    choice: o.toolChoice,
    family: m.preset ?? 'json',
    start: Array.from(m.start),
    end: Array.from(m.end),
    endIsEog,
    parallel: o.parallelToolCalls,
    ...(syntaxTokens(m.preset, vocab) ? { specialTokens: syntaxTokens(m.preset, vocab)! } : {}),
    ...(o.toolCallGrammar !== undefined ? { body: o.toolCallGrammar } : {}),
  });
  return {
    ...none,
    toolGrammar: g.gbnf,
    toolGrammarRoot: g.root,
    toolRequired: o.toolChoice !== 'auto',
    toolEndEog: endIsEog ? m.end[0]! : -1,
  };
}

const NO_REASONING: ReasoningFields = { reasoningStart: new Int32Array(0), reasoningEnd: new Int32Array(0), reasoningOpen: false, reasoningBudget: -1, textDrop: new Int32Array(0) };

function flatDrop(drop: readonly Int32Array[] | undefined): Int32Array {
  if (!drop?.length) return NO_REASONING.textDrop;
  const out: number[] = [];
  for (const d of drop) out.push(...d, -1);
  return Int32Array.from(out);
}

/**
 * The reasoning fields of `detectReasoning` / `reasoningBudget` for a prompt (a continue tail
 * counts as the prompt: a chat turn's tail holds its generation prompt).
 */
export function reasoningFields(
  o: ParsedGenerateOptions | ParsedContinueOptions,
  markers: ResolvedReasoningMarkers | undefined,
  prompt: Int32Array,
): ReasoningFields {
  if (!markers || !o.detectReasoning) return NO_REASONING;
  return {
    reasoningStart: markers.start,
    reasoningEnd: markers.end,
    reasoningOpen: o.reasoningOpen ?? promptOpensReasoning(prompt, markers),
    reasoningBudget: o.reasoningBudget ?? -1,
    textDrop: flatDrop(markers.drop),
  };
}

/**
 * `logitBias` token ids inside the vocabulary: checked when the request is made, since a text
 * prompt reaches the native side (which checks them too) only after tokenizing.
 * @throws LlamuxError INVALID_ARGUMENT
 */
export function checkLogitBias(o: ParsedGenerateOptions | ParsedContinueOptions, vocabSize: number): void {
  if (!o.logitBias) return;
  const ids = o.logitBias instanceof Map ? [...o.logitBias.keys()] : Object.keys(o.logitBias).map(Number);
  for (const t of ids) {
    if (t >= vocabSize) throw new LlamuxError('INVALID_ARGUMENT', `logitBias token ${t} is outside the vocabulary`);
  }
}

/**
 * `responseFormat` as the request's grammar (a JSON value over the whole output): sets
 * `grammar` and `grammarRoot` on the parsed options. Called when the request is made.
 * @throws LlamuxError INVALID_ARGUMENT (with grammar or tools; a schema that cannot be compiled)
 */
export function applyResponseFormat<T extends ParsedGenerateOptions | ParsedContinueOptions>(o: T): T {
  const rf = o.responseFormat;
  if (rf === undefined || 'type' in rf && rf.type === 'text') return o;
  if (o.grammar !== undefined) throw new LlamuxError('INVALID_ARGUMENT', 'responseFormat and grammar cannot be combined: both constrain the whole output');
  if ((o.tools?.length ?? 0) > 0 || o.toolCallGrammar !== undefined) {
    throw new LlamuxError('INVALID_ARGUMENT', 'responseFormat and tools cannot be combined: the output is one JSON value, with no tool-call spans');
  }
  let g;
  try {
    if ('jsonSchema' in rf) {
      const s = rf.jsonSchema;
      g = compileResponseFormat(isZodSchema(s) ? parametersJsonSchema(s) : (s as Record<string, unknown> | boolean));
    } else {
      g = compileResponseFormat('object');
    }
  } catch (e) {
    if (!(e instanceof SchemaGrammarError)) throw e;
    throw new LlamuxError('INVALID_ARGUMENT', `responseFormat: the schema${e.path ? ` at ${e.path}` : ''} cannot be compiled to a grammar: ${e.message}`);
  }
  return { ...o, grammar: g.gbnf, grammarRoot: g.root };
}

type Sampled = Pick<
  NativeRequest,
  | 'maxTokens' | 'stop' | 'emitTokenIds' | 'renderSpecial' | 'logprobs' | 'greedyToolSyntax' | 'cacheScope' | 'adapterIds' | 'adapterScales' | 'speculative' | 'progress' | 'overflow' | 'nKeep'
  | 'temperature' | 'topK' | 'topP' | 'minP' | 'typicalP' | 'repeatPenalty' | 'frequencyPenalty' | 'presencePenalty' | 'penaltyLastN' | 'seed'
  | 'grammar' | 'grammarRoot' | 'logitBiasTokens' | 'logitBiasValues'
>;

/** The output and sampling fields shared by generate and continue. */
function sampledFields(o: ParsedGenerateOptions | ParsedContinueOptions): Sampled {
  let logitBiasTokens = EMPTY_I32;
  let logitBiasValues = EMPTY_F32;
  if (o.logitBias) {
    const entries = o.logitBias instanceof Map ? [...o.logitBias.entries()] : Object.entries(o.logitBias).map(([k, v]) => [Number(k), v] as const);
    logitBiasTokens = Int32Array.from(entries.map((e) => e[0]));
    logitBiasValues = Float32Array.from(entries.map((e) => e[1]));
  }
  return {
    maxTokens: o.maxTokens ?? -1,
    stop: o.stop,
    emitTokenIds: o.emitTokenIds,
    renderSpecial: o.renderSpecial,
    logprobs: o.logprobs ?? -1,
    greedyToolSyntax: o.greedyToolSyntax,
    cacheScope: o.cacheScope ?? '',
    ...adapterFields(o.adapters),
    speculative: o.speculative,
    progress: o.progress,
    overflow: o.overflow,
    nKeep: o.nKeep,
    temperature: o.temperature,
    topK: o.topK,
    topP: o.topP,
    minP: o.minP,
    typicalP: o.typicalP,
    repeatPenalty: o.repeatPenalty,
    frequencyPenalty: o.frequencyPenalty,
    presencePenalty: o.presencePenalty,
    penaltyLastN: o.penaltyLastN,
    seed: o.seed,
    grammar: o.grammar ?? '',
    grammarRoot: o.grammarRoot,
    logitBiasTokens,
    logitBiasValues,
  };
}

function sessionFields(session: SessionRef | undefined, wait: boolean): Pick<NativeRequest, 'session' | 'sessionName' | 'sessionTtlMs' | 'waitForSession'> {
  return { session: session?.handle ?? 0, sessionName: session?.id ?? '', sessionTtlMs: session?.ttlMs ?? -1, waitForSession: session !== undefined && wait };
}

/** `generate()`: the prompt, already tokenized (src/engine/prompt-tokens.ts). */
export function generateRequest(
  id: number,
  o: ParsedGenerateOptions,
  promptTokens: Int32Array,
  tools: ToolFields,
  session: SessionRef | undefined,
  reasoning: ReasoningFields = NO_REASONING,
): NativeRequest {
  return {
    id,
    promptTokens,
    media: mediaOf(promptTokens),
    ...sessionFields(session, o.waitForSession),
    continueSession: false,
    expectCommitted: NO_EXPECT,
    prefillOnly: false,
    retainAt: o.retainPrefixes ? Int32Array.from(o.retainPrefixes, (p) => p.tokens) : EMPTY_I32,
    retainMs: o.retainPrefixes ? Int32Array.from(o.retainPrefixes, (p) => p.ttlMs) : EMPTY_I32,
    ...sampledFields(o),
    ...tools,
    ...reasoning,
  };
}

/** `continue()`: the tail, appended to the session's committed tokens by the engine. */
export function continueRequest(
  id: number,
  o: ParsedContinueOptions,
  tail: Int32Array,
  tools: ToolFields,
  session: SessionRef,
  reasoning: ReasoningFields = NO_REASONING,
): NativeRequest {
  return {
    id,
    promptTokens: tail,
    media: mediaOf(tail),
    ...sessionFields(session, o.waitForSession),
    continueSession: true,
    expectCommitted: o.expectCommitted ? toInt32Array(o.expectCommitted) : NO_EXPECT,
    prefillOnly: false,
    retainAt: EMPTY_I32,
    retainMs: EMPTY_I32,
    ...sampledFields(o),
    ...tools,
    ...reasoning,
  };
}

/** `prefillOnly()`: computes the prompt's KV and generates nothing, so sampling is fixed. */
export function prefillRequest(id: number, promptTokens: Int32Array, session: SessionRef | undefined, cacheScope = '', adapters: readonly AdapterUse[] = []): NativeRequest {
  return {
    id,
    promptTokens,
    media: mediaOf(promptTokens),
    ...sessionFields(session, false),
    continueSession: false,
    expectCommitted: NO_EXPECT,
    prefillOnly: true,
    retainAt: EMPTY_I32,
    retainMs: EMPTY_I32,
    maxTokens: -1,
    stop: [],
    emitTokenIds: false,
    renderSpecial: false,
    logprobs: -1,
    greedyToolSyntax: false,
    cacheScope,
    ...adapterFields(adapters),
    speculative: false,
    progress: false,
    overflow: 'stop',
    nKeep: 0,
    temperature: 0,
    topK: 0,
    topP: 1,
    minP: 0,
    typicalP: 1,
    repeatPenalty: 1,
    frequencyPenalty: 0,
    presencePenalty: 0,
    penaltyLastN: 0,
    seed: 0,
    grammar: '',
    grammarRoot: 'root',
    logitBiasTokens: EMPTY_I32,
    logitBiasValues: EMPTY_F32,
    detectToolCalls: false,
    toolGrammar: '',
    toolGrammarRoot: 'root',
    toolRequired: false,
    parallelToolCalls: true,
    toolEndEog: -1,
    ...NO_REASONING,
  };
}

/** `session.end()`: releases the session's pinned sequence. */
export function endSessionCommand(id: number, session: SessionRef): NativeSessionCommand {
  return { id, op: SESSION_OPS.end, session: session.handle, sessionName: session.id, from: 0, wait: false, sessionTtlMs: session.ttlMs ?? -1 };
}

/** `session.fork()`: `to` starts from `from`'s KV and committed tokens. */
export function forkSessionCommand(id: number, from: SessionRef, to: SessionRef, wait: boolean): NativeSessionCommand {
  return { id, op: SESSION_OPS.fork, session: to.handle, sessionName: to.id, from: from.handle, wait, sessionTtlMs: to.ttlMs ?? -1 };
}

/** `model.createContext()`: the native context config (resolved paths, bytes, ggml type ids). */
export function contextConfig(opts: ParsedContextOptions, markers: ResolvedMarkers | undefined): NativeContextOptions {
  return {
    contextSize: opts.contextSize,
    batchSize: Math.max(opts.batchSize, opts.sequences),
    microBatchSize: opts.microBatchSize,
    sequences: opts.sequences,
    threads: opts.threads ?? 0,
    batchThreads: opts.batchThreads ?? 0,
    unifiedKv: opts.unifiedKv,
    swaFull: opts.swaFull,
    deterministic: opts.deterministic,
    flashAttention: FLASH_ATTENTION[opts.flashAttention],
    kvTypeK: opts.kvCacheTypeK ? GGML_TYPE_IDS[opts.kvCacheTypeK] : -1,
    kvTypeV: opts.kvCacheTypeV ? GGML_TYPE_IDS[opts.kvCacheTypeV] : -1,
    maxQueued: opts.maxQueued,
    prefillChunk: opts.prefillChunk ?? 0,
    cacheRamBytes: Math.floor(opts.cacheRamMb * 1024 * 1024),
    sessionTtlMs: opts.sessionTtlMs,
    idleKvSpillMs: opts.idleKvSpillMs,
    prefixCache: opts.prefixCache,
    kvCheckpoints: opts.kvCheckpoints,
    speculative: opts.speculative ? SPECULATIVE_MODES[opts.speculative.mode] : SPECULATIVE_MODES.off,
    draftModel: (opts.speculative?.model?.nativeHandle() as NativeContextOptions['draftModel'] | undefined) ?? null,
    specDraftMax: opts.speculative?.draftMax ?? 0,
    specNgramMin: opts.speculative?.ngramMin ?? 1,
    specNgramMax: opts.speculative?.ngramMax ?? 1,
    specMaxSequences: opts.speculative?.maxSequences ?? 0,
    specTickBudget: opts.speculative?.tickBudget ?? 0,
    specDraftCost: opts.speculative?.draftCost ?? 0,
    cacheDir: opts.cacheDir ? resolvePath(opts.cacheDir) : '',
    cacheDiskBytes: Math.floor(opts.cacheDiskMb * 1024 * 1024),
    diskWriteThrough: opts.cacheWriteThrough,
    markerStart: markers?.start ?? EMPTY_I32,
    markerEnd: markers?.end ?? EMPTY_I32,
    markerPayloadStart: markers?.payloadStart ?? EMPTY_I32,
    markerPayloadEnd: markers?.payloadEnd ?? EMPTY_I32,
  };
}

/** The values llama.cpp actually applied when it created the context. */
export type ContextSettings = Omit<NativeReady, 'flashAttention' | 'kvTypeK' | 'kvTypeV'> & {
  flashAttention: 'auto' | 'on' | 'off';
  kvCacheTypeK: number;
  kvCacheTypeV: number;
};

/** The native ready report as ContextSettings. */
export function readySettings(r: NativeReady): ContextSettings {
  const { flashAttention, kvTypeK, kvTypeV, ...rest } = r;
  return {
    ...rest,
    flashAttention: flashAttention === FLASH_ATTENTION.on ? 'on' : flashAttention === FLASH_ATTENTION.off ? 'off' : 'auto',
    kvCacheTypeK: kvTypeK,
    kvCacheTypeV: kvTypeV,
  };
}
