import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { native, type NativeCacheStats, type NativeContext, type NativeEvent, type NativeReady, type NativeRequest, type NativeSessionCommand } from './binding.js';
import { AsyncQueue } from './async-queue.js';
import { LlamuxError, abortError, fromNative, toErrorCode } from './errors.js';
import type { CacheReport, FinalEvent, FinishReason, GenerateEvent, GenerateResult, ToolCallSpan } from './events.js';
import { compileToolGrammar } from './grammar/index.js';
import { isZodSchema, toolParametersJsonSchema } from './tools/tool.js';
import { resolveMarkers, type ResolvedMarkers } from './markers.js';
import type { Model } from './model.js';
import { toInt32Array } from './tokens.js';
import {
  GGML_TYPE_IDS,
  GenerateOptionsSchema,
  PrefillOptionsSchema,
  SessionOptionsSchema,
  parseOptions,
  type GenerateOptions,
  type ParsedGenerateOptions,
  type PrefillOptions,
  type SessionOptions,
} from './options.js';
import { Session, type SessionContinueOptions, type SessionHost } from './session.js';
import type { z } from 'zod';
import type { ContextOptionsSchema } from './options.js';

/** The values llama.cpp actually applied when it created the context. */
export type ContextSettings = Omit<NativeReady, 'flashAttention' | 'kvTypeK' | 'kvTypeV'> & {
  flashAttention: 'auto' | 'on' | 'off';
  kvCacheTypeK: number;
  kvCacheTypeV: number;
};

let nextRequestId = 1;

// Contexts with work in flight (a request, or creation). The native engine holds no strong
// reference to its Context (its event callback goes through a WeakRef), so an idle context
// nobody references is collected and its engine thread stops; a busy one stays here.
const busyContexts = new Set<Context>();

/**
 * One running request. Iterate it for events (once), or await `result`.
 * Breaking out of the iteration cancels the request.
 */
export class Generation implements AsyncIterable<GenerateEvent> {
  readonly id: number;
  /** Resolves with the whole result; rejects with LlamuxError (ABORTED, DISPOSED, ...). */
  readonly result: Promise<GenerateResult>;
  #queue: AsyncQueue<GenerateEvent>;
  #resolve!: (r: GenerateResult) => void;
  #reject!: (e: unknown) => void;
  #text: string[] = [];
  #tokens: number[] | undefined;
  #toolCalls: ToolCallSpan[] = [];
  #truncated: ToolCallSpan | undefined;
  #done = false;
  #paused = false;
  #cancel: () => void;
  #setPaused: (paused: boolean) => void;
  #highWater: number;

