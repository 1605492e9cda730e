// The provider-neutral core of the chat endpoints: conversation ids, prompt building with exact
// replay, generation, tool-call ids and the store.
import { createHash, randomBytes } from 'node:crypto';
import { hasChatMedia, prepareChatMedia } from '../chat/media.js';
import { markerTexts, type MarkerTexts, type ReplaySpan } from '../chat/prompt.js';
import type { ChatTemplate } from '../chat/template.js';
import { argumentsObject, canonicalJson, newToolCallId, parseToolCallSpan, xmlParamTypes } from '../chat/tool-calls.js';
import type { TurnReplay } from '../chat/turn-replay.js';
import type { ChatAssistantMessage, ChatMessage, ChatToolCall, ChatToolDefinition } from '../chat/types.js';
import { sessionPool, type Context } from '../engine/context.js';
import { FinishReason, type TokenLogprob } from '../engine/events.js';
import type { Generation } from '../engine/generation.js';
import type { Model } from '../model/model.js';
import type { GenerateOptions } from '../options.js';
import type { Session } from '../engine/session.js';
import { isLlamuxError } from '../errors.js';
import { HttpError } from './http.js';
import type { ServerMetrics } from './metrics.js';
import { fitPrompt, type OverflowPolicy } from './overflow.js';
import type { BuiltPrompt, PromptPool } from './prompt-pool.js';
import type { PromptMarks } from './prompt-marks.js';
import type { StoredToolCall, StoredTurn, ToolCallStore } from './store.js';
import { isSameTurn, turnKey, TurnRecorder } from './turns.js';
import { ServerAdapters } from './lora.js';

/** Where the server's own log lines go. */
export type ServerLog = (level: 'info' | 'warn' | 'error', message: string) => void;

export type ToolChoice = 'auto' | 'none' | 'required' | { name: string };

/** A chat request after the endpoint converted it. */
export interface ChatRequest {
  messages: ChatMessage[];
  tools: ChatToolDefinition[];
  toolChoice: ToolChoice;
  parallelToolCalls: boolean;
  /** Sampling and limits (temperature, topP, maxTokens, stop, ...). */
  generate: Omit<GenerateOptions, 'prompt' | 'signal' | 'emitTokenIds' | 'tokens' | 'detectToolCalls' | 'toolCalls' | 'sessionId' | 'waitForSession' | 'parentKey'>;
  /** The client's `x-llamux-conversation` header, when valid. */
  conversationHeader?: string;
  /** Stream prefill progress (llama-server's `return_progress`). */
  returnProgress?: boolean;
  /** A client's conversation hint (OpenAI `prompt_cache_key`): used when nothing else names the conversation. */
  conversationHint?: string;
  /** The tenant (isolation mode): conversations, sessions, replay and cache numbers stay inside it. */
  tenant?: string;
  /** Prefix of minted tool-call ids ('call_' or 'toolu_'). */
  idPrefix: string;
  /** Extra chat-template variables (`chat_template_kwargs`: `enable_thinking`, `reasoning_effort`, ...). */
  templateVariables?: Record<string, unknown>;
  /** Keep replayed turns as generated after a new user message (the server's --keep-reasoning when absent). */
  keepReasoning?: boolean;
  /** Token positions to locate in the prompt (prompt-cache breakpoints, cache-breakpoints.ts): `prompt.markTokens`. */
  marks?: PromptMarks;
}

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens whose KV was reused (cached). */
  cachedTokens: number;
  /** Speculative decoding: draft tokens verified, and those the output kept. */
  draftedTokens: number;
  acceptedTokens: number;
  /** Generated tokens inside the model's reasoning span. */
  reasoningTokens?: number;
  /** Prompt-cache breakpoints (`retainPrefixes`): the longest prefix this request wrote to a tier, and those no tier took. */
  retainedTokens?: number;
  retainRefused?: number;
}

export interface ServiceToolCall {
  /** Position among the calls of this response. */
  index: number;
  id: string;
  name: string;
  arguments: Record<string, unknown>;
  /** Arguments as compact JSON (what OpenAI clients receive). */
  argumentsJson: string;
}

export type ServiceEvent =
  /** The engine produced its first event: the request was admitted (and prefilled, unless it asked for progress). */
  | { type: 'started' }
  /** Prefill progress (`returnProgress`): prompt tokens in the KV of the total, reused, ms since the prefill began. */
  | { type: 'progress'; total: number; cached: number; processed: number; ms: number; retainedTokens: number; retainRefused: number }
  /** `logprobs`: the entries of the tokens sampled since the previous text event (logprobs requested). */
  | { type: 'text'; text: string; logprobs?: TokenLogprob[] }
  /** Reasoning text (between the model's reasoning markers), apart from the answer. */
  | { type: 'reasoning'; text: string }
  | { type: 'toolCall'; call: ServiceToolCall }
  /** `logprobs`: entries not yet reported with text (tokens of a stop string, spans). */
  | { type: 'final'; reason: FinishReason | 'tool_calls'; stop?: string; usage: Usage; logprobs?: TokenLogprob[] };

export interface Prepared {
  /** The conversation id the client sees (`x-llamux-conversation`). */
  conversationId: string;
  /** The conversation's key: its id, prefixed with the tenant in isolation mode (stored tool calls). */
  conversationKey: string;
  /** The conversation's Session, from the context's pool (its sequence stays pinned between requests). */
  session: Session;
  prompt: BuiltPrompt;
  /** Prompt tokens dropped by --overflow truncate-middle (0: none). */
  truncatedTokens: number;
}

/** Longest stored span (tokens) and text (bytes) that is ever spliced into a prompt. */
export const MAX_SPAN_TOKENS = 16_384;
export const MAX_SPAN_BYTES = 1024 * 1024;
/** Longest stored whole turn (tokens, bytes) that is ever spliced into a prompt. */
export const MAX_TURN_TOKENS = 65_536;
export const MAX_TURN_BYTES = 4 * 1024 * 1024;

const CONVERSATION_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** Validates an `x-llamux-conversation` header value. */
export function conversationHeader(value: string | string[] | undefined): string | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || v === '') return undefined;
  if (!CONVERSATION_RE.test(v)) {
    throw new HttpError(400, 'invalid_request', 'The x-llamux-conversation header must be 1 to 128 characters of A-Z, a-z, 0-9, ".", "_", ":" or "-"');
  }
  return v;
}

/** Validates an `x-llamux-keep-reasoning` header value ('true' or 'false'); undefined when absent. */
export function keepReasoningHeader(value: string | string[] | undefined): boolean | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || v === '') return undefined;
  if (v !== 'true' && v !== 'false') throw new HttpError(400, 'invalid_request', 'The x-llamux-keep-reasoning header must be "true" or "false"');
  return v === 'true';
}

export interface ChatServiceOptions {
  model: Model;
  context: Context;
  template: ChatTemplate;
  store: ToolCallStore;
  metrics: ServerMetrics;
  prompts: PromptPool;
  /** Largest total of message and tool-definition text (UTF-8 bytes) a request may have. */
  maxPromptBytes: number;
  /** Isolation mode: cache numbers count only KV the request's own session computed. */
  isolateTenants?: boolean;
  /** Prompts longer than a sequence: a 400 (default) or cut in the middle (src/server/overflow.ts). */
  overflow?: OverflowPolicy;
  /** --context-shift: a generation that fills its sequence shifts (overflow 'shift', the request's n_keep) instead of ending with length. */
  contextShift?: boolean;
  log?: ServerLog;
  /** --lora adapters (none by default). */
  adapters?: ServerAdapters;
  /** --keep-reasoning: replayed turns stay as generated after a new user message (a request may say otherwise). */
  keepReasoning?: boolean;
}

function utf8Length(s: string): number {
  return Buffer.byteLength(s);
}