  /** @internal */
  constructor(id: number, wantTokens: boolean, highWater: number, cancel: () => void, setPaused: (p: boolean) => void) {
    this.id = id;
    this.#cancel = cancel;
    this.#setPaused = setPaused;
    this.#highWater = highWater;
    if (wantTokens) this.#tokens = [];
    this.result = new Promise<GenerateResult>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.result.catch(() => {}); // the iterator reports errors too; no unhandled rejection
    this.#queue = new AsyncQueue<GenerateEvent>((size) => {
      if (this.#paused && size <= this.#highWater / 2) {
        this.#paused = false;
        this.#setPaused(false);
      }
    });
  }

  get done(): boolean {
    return this.#done;
  }

  /** Events received and not yet read by the iterator. */
  get bufferedEvents(): number {
    return this.#queue.size;
  }

  /** Stops the request (the result rejects with ABORTED). */
  cancel(): void {
    if (!this.#done) this.#cancel();
  }

  /** @internal */
  onText(text: string, tokens: Int32Array | undefined): void {
    if (this.#done) return;
    this.#text.push(text);
    if (this.#tokens && tokens) for (const t of tokens) this.#tokens.push(t);
    this.#queue.push(tokens ? { type: 'text', text, tokens } : { type: 'text', text });
    // Backpressure only applies to a consumer that iterates; `result` alone never pauses.
    if (!this.#paused && this.#queue.iterating && this.#queue.size > this.#highWater) {
      this.#paused = true;
      this.#setPaused(true);
    }
  }

  /** @internal */
  onEvent(ev: GenerateEvent): void {
    if (this.#done) return;
    if (ev.type === 'toolCallEnd' || ev.type === 'toolCallTruncated') {
      const span = { index: ev.index, text: ev.text, tokens: ev.tokens };
      if (ev.type === 'toolCallEnd') this.#toolCalls.push(span);
      else this.#truncated = span;
      // No text arrives while a span is open, so appending keeps the sampled order.
      if (this.#tokens) for (const t of ev.tokens) this.#tokens.push(t);
    }
    this.#queue.push(ev);
    if (!this.#paused && this.#queue.iterating && this.#queue.size > this.#highWater) {
      this.#paused = true;
      this.#setPaused(true);
    }
  }

  /** @internal */
  onFinal(result: Omit<GenerateResult, 'text' | 'tokens' | 'toolCalls' | 'truncatedToolCall'>): void {
    if (this.#done) return;
    this.#done = true;
    const full: GenerateResult = { ...result, text: this.#text.join(''), toolCalls: this.#toolCalls };
    if (this.#truncated) full.truncatedToolCall = this.#truncated;
    if (this.#tokens) full.tokens = Int32Array.from(this.#tokens);
    const ev: FinalEvent = { type: 'final', ...full };
    this.#queue.push(ev);
    this.#queue.end();
    this.#resolve(full);
  }

  /** @internal */
  onError(err: LlamuxError): void {
    if (this.#done) return;
    this.#done = true;
    this.#queue.end(err);
    this.#reject(err);
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerateEvent> {
    const it = this.#queue[Symbol.asyncIterator]();
    return {
      next: () => it.next(),
      return: async () => {
        this.cancel();
        return { value: undefined, done: true };
      },
    };
  }
}

type ParsedContextOptions = z.output<typeof ContextOptionsSchema>;

/**
 * A llama.cpp context: a KV cache for up to `sequences` concurrent requests, and one
 * native thread that batches all of them into each decode. Create with
 * `model.createContext()`.
 */
export class Context {
  readonly model: Model;
  /** Tool-call markers in use (token ids), or undefined for the plain text path. */
  readonly markers: ResolvedMarkers | undefined;
  #native: NativeContext;
  #settings: ContextSettings | undefined;
  #requests = new Map<number, { gen: Generation; signal?: AbortSignal; onAbort?: () => void }>();
  #disposed = false;
  /** Set when an RPC server of the model died (rpcFailed). */
  #failed: LlamuxError | undefined;
  #closing: Promise<void> | undefined;
  #onDispose: Array<() => void> = [];
  #ready: { resolve: () => void; reject: (e: unknown) => void } | undefined;
  #maxPending: number;
  #sessions = new Map<string, Session>();
  #sessionHost: SessionHost = {
    generate: (o) => this.generate(o),
    continue: (id, tail, o) => this.continue(id, tail, o),
    forkSession: (from, to, o) => this.#fork(from, to, o.wait ?? false),
    endSession: (id) => this.#endSession(id),
    createSession: (o) => this.createSession(o),
  };

  private constructor(model: Model, opts: ParsedContextOptions) {
    this.model = model;
    this.#maxPending = opts.sequences + opts.maxQueued;
    this.markers = resolveMarkers(model, opts.toolCallMarkers ?? model.defaultMarkers);
    const fa = opts.flashAttention === 'on' ? 1 : opts.flashAttention === 'off' ? 0 : -1;
    this.#native = new native.Context(model.nativeHandle(), {
      contextSize: opts.contextSize,
      batchSize: Math.max(opts.batchSize, opts.sequences),
      microBatchSize: opts.microBatchSize,
      sequences: opts.sequences,
      threads: opts.threads ?? 0,
      batchThreads: opts.batchThreads ?? 0,
      unifiedKv: opts.unifiedKv,
      flashAttention: fa,
      kvTypeK: opts.kvCacheTypeK ? GGML_TYPE_IDS[opts.kvCacheTypeK] : -1,
      kvTypeV: opts.kvCacheTypeV ? GGML_TYPE_IDS[opts.kvCacheTypeV] : -1,
      maxQueued: opts.maxQueued,
      prefillChunk: opts.prefillChunk ?? 0,
      cacheRamBytes: Math.floor(opts.cacheRamMb * 1024 * 1024),
      sessionTtlMs: opts.sessionTtlMs,
      idleKvSpillMs: opts.idleKvSpillMs,
      prefixCache: opts.prefixCache,
      ...(opts.cacheDir ? { cacheDir: resolvePath(opts.cacheDir), cacheDiskBytes: Math.floor(opts.cacheDiskMb * 1024 * 1024), diskWriteThrough: opts.cacheWriteThrough } : {}),
      ...(this.markers ? {
        markerStart: this.markers.start,
        markerEnd: this.markers.end,
        ...(this.markers.payloadStart ? { markerPayloadStart: this.markers.payloadStart, markerPayloadEnd: this.markers.payloadEnd } : {}),
      } : {}),
    }, Context.#eventSink(new WeakRef(this)));
    busyContexts.add(this); // until 'ready' (or the creation error) arrives
  }

  // A static scope: the callback captures only the WeakRef, never `this`.
  static #eventSink(ref: WeakRef<Context>): (events: NativeEvent[]) => void {
    return (events) => {
      const ctx = ref.deref();
      if (ctx) ctx.#onEvents(events);
    };
  }

  /** @internal */
  static async create(model: Model, opts: ParsedContextOptions): Promise<Context> {
    if (opts.cacheDir) {
      try {
        mkdirSync(resolvePath(opts.cacheDir), { recursive: true });
      } catch (e) {
        throw new LlamuxError('INVALID_ARGUMENT', `cacheDir "${opts.cacheDir}" cannot be created: ${(e as Error).message}`, { cause: e });
      }
    }
    let ctx: Context;
    try {
      ctx = new Context(model, opts);
    } catch (e) {
      throw fromNative(e);
    }
    await new Promise<void>((resolve, reject) => {
      ctx.#ready = { resolve, reject };
    });
    return ctx;
  }

  /** @internal */
  onDispose(fn: () => void): void {
    this.#onDispose.push(fn);
  }

  /** What llama.cpp applied (context size, batch sizes, threads, ...). */
  get settings(): ContextSettings {
    if (!this.#settings) throw new LlamuxError('INTERNAL', 'The context is not ready');
    return this.#settings;
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  /** Requests submitted and not finished. */
  get pendingRequests(): number {
    return this.#requests.size;
  }

  #onEvents(events: NativeEvent[]): void {
    for (const ev of events) {
      try {
        this.#dispatch(ev);
      } catch (e) {
        // A bug on the event path must not look like a hung generation: the request ends
        // with INTERNAL (its cause is what was thrown) and the failure is reported.
        this.#failDelivery(ev, e);
      }
    }
    this.#updateRef();
  }

  #failDelivery(ev: NativeEvent, cause: unknown): void {
    const what = cause instanceof Error ? cause.message : String(cause);
    const err = new LlamuxError('INTERNAL', `Internal error while delivering a "${ev.type}" event: ${what}`, { cause });
    process.emitWarning(err.message, { code: 'LLAMUX_INTERNAL', detail: cause instanceof Error ? cause.stack : undefined });
    if (ev.type === 'ready' || ev.type === 'createFailed') {
      this.#ready?.reject(err);
      this.#ready = undefined;
      return;
    }
    const cmd = ev.type === 'sessionDone' ? this.#commands.get(ev.id) : undefined;
    if (cmd) {
      this.#commands.delete(ev.id);
      cmd.reject(err);
      return;
    }
    const entry = this.#requests.get(ev.id);
    if (!entry) return;
    this.#requests.delete(ev.id);
    if (entry.onAbort) entry.signal?.removeEventListener('abort', entry.onAbort);
    this.#native.cancel(ev.id); // a final may still be coming: the engine stops the request
    entry.gen.onError(err);
  }

  #dispatch(ev: NativeEvent): void {
    switch (ev.type) {
      case 'ready':
        this.#settings = readySettings(ev.ready);
        this.#ready?.resolve();
        this.#ready = undefined;
        return;
      case 'createFailed': {
        const err = new LlamuxError(toErrorCode(ev.code), `Could not create the context: ${ev.message}`);
        this.#disposed = true;
        this.#native.close().catch(() => {});
        this.#ready?.reject(err);
        this.#ready = undefined;
        return;
      }
      case 'text': {
        this.#requests.get(ev.id)?.gen.onText(ev.text, ev.tokens);
        return;
      }
      case 'toolCallStart':
        this.#requests.get(ev.id)?.gen.onEvent({ type: 'toolCallStart', index: ev.index });
        return;
      case 'toolCallDelta':
        this.#requests.get(ev.id)?.gen.onEvent({ type: 'toolCallDelta', index: ev.index, text: ev.text });
        return;
      case 'toolCallEnd':
        this.#requests.get(ev.id)?.gen.onEvent({ type: ev.truncated ? 'toolCallTruncated' : 'toolCallEnd', index: ev.index, text: ev.text, tokens: ev.tokens });
        return;
      case 'final': {
        const entry = this.#requests.get(ev.id);
        if (!entry) return;
        this.#requests.delete(ev.id);
        if (entry.onAbort) entry.signal?.removeEventListener('abort', entry.onAbort);
        if (ev.finishReason === 'abort') {
          entry.gen.onError(abortError(entry.signal, 'The generation'));
          return;
        }
        if (ev.finishReason === 'error') {
          entry.gen.onError(new LlamuxError(toErrorCode(ev.code), ev.message ?? 'Generation failed'));
          return;
        }
        const s = ev.stats;
        // Checked: every native reason but abort/error is a FinishReason.
        const finishReason: FinishReason = ev.finishReason;
        entry.gen.onFinal({
          finishReason,
          ...(ev.stop !== undefined ? { stop: ev.stop } : {}),
          promptTokens: s.promptTokens,
          reusedTokens: s.reusedTokens,
          prefilledTokens: s.prefilledTokens,
          generatedTokens: s.generatedTokens,
          timings: {
            queuedMs: s.queuedMs,
            ttftMs: s.ttftMs,
            prefillMs: s.prefillMs,
            decodeMs: s.decodeMs,
            prefillTokensPerSec: s.prefillTokensPerSec,
            decodeTokensPerSec: s.decodeTokensPerSec,
            sampleMs: s.sampleMs,
          },
          cache: {
            outcome: s.cacheOutcome ?? 'cold',
            ...(s.cacheTier ? { tier: s.cacheTier } : {}),
            reusedTokens: s.reusedTokens,
            prefilledTokens: s.prefilledTokens,
            restoreMs: s.restoreMs ?? 0,
          },
        });
        return;
      }
      case 'sessionDone': {
        const cmd = this.#commands.get(ev.id);
        if (!cmd) return;
        this.#commands.delete(ev.id);
        if (ev.code === undefined) cmd.resolve();
        else cmd.reject(new LlamuxError(toErrorCode(ev.code), ev.message ?? 'The session command failed'));
        return;
      }
      case 'rpcFailed': {
        // An RPC server of the model died: everything on this context fails, typed, and
        // the context refuses further work (its engine thread may wait on that server forever).
        const err = new LlamuxError('RPC_UNAVAILABLE', ev.message);
        this.#failed = err;
        this.#disposed = true;
        this.#ready?.reject(new LlamuxError('RPC_UNAVAILABLE', `Could not create the context: ${ev.message}`));
        this.#ready = undefined;
        for (const [, cmd] of this.#commands) cmd.reject(err);
        this.#commands.clear();
        for (const [, entry] of this.#requests) {
          if (entry.onAbort) entry.signal?.removeEventListener('abort', entry.onAbort);
          entry.gen.onError(new LlamuxError('RPC_UNAVAILABLE', ev.message));
        }
        this.#requests.clear();
        void this.dispose();
        return;
      }
      case 'closed':
        return;
    }
  }

  /** The error for a call on a context that can no longer run anything. */
  #gone(): LlamuxError {
    if (this.#failed) return new LlamuxError('RPC_UNAVAILABLE', `The context cannot run: ${this.#failed.message}`);
    return new LlamuxError('DISPOSED', 'The context has been disposed');
  }

  #updateRef(): void {
    const busy = this.#requests.size > 0 || this.#commands.size > 0 || this.#ready !== undefined;
    if (busy) busyContexts.add(this);
    else busyContexts.delete(this);
    if (this.#disposed && this.#requests.size === 0) return;
    this.#native.setRef(busy);
  }

  /**
   * Starts a request. Iterate the returned {@link Generation} for text deltas and a final
   * event, or await `generation.result`.
   * @throws LlamuxError INVALID_ARGUMENT (options), DISPOSED, QUEUE_FULL
   * @example
   * for await (const ev of ctx.generate({ prompt: 'Hello', maxTokens: 32 })) {
   *   if (ev.type === 'text') process.stdout.write(ev.text);
   * }
   */
  generate(options: GenerateOptions): Generation {
    if (this.#disposed) throw this.#gone();
    const o = parseOptions(GenerateOptionsSchema, options, 'generate options');
    const toolFields = this.#toolFields(o);
    if (this.#requests.size >= this.#maxPending) {
      throw new LlamuxError('QUEUE_FULL', `The request queue is full (${this.#requests.size} requests running or waiting); wait for some to finish or raise maxQueued`);
    }
    const id = nextRequestId++;
    const gen = new Generation(id, o.tokens, o.highWaterMark, () => this.#native.cancel(id), (p) => this.#native.pause(id, p));
    if (o.signal?.aborted) {
      gen.onError(abortError(o.signal, 'The generation'));
      return gen;
    }
    const req = { ...toNativeRequest(id, o), ...toolFields };
    if (o.sessionId) {
      req.sessionId = o.sessionId;
      req.waitForSession = o.waitForSession;
      this.#withSessionTtl(req);
    }
    if (o.parentKey) req.prompt = this.#withParent(o.parentKey, req.prompt!);
    return this.#submit(gen, req, o.signal);
  }

  #submit(gen: Generation, req: NativeRequest, signal: AbortSignal | undefined): Generation {
    const id = req.id;
    try {
      this.#native.submit(req);
    } catch (e) {
      throw fromNative(e);
    }
    const o = { signal };
    const entry: { gen: Generation; signal?: AbortSignal; onAbort?: () => void } = { gen };
    if (o.signal) {
      entry.signal = o.signal;
      entry.onAbort = () => this.#native.cancel(id);
      o.signal.addEventListener('abort', entry.onAbort, { once: true });
    }
    this.#requests.set(id, entry);
    this.#updateRef();
    const session = req.sessionId === undefined ? undefined : this.#sessions.get(req.sessionId);
    if (session) {
      Session.track(session, 'start');
      gen.result.then((r) => Session.track(session, 'end', r), () => Session.track(session, 'end'));
    }
    return gen;
  }

  /**
   * The native fields of `tools` / `toolChoice` / `parallelToolCalls` / `toolCallGrammar`:
   * the span grammar (compiled and cached in src/grammar) and when it is active.
   * @throws LlamuxError INVALID_ARGUMENT before anything is queued
   */
  #toolFields(o: ParsedGenerateOptions): Partial<NativeRequest> {
    const fields: Partial<NativeRequest> = { parallelToolCalls: o.parallelToolCalls };
    if (o.toolChoice === 'none') {
      fields.toolCalls = false;
      return fields;
    }
    const tools = o.tools ?? [];
    const constrained = tools.length > 0 || o.toolCallGrammar !== undefined;
    if (!constrained) {
      if (o.toolChoice !== 'auto') throw new LlamuxError('INVALID_ARGUMENT', `toolChoice ${JSON.stringify(o.toolChoice)} needs tools (or toolCallGrammar)`);
      return fields;
    }
    const m = this.markers;
    if (!m) throw new LlamuxError('INVALID_ARGUMENT', 'tools need tool-call markers, and this context has none (set toolCallMarkers when creating it)');
    if (!o.toolCalls) throw new LlamuxError('INVALID_ARGUMENT', 'tools need tool-call detection: remove toolCalls: false (or use toolChoice "none")');
    if (o.grammar !== undefined) throw new LlamuxError('INVALID_ARGUMENT', 'grammar and tools cannot be combined: the tool grammar constrains tool-call spans, grammar the whole output');
    const endIsEog = m.end.length === 1 && this.model.isEndOfGeneration(m.end[0]!);
    const g = compileToolGrammar({
      tools: tools.map((t) => ({ name: t.name, parameters: t.parameters === undefined ? undefined : isZodSchema(t.parameters) ? toolParametersJsonSchema({ parameters: t.parameters }) : t.parameters })),
      choice: o.toolChoice,
      family: m.preset ?? 'json',
      start: Array.from(m.start),
      end: Array.from(m.end),
      endIsEog,
      parallel: o.parallelToolCalls,
      ...(o.toolCallGrammar !== undefined ? { body: o.toolCallGrammar } : {}),
    });
    fields.toolGrammar = g.gbnf;
    fields.toolGrammarRoot = g.root;
    fields.toolRequired = o.toolChoice !== 'auto';
    fields.toolEndEog = endIsEog ? m.end[0]! : -1;
    return fields;
  }

  /** `generate(options).result`. */
  complete(options: GenerateOptions): Promise<GenerateResult> {
    return this.generate(options).result;
  }

  #prefixKeys = new Map<string, Int32Array>();

  #promptTokens(prompt: string | Int32Array | number[], addSpecial: boolean, parseSpecial: boolean): Int32Array {
    return typeof prompt === 'string' ? this.model.tokenize(prompt, { addSpecial, parseSpecial }) : toInt32Array(prompt);
  }

  #withParent(parentKey: string, prompt: string | Int32Array): Int32Array {
    const parent = this.#prefixKeys.get(parentKey);
    if (!parent) throw new LlamuxError('INVALID_ARGUMENT', `Unknown parentKey "${parentKey}": it was not returned by prefillOnly() on this context`);
    const tail = typeof prompt === 'string' ? this.model.tokenize(prompt, { addSpecial: false }) : prompt;
    const out = new Int32Array(parent.length + tail.length);
    out.set(parent, 0);
    out.set(tail, parent.length);
    return out;
  }

  /** Content address of a token prefix: model fingerprint, KV-relevant settings and the tokens. */
  #keyOf(tokens: Int32Array): string {
    const h = createHash('sha256');
    h.update(this.model.metadata.fingerprint);
    const st = this.settings;
    h.update(JSON.stringify([st.unifiedKv, st.kvCacheTypeK, st.kvCacheTypeV, st.sequenceContextSize, st.flashAttention]));
    h.update(Buffer.from(tokens.buffer, tokens.byteOffset, tokens.byteLength));
    return h.digest('hex');
  }

  /**
   * Computes the KV of a prompt without generating, so later requests that start with it
   * (`generate({ parentKey, prompt })`) prefill only their own tokens. The warmed prefix
   * stays on an idle sequence and is saved to the RAM tier. Keys are content addresses.
   * @throws LlamuxError INVALID_ARGUMENT, CONTEXT_OVERFLOW, DISPOSED, ABORTED
   */
  async prefillOnly(prompt: string | Int32Array | number[], options?: PrefillOptions): Promise<{ key: string; tokens: number; reusedTokens: number; prefilledTokens: number; cache: CacheReport }> {
    if (this.#disposed) throw this.#gone();
    const o = parseOptions(PrefillOptionsSchema, options, 'prefillOnly options');
    let tokens = this.#promptTokens(prompt, o.addSpecial ?? !o.parentKey, o.parseSpecial);
    if (o.parentKey) tokens = this.#withParent(o.parentKey, tokens);
    const key = this.#keyOf(tokens);
    this.#prefixKeys.delete(key);
    this.#prefixKeys.set(key, tokens);
    if (this.#prefixKeys.size > 4096) this.#prefixKeys.delete(this.#prefixKeys.keys().next().value!);
    const id = nextRequestId++;
    const gen = new Generation(id, false, 1 << 30, () => this.#native.cancel(id), () => {});
    const req = baseRequest(id, tokens);
    req.prefillOnly = true;
    if (o.sessionId) {
      req.sessionId = o.sessionId;
      this.#withSessionTtl(req);
    }
    this.#submit(gen, req, o.signal);
    const r = await gen.result;
    return { key, tokens: tokens.length, reusedTokens: r.reusedTokens, prefilledTokens: r.prefilledTokens, cache: r.cache };
  }

  /**
   * Continues a session with a tail of tokens (or text, tokenized without BOS): the prompt is
   * the session's committed tokens plus the tail, so only the tail is prefilled.
   * `expectCommitted` (the caller's view of the committed tokens) is verified first.
   * @throws LlamuxError TRANSCRIPT_MISMATCH, SESSION_BUSY, INVALID_ARGUMENT (unknown session)
   */
  continue(sessionId: string, tail: string | Int32Array | number[], options: SessionContinueOptions = {}): Generation {
    const { expectCommitted, ...rest } = options;
    const tailTokens = typeof tail === 'string' ? this.model.tokenize(tail, { addSpecial: false, parseSpecial: rest.parseSpecial ?? false }) : toInt32Array(tail);
    const o = parseOptions(GenerateOptionsSchema, { ...rest, prompt: tailTokens, sessionId }, 'continue options');
    if (this.#disposed) throw this.#gone();
    const toolFields = this.#toolFields(o);
    const id = nextRequestId++;
    const gen = new Generation(id, o.tokens, o.highWaterMark, () => this.#native.cancel(id), (p) => this.#native.pause(id, p));
    const req: NativeRequest = { ...toNativeRequest(id, o), ...toolFields };
    req.sessionId = sessionId;
    req.waitForSession = o.waitForSession;
    req.continueSession = true;
    this.#withSessionTtl(req);
    if (expectCommitted) req.expectCommitted = toInt32Array(expectCommitted);
    return this.#submit(gen, req, o.signal);
  }

  /** Session commands in flight: they run no decode and end with a sessionDone event. */
  #commands = new Map<number, { resolve: () => void; reject: (e: unknown) => void }>();

  #sessionCommand(cmd: NativeSessionCommand): Promise<void> {
    if (this.#disposed) return Promise.reject(this.#gone());
    const ttl = this.#sessions.get(cmd.sessionId)?.ttlMs;
    if (cmd.op === 'fork' && ttl !== undefined) cmd.sessionTtlMs = ttl;
    try {
      this.#native.sessionCommand(cmd);
    } catch (e) {
      return Promise.reject(fromNative(e));
    }
    const done = new Promise<void>((resolve, reject) => this.#commands.set(cmd.id, { resolve, reject }));
    this.#updateRef();
    return done;
  }

  /**
   * A {@link Session}: a conversation whose KV stays pinned to one sequence between requests.
   * `id` defaults to a random UUID; `ttlMs` overrides the context's `sessionTtlMs` for it.
   * @throws LlamuxError INVALID_ARGUMENT (options, an id already used by a live Session), DISPOSED
   * @example
   * const chat = ctx.createSession();
   * const first = await chat.generate({ prompt, maxTokens: 64 }).result;
   * const next = await chat.continue(' And then?', { maxTokens: 64 }).result; // prefills the tail only
   * await chat.end();
   */
  createSession(options: SessionOptions = {}): Session {
    if (this.#disposed) throw this.#gone();
    const o = parseOptions(SessionOptionsSchema, options, 'session options');
    const id = o.id ?? randomUUID();
    if (this.#sessions.has(id)) throw new LlamuxError('INVALID_ARGUMENT', `Session id "${id}" is already in use on this context`);
    const session = Session.create(this, this.#sessionHost, id, o.ttlMs);
    this.#sessions.set(id, session);
    Session.onRelease(session, () => {
      if (this.#sessions.get(id) === session) this.#sessions.delete(id);
    });
    return session;
  }

  #withSessionTtl(req: NativeRequest): void {
    const ttl = req.sessionId === undefined ? undefined : this.#sessions.get(req.sessionId)?.ttlMs;
    if (ttl !== undefined) req.sessionTtlMs = ttl;
  }

  /** Releases a session's pinned sequence (its KV stays as an ordinary cache entry). */
  endSession(sessionId: string): Promise<void> {
    const session = this.#sessions.get(sessionId);
    return session ? session.end() : this.#endSession(sessionId);
  }

  #endSession(sessionId: string): Promise<void> {
    return this.#sessionCommand({ id: nextRequestId++, op: 'end', sessionId });
  }

  /** Copies a session (shares its KV cells with unified KV) under a new id. */
  forkSession(fromSessionId: string, toSessionId: string, options: { wait?: boolean } = {}): Promise<void> {
    return this.#fork(fromSessionId, toSessionId, options.wait ?? false);
  }

  #fork(from: string, to: string, wait: boolean): Promise<void> {
    return this.#sessionCommand({ id: nextRequestId++, op: 'fork', sessionId: to, from, wait });
  }


  /** RAM tier and session counters (the budget is never exceeded). */
  cacheStats(): NativeCacheStats {
    if (this.#disposed) throw this.#gone();
    return this.#native.stats();
  }

  /**
   * Ends every running request with DISPOSED, stops the native thread and frees the KV
   * cache. Idempotent.
   */
  dispose(): Promise<void> {
    if (this.#closing) return this.#closing;
    this.#disposed = true;
    this.#closing = this.#native.close().then(() => {
      // Requests that never got a final (should not happen) still end.
      for (const [, cmd] of this.#commands) cmd.reject(new LlamuxError('DISPOSED', 'The context was disposed'));
      this.#commands.clear();
      for (const [, entry] of this.#requests) {
        entry.gen.onError(new LlamuxError('DISPOSED', 'The context was disposed'));
      }
      this.#requests.clear();
      busyContexts.delete(this);
      this.#native.setRef(false);
      for (const fn of this.#onDispose) fn();
    });
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }
}

function readySettings(r: NativeReady): ContextSettings {
  const { flashAttention, kvTypeK, kvTypeV, ...rest } = r;
  return {
    ...rest,
    flashAttention: flashAttention === 1 ? 'on' : flashAttention === 0 ? 'off' : 'auto',
    kvCacheTypeK: kvTypeK,
    kvCacheTypeV: kvTypeV,
  };
}

function baseRequest(id: number, prompt?: Int32Array): NativeRequest {
  return {
    id,
    ...(prompt ? { prompt } : {}),
    addSpecial: false,
    parseSpecial: false,
    maxTokens: -1,
    stop: [],
    tokens: false,
    renderSpecial: false,
    toolCalls: false,
    greedyToolSyntax: false,
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
  };
}

function toNativeRequest(id: number, o: ParsedGenerateOptions): NativeRequest {
  const req: NativeRequest = {
    id,
    prompt: typeof o.prompt === 'string' ? o.prompt : toInt32Array(o.prompt),
    addSpecial: o.addSpecial,
    parseSpecial: o.parseSpecial,
    maxTokens: o.maxTokens ?? -1,
    stop: o.stop,
    tokens: o.tokens,
    renderSpecial: o.renderSpecial,
    toolCalls: o.toolCalls,
    greedyToolSyntax: o.greedyToolSyntax,
    temperature: o.temperature,
    topK: o.topK,
    topP: o.topP,
    minP: o.minP,
    typicalP: o.typicalP,
    repeatPenalty: o.repeatPenalty,
    frequencyPenalty: o.frequencyPenalty,
    presencePenalty: o.presencePenalty,
    penaltyLastN: o.penaltyLastN,
    seed: o.seed ?? Math.floor(Math.random() * 0xffffffff),
  };
  if (o.cacheScope) req.cacheScope = o.cacheScope;
  if (o.grammar) {
    req.grammar = o.grammar;
    req.grammarRoot = o.grammarRoot;
  }
  if (o.logitBias) {
    const entries = o.logitBias instanceof Map ? [...o.logitBias.entries()] : Object.entries(o.logitBias).map(([k, v]) => [Number(k), v] as const);
    req.logitBiasTokens = Int32Array.from(entries.map((e) => e[0]));
    req.logitBiasValues = Float32Array.from(entries.map((e) => e[1]));
  }
  return req;
}