function commonPrefix(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

export class ChatService {
  readonly model: Model;
  readonly context: Context;
  readonly template: ChatTemplate;
  readonly store: ToolCallStore;
  readonly metrics: ServerMetrics;
  readonly markers: MarkerTexts | undefined;
  readonly fingerprint: string;
  /** The longest text (UTF-8 bytes) one token of the vocabulary stands for. */
  readonly maxTokenBytes: number;
  readonly #prompts: PromptPool;
  readonly #maxPromptBytes: number;
  readonly #isolate: boolean;
  readonly overflow: OverflowPolicy;
  /** The generate options of --context-shift (none without it). */
  readonly shiftOptions: { overflow?: 'shift' };
  readonly adapters: ServerAdapters;
  readonly keepReasoning: boolean;
  readonly #log: ServerLog;
  /** Ids of stored spans already reported as invalid (each is logged once). */
  readonly #reportedInvalid = new Set<string>();
  /** Isolation mode: the tokens each session's KV holds, as far as this server produced them. */
  readonly #sessionTokens = new WeakMap<Session, Int32Array>();

  constructor(o: ChatServiceOptions) {
    this.model = o.model;
    this.context = o.context;
    this.template = o.template;
    this.store = o.store;
    this.metrics = o.metrics;
    this.markers = markerTexts(o.context);
    this.fingerprint = o.model.metadata.fingerprint;
    this.#prompts = o.prompts;
    this.#maxPromptBytes = o.maxPromptBytes;
    this.#isolate = o.isolateTenants ?? false;
    this.overflow = o.overflow ?? 'error';
    this.shiftOptions = o.contextShift ? { overflow: 'shift' } : {};
    this.adapters = o.adapters ?? ServerAdapters.none();
    this.keepReasoning = o.keepReasoning ?? false;
    this.#log = o.log ?? (() => {});
    let longest = 1;
    for (let id = 0; id < o.model.vocab.size; id++) longest = Math.max(longest, o.model.tokenPiece(id, { special: true }).length);
    this.maxTokenBytes = longest;
  }

  #scope(tenant: string | undefined): string {
    return tenant !== undefined ? `${tenant}/` : '';
  }

  /** Whether a stored call belongs to the tenant (no tenant: calls stored outside isolation mode). */
  #sameTenant(s: { conversation: string }, tenant: string | undefined): boolean {
    return tenant !== undefined ? s.conversation.startsWith(this.#scope(tenant)) : !s.conversation.includes('/');
  }

  /**
   * The conversation a request belongs to: the client's header, else the one its newest known
   * tool call was generated in (of the same tenant), else a new random id. The header wins: a
   * request quoting another conversation's tool-call id is still routed by its own header.
   * Never derived from a hash of the content.
   */
  resolveConversation(messages: readonly ChatMessage[], header: string | undefined, tenant?: string, hint?: string): string {
    if (header !== undefined) return header;
    const scope = this.#scope(tenant);
    for (let i = messages.length - 1; i >= 0; i--) {
      const m = messages[i]!;
      // Plain answers do not route: the same short answer ("Done.") in many conversations
      // would pull them all onto one session.
      if (m.role !== 'assistant' || !m.toolCalls) continue;
      for (let j = m.toolCalls.length - 1; j >= 0; j--) {
        const s = this.store.get(m.toolCalls[j]!.id);
        if (s && s.model === this.fingerprint && this.#sameTenant(s, tenant)) return s.conversation.slice(scope.length);
      }
    }
    // a hint of any text becomes a valid, bounded conversation id
    if (hint !== undefined) return `pck_${createHash('sha256').update(hint).digest('hex').slice(0, 32)}`;
    return `conv_${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
  }

  /** The stored turn of this model and tenant under the message's key, if any. */
  #storedTurn(m: ChatAssistantMessage, tenant: string | undefined): StoredTurn | undefined {
    const key = turnKey(m, this.#scope(tenant), this.fingerprint);
    const s = key === undefined ? undefined : this.store.getTurn(key);
    if (!s || s.model !== this.fingerprint || !this.#sameTenant(s, tenant)) return undefined;
    return s;
  }

  /** The exact tokens of a whole turn this server generated, when the message is that turn unchanged and its tokens pass validation. */
  #turnReplay(m: ChatAssistantMessage, tenant: string | undefined): TurnReplay | undefined {
    const s = this.#storedTurn(m, tenant);
    if (!s) return undefined;
    if (!isSameTurn(s, m)) {
      this.metrics.turnReplay.inc({ outcome: 'changed' });
      return undefined;
    }
    const invalid = this.#invalidTokens('the turn', s.text, s.tokens, s.text, MAX_TURN_TOKENS, MAX_TURN_BYTES);
    if (invalid !== undefined) {
      const id = `turn:${s.key}`;
      if (!this.#reportedInvalid.has(id)) {
        if (this.#reportedInvalid.size >= 10_000) this.#reportedInvalid.clear();
        this.#reportedInvalid.add(id);
        this.metrics.turnReplay.inc({ outcome: 'invalid' });
        this.#log('warn', `A stored assistant turn is not replayed (${invalid}); it is rendered through the template instead`);
      }
      return undefined;
    }
    return { text: s.text, tokens: s.tokens };
  }

  #invalidTokens(what: string, text: string, tokens: Int32Array, expected: string, maxTokens = MAX_SPAN_TOKENS, maxBytes = MAX_SPAN_BYTES): string | undefined {
    const n = this.model.vocab.size;
    if (tokens.length === 0 || tokens.length > maxTokens) return `${what} has ${tokens.length} tokens (1 to ${maxTokens} allowed)`;
    if (utf8Length(text) > maxBytes) return `${what} text is over ${maxBytes} bytes`;
    for (let i = 0; i < tokens.length; i++) {
      const t = tokens[i]!;
      if (!(t >= 0 && t < n)) return `${what} token ${i} is ${t}, outside the vocabulary (${n} tokens)`;
    }
    if (this.model.detokenize(tokens, { special: true }) !== expected) return `${what} tokens do not detokenize to the stored text`;
    return undefined;
  }

  /** Why a stored span must not be spliced into a prompt, or undefined when it may. */
  #invalidSpan(s: StoredToolCall): string | undefined {
    const check = (what: string, text: string, tokens: Int32Array, expected: string): string | undefined => this.#invalidTokens(what, text, tokens, expected);
    const m = this.markers;
    if (!m) return 'the server has no tool-call markers';
    const span = check('the span', s.spanText, s.spanTokens, `${m.start}${s.spanText}${m.end}`);
    if (span) return span;
    if (s.preludeText !== undefined && s.preludeTokens) return check('the prelude', s.preludeText, s.preludeTokens, s.preludeText);
    return undefined;
  }

  /** The stored span of a historical call, when its id is known, its name and arguments are unchanged and it passes validation. */
  #replay(call: ChatToolCall, tenant: string | undefined): ReplaySpan | undefined {
    const s = this.store.get(call.id);
    if (!s || s.model !== this.fingerprint || s.callsInSpan !== 1 || s.arguments === '') return undefined;
    if (!this.#sameTenant(s, tenant)) return undefined;
    if (s.name !== call.name) return undefined;
    const args = argumentsObject(call.arguments);
    if (!args || canonicalJson(args) !== s.arguments) return undefined;
    const invalid = this.#invalidSpan(s);
    if (invalid !== undefined) {
      if (!this.#reportedInvalid.has(s.id)) {
        if (this.#reportedInvalid.size >= 10_000) this.#reportedInvalid.clear();
        this.#reportedInvalid.add(s.id);
        this.metrics.replay.inc({ outcome: 'invalid' });
        this.#log('warn', `The stored tool call ${JSON.stringify(s.id.slice(0, 64))} is not replayed (${invalid}); it is rendered through the template instead`);
      }
      return undefined;
    }
    const out: ReplaySpan = { text: s.spanText, tokens: s.spanTokens };
    if (s.preludeText !== undefined && s.preludeTokens) out.prelude = { text: s.preludeText, tokens: s.preludeTokens };
    return out;
  }

  /**
   * Renders and tokenizes the request (in a prompt worker, off the event loop).
   * @throws HttpError 400 (template refused it, or it does not fit the context), 413 (too much
   *   text, or tokenizing ran past the time cap)
   */
  async prepare(req: ChatRequest, signal?: AbortSignal): Promise<Prepared> {
    const limit = this.context.settings.sequenceContextSize;
    // Byte bounds first, checked before any rendering or tokenizing: no token stands for more
    // than maxTokenBytes bytes, so text longer than the sequence times that cannot fit.
    let textBytes = 0;
    for (const m of req.messages) {
      textBytes += typeof m.content === 'string' ? utf8Length(m.content) : 0;
      if (m.role === 'assistant') {
        if (m.reasoningContent !== undefined) textBytes += utf8Length(m.reasoningContent);
        for (const c of m.toolCalls ?? []) textBytes += utf8Length(c.name) + utf8Length(typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments));
      }
    }
    try {
      for (const t of req.tools) textBytes += utf8Length(JSON.stringify(t));
    } catch {
      throw new HttpError(400, 'invalid_request', 'A tool definition is nested too deeply', 'tools');
    }
    const atLeast = Math.max(req.messages.length, Math.ceil(textBytes / this.maxTokenBytes));
    if (atLeast >= limit && this.overflow === 'error') {
      throw new HttpError(400, 'context_length', `The conversation needs at least ${atLeast} tokens (${textBytes} bytes of text, at most ${this.maxTokenBytes} bytes per token) but a sequence of this server's context holds ${limit}; shorten the conversation, start the server with a larger --ctx, or with --overflow truncate-middle`);
    }
    if (textBytes > this.#maxPromptBytes) {
      throw new HttpError(413, 'too_large', `The messages and tools hold ${textBytes} bytes of text, over this server's limit of ${this.#maxPromptBytes} (--max-prompt-bytes)`);
    }
    const conversationId = this.resolveConversation(req.messages, req.conversationHeader, req.tenant, req.conversationHint);
    const turns: Record<number, TurnReplay> = {};
    req.messages.forEach((m, i) => {
      if (m.role !== 'assistant') return;
      const t = this.#turnReplay(m, req.tenant);
      if (t) turns[i] = t;
    });
    const replay: Record<string, ReplaySpan> = {};
    if (this.markers) {
      for (const m of req.messages) {
        if (m.role !== 'assistant') continue;
        for (const c of m.toolCalls ?? []) {
          const span = this.#replay(c, req.tenant);
          if (span) replay[c.id] = span;
        }
      }
    }
    // media (images, audio): tokenized here with the model's projector, spliced in by the worker
    let messages = req.messages;
    let media: Map<string, Int32Array> | undefined;
    if (hasChatMedia(messages)) {
      try {
        ({ messages, media } = await prepareChatMedia(this.model, messages));
      } catch (e) {
        if (isLlamuxError(e) && (e.code === 'INVALID_ARGUMENT' || e.code === 'UNSUPPORTED')) throw new HttpError(400, 'invalid_request', e.message);
        throw e;
      }
    }
    const prompt = await this.#prompts.build(messages, req.tools, replay, signal, req.templateVariables, media, { turns, keepReasoning: req.keepReasoning ?? this.keepReasoning }, req.marks);
    if (prompt.replayed.length) this.metrics.replay.inc({ outcome: 'replayed' }, prompt.replayed.length);
    if (prompt.unknown.length) this.metrics.replay.inc({ outcome: 'unknown' }, prompt.unknown.length);
    if (prompt.unlocated.length) this.metrics.replay.inc({ outcome: 'unlocated' }, prompt.unlocated.length);
    if (prompt.rerendered.length) this.metrics.replay.inc({ outcome: 'rerendered' }, prompt.rerendered.length);
    for (const outcome of ['replayed', 'unlocated', 'dropped'] as const) {
      const n = prompt.turns[outcome].length;
      if (n) this.metrics.turnReplay.inc({ outcome }, n);
    }
    const fitted = fitPrompt(prompt.tokens, limit, req.generate.maxTokens, this.overflow);
    const conversationKey = `${this.#scope(req.tenant)}${conversationId}`;
    const session = sessionPool(this.context).get(conversationKey);
    return { conversationId, conversationKey, session, prompt: { ...prompt, tokens: fitted.tokens }, truncatedTokens: fitted.truncatedTokens };
  }

  /** Isolation mode: the reused count, limited to what the request's own session computed. */
  #ownReuse(p: Prepared, reused: number): number {
    if (!this.#isolate) return reused;
    const held = this.#sessionTokens.get(p.session);
    return Math.min(reused, held ? commonPrefix(held, p.prompt.tokens) : 0);
  }

  #remember(p: Prepared, generated: number[]): void {
    if (!this.#isolate) return;
    const all = new Int32Array(p.prompt.tokens.length + generated.length);
    all.set(p.prompt.tokens, 0);
    all.set(generated, p.prompt.tokens.length);
    this.#sessionTokens.set(p.session, all);
  }

  /** The generate options of a chat request (the declared tools constrain every span). */
  #generateOptions(p: Prepared, req: ChatRequest, signal: AbortSignal) {
    // No declared tools, no tool calls: a span the model writes anyway comes back as text.
    const declared = new Set(req.tools.map((t) => t.name));
    const detect = req.toolChoice !== 'none' && this.markers !== undefined && declared.size > 0;
    return {
      ...req.generate,
      ...this.shiftOptions,
      prompt: p.prompt.tokens,
      emitTokenIds: true,
      detectToolCalls: detect,
      // The declared tools constrain every span (name, argument schema); tool_choice
      // required / named forces a call first; parallel_tool_calls: false ends the
      // generation when the first span closes.
      ...(detect
        ? {
            tools: req.tools.map((t) => ({ name: t.name, ...(t.parameters !== undefined ? { parameters: t.parameters } : {}) })),
            toolChoice: req.toolChoice,
            parallelToolCalls: req.parallelToolCalls,
          }
        : {}),
      signal,
      waitForSession: true,
      ...(req.returnProgress ? { progress: true } : {}),
      // Isolation mode: the engine reuses KV only within the tenant (no cross-tenant prefix
      // hits, so neither cached_tokens nor timing reveal another tenant's prompts).
      ...(this.#isolate && req.tenant !== undefined ? { cacheScope: `tenant:${req.tenant}` } : {}),
    };
  }

  /** Generates, yielding text, complete tool calls (stored under fresh ids) and a final event. */
  async *run(p: Prepared, req: ChatRequest, signal: AbortSignal): AsyncGenerator<ServiceEvent, void, undefined> {
    this.metrics.inFlight++;
    try {
      // The conversation's sequence stays pinned to its Session: a prompt extending the last
      // one prefills only the new tokens. Requests of one conversation run one at a time.
      const gen = p.session.generate(this.#generateOptions(p, req, signal));
      yield* this.#consume(gen, p, req, true);
    } finally {
      this.metrics.inFlight--;
    }
  }

  /**
   * `n` > 1 choices of one prompt, prefilled once (ctx.generateChoices: forks share the prompt's
   * KV; choice i samples with seed + i). They run beside the conversation's session, which they
   * do not advance. Rejects (before any event) when the prompt cannot be prefilled.
   */
  async runChoices(p: Prepared, req: ChatRequest, signal: AbortSignal, n: number): Promise<AsyncGenerator<ServiceEvent, void, undefined>[]> {
    const { waitForSession: _w, ...options } = this.#generateOptions(p, req, signal);
    this.metrics.inFlight++;
    let gens;
    try {
      gens = await this.context.generateChoices({ ...options, n });
    } finally {
      this.metrics.inFlight--;
    }
    const self = this;
    return gens.map((gen) =>
      (async function* () {
        self.metrics.inFlight++;
        try {
          yield* self.#consume(gen, p, req, false);
        } finally {
          self.metrics.inFlight--;
        }
      })(),
    );
  }

  async *#consume(gen: Generation, p: Prepared, req: ChatRequest, remember: boolean): AsyncGenerator<ServiceEvent, void, undefined> {
    const declared = new Set(req.tools.map((t) => t.name));
    const generated: number[] = [];
    let seenLogprobs = 0;
    let prelude = { text: [] as string[], tokens: [] as number[] };
    // Reasoning before a call is part of its prelude: its exact tokens are replayed when the
    // template renders the history the same way (the text is then the special-token rendering).
    let preludeReasoning = false;
    const preludes = new Map<number, { text: string; tokens: number[] }>();
    const turn = new TurnRecorder();
    let emitted = 0;
    let reasoningTokens = 0;
    let started = false;
    // The answer after a closed reasoning span starts at its first non-blank character (the
    // `\n\n` after `</think>` is layout, as llama-server parses it); the stored prelude keeps
    // the exact text for replay.
    let afterReasoning = false;
    for await (const ev of gen) {
      if (!started) {
        started = true;
        yield { type: 'started' };
      }
      switch (ev.type) {
        case 'text':
          prelude.text.push(ev.text);
          if (ev.tokens) for (const t of ev.tokens) prelude.tokens.push(t);
          if (ev.tokens && this.#isolate) for (const t of ev.tokens) generated.push(t);
          turn.tokens(ev.tokens);
          {
            const text = afterReasoning ? ev.text.trimStart() : ev.text;
            turn.content(text);
            if (text.length > 0) afterReasoning = false;
            if (ev.logprobs) {
              seenLogprobs += ev.logprobs.length;
              yield { type: 'text', text, logprobs: ev.logprobs };
            } else if (text.length > 0) yield { type: 'text', text };
          }
          break;
        case 'progress':
          yield { type: 'progress', total: ev.total, cached: this.#ownReuse(p, ev.cached), processed: ev.processed, ms: ev.ms, retainedTokens: ev.retainedTokens, retainRefused: ev.retainRefused };
          break;
        case 'reasoning':
          reasoningTokens += ev.tokens.length;
          turn.tokens(ev.tokens);
          turn.reasoning(ev.text);
          for (const t of ev.tokens) prelude.tokens.push(t);
          preludeReasoning = true;
          afterReasoning = true;
          if (this.#isolate) for (const t of ev.tokens) generated.push(t);
          if (ev.text.length > 0) yield { type: 'reasoning', text: ev.text };
          break;
        case 'toolCallStart':
          preludes.set(ev.index, {
            text: preludeReasoning ? this.model.detokenize(Int32Array.from(prelude.tokens), { special: true }) : prelude.text.join(''),
            tokens: prelude.tokens,
          });
          prelude = { text: [], tokens: [] };
          preludeReasoning = false;
          break;
        case 'toolCallTruncated':
          // A call cut short (max_tokens, a stop, the context end) is never a call: its bytes go
          // back as text, with the start marker the model wrote (it never wrote the end one).
          if (this.#isolate) for (const t of ev.tokens) generated.push(t);
          turn.broken();
          yield { type: 'text', text: `${this.markers?.start ?? ''}${ev.text}` };
          break;
        case 'toolCallEnd': {
          if (this.#isolate) for (const t of ev.tokens) generated.push(t);
          turn.tokens(ev.tokens);
          const parsed = parseToolCallSpan(ev.text, xmlParamTypes(req.tools));
          if (parsed.some((c) => c.invalidArguments !== undefined || c.name === '' || !declared.has(c.name))) {
            // Not a call a client could run (malformed, or a tool the request did not
            // declare): hand the model's raw bytes back as text.
            const raw = `${this.markers?.start ?? ''}${ev.text}${this.markers?.end ?? ''}`;
            turn.content(raw);
            yield { type: 'text', text: raw };
            break;
          }
          if (!req.parallelToolCalls && emitted > 0) {
            turn.broken();
            break;
          }
          if (!req.parallelToolCalls && parsed.length > 1) turn.broken();
          const pre = preludes.get(ev.index);
          for (const c of req.parallelToolCalls ? parsed : parsed.slice(0, 1)) {
            const id = newToolCallId(req.idPrefix);
            const args = canonicalJson(c.arguments);
            this.store.put({
              id,
              model: this.fingerprint,
              conversation: p.conversationKey,
              name: c.name,
              arguments: args,
              spanText: ev.text,
              spanTokens: ev.tokens,
              ...(pre && pre.text.length > 0 ? { preludeText: pre.text, preludeTokens: Int32Array.from(pre.tokens) } : {}),
              callsInSpan: parsed.length,
              createdAt: Date.now(),
            });
            this.metrics.toolCalls.inc();
            turn.call(id, c.name, args);
            yield { type: 'toolCall', call: { index: emitted++, id, name: c.name, arguments: c.arguments, argumentsJson: JSON.stringify(c.arguments) } };
          }
          break;
        }
        case 'final': {
          this.metrics.recordGeneration({
            promptTokens: ev.promptTokens,
            reusedTokens: ev.reusedTokens,
            prefilledTokens: ev.prefilledTokens,
            generatedTokens: ev.generatedTokens,
            ttftMs: ev.timings.ttftMs,
            cacheOutcome: ev.cache.outcome,
            ...(ev.cache.tier ? { cacheTier: ev.cache.tier } : {}),
          });
          const stored = turn.turn(this.model, ev.finishReason, ev.stop, { model: this.fingerprint, conversation: p.conversationKey, createdAt: Date.now() }, this.#scope(req.tenant));
          if (stored) this.store.putTurn(stored);
          const cachedTokens = this.#ownReuse(p, ev.reusedTokens);
          if (remember) this.#remember(p, generated);
          const usage: Usage = {
            promptTokens: ev.promptTokens,
            completionTokens: ev.generatedTokens,
            cachedTokens,
            draftedTokens: ev.timings.draftedTokens,
            acceptedTokens: ev.timings.acceptedTokens,
            reasoningTokens,
            retainedTokens: ev.cache.retainedTokens,
            retainRefused: ev.cache.retainRefused,
          };
          const reason = emitted > 0 && ev.finishReason !== FinishReason.Length ? 'tool_calls' : ev.finishReason;
          const final: ServiceEvent = ev.stop !== undefined ? { type: 'final', reason, stop: ev.stop, usage } : { type: 'final', reason, usage };
          if (ev.logprobs && ev.logprobs.length > seenLogprobs) final.logprobs = ev.logprobs.slice(seenLogprobs);
          yield final;
          break;
        }
        default:
          break;
      }
    }
  }
}
