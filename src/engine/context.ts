import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { native, type NativeCacheStats, type NativeContext, type NativeEvent, type NativeRequest, type NativeSessionCommand } from '../native/binding.js';
import { deprecate } from '../deprecation.js';
import { LlamuxError, abortError, fromNative, toErrorCode } from '../errors.js';
import type { CacheReport, GenerateResult } from './events.js';
import { EmbedJobs, embed, rerank, type EmbedOptions, type EmbedPort, type EmbedResult, type RerankOptions, type RerankResult } from './embedding.js';
import { generateChoices } from './choices.js';
import { Generation } from './generation.js';
import { InFlight } from './in-flight.js';
import { PrefixKeys } from './prefix-keys.js';
import { adapterKey, resolveAdapters, type AdapterUse } from '../model/adapter.js';
import { resolveMarkers, type ResolvedMarkers } from './markers.js';
import { resolveReasoningMarkers, type ResolvedReasoningMarkers } from './reasoning.js';
import type { ModelHandle, RegisteredModel } from '../model/handle.js';
import {
  applyResponseFormat, checkLogitBias, contextConfig, continueRequest, endSessionCommand, forkSessionCommand,
  generateRequest, prefillRequest, toolFields, reasoningFields, readySettings, type ContextSettings, type ParsedContextOptions, type SessionRef,
} from '../native/request.js';
import {
  ContinueOptionsSchema,
  GenerateOptionsSchema,
  InfillOptionsSchema,
  PrefillOptionsSchema,
  SessionOptionsSchema,
  parseOptions,
  type GenerateOptions,
  type InfillOptions,
  type ParsedGenerateOptions,
  type PrefillOptions,
  type SessionOptions,
} from '../options.js';
import { joinTokens, promptTokens, type PromptInput } from './prompt-tokens.js';
import { fimTokens, infillTokens } from './infill.js';
import { Session, type SessionContinueOptions, type SessionGenerateOptions, type SessionPort } from './session.js';
import { SessionPool } from './session-pool.js';

export { Generation } from './generation.js';

export type { ContextSettings } from '../native/request.js';

declare module './session.js' {
  /** `session.context` is this class (src/engine/session.ts, RegisteredContext). */
  interface ContextTypeRegistry {
    context: Context;
  }
}

let nextRequestId = 1;

// Contexts with work in flight (a request, or creation). The native engine holds no strong
// reference to its Context (its event callback goes through a WeakRef), so an idle context
// nobody references is collected and its engine thread stops; a busy one stays here.
const busyContexts = new Set<Context>();

/** What the request path needs of parsed generate or continue options. */
interface RunOptions {
  emitTokenIds: boolean;
  highWaterMark: number;
  signal?: AbortSignal | undefined;
  logprobs?: number | undefined;
}

/** A prompt as tokens now, or once tokenizing (src/engine/prompt-tokens.ts) finishes. */
type Tokens = Int32Array | Promise<Int32Array>;

let poolOf: (ctx: Context) => SessionPool;

/**
 * @internal The context's session pool: conversations by id (the server, the Agent, the
 * deprecated string session ids). Not public API.
 */
export function sessionPool(ctx: Context): SessionPool {
  return poolOf(ctx);
}

/**
 * A llama.cpp context: a KV cache for up to `sequences` concurrent requests, and one
 * native thread that batches all of them into each decode. Create with
 * `model.createContext()`.
 */
export class Context {
  /** The model this context runs (the Model class; see RegisteredModel in src/model/handle.ts). */
  readonly model: RegisteredModel;
  /** Tool-call markers in use (token ids), or undefined for the plain text path. */
  readonly markers: ResolvedMarkers | undefined;
  /** Reasoning markers in use (token ids), or undefined: reasoning is plain text. */
  readonly reasoningMarkers: ResolvedReasoningMarkers | undefined;
  #native: NativeContext;
  #settings: ContextSettings | undefined;
  #inFlight = new InFlight((id) => this.#native.cancel(id));
  /** Requests whose prompt is being tokenized: counted as pending, submitted in call order. */
  #tokenizing = 0;
  /** Submissions (requests and session commands) waiting in #submitChain. */
  #chained = 0;
  #submitChain: Promise<void> = Promise.resolve();
  #disposed = false;
  /** Set when an RPC server of the model died (rpcFailed). */
  #failed: LlamuxError | undefined;
  #closing: Promise<void> | undefined;
  #onDispose: Array<() => void> = [];
  #ready: { resolve: () => void; reject: (e: unknown) => void } | undefined;
  #maxPending: number;
  /** Live Session objects by id (weak: a dropped Session frees its id; the engine's TTL ends it). */
  /** Conversations by id (sessionPool): the live Session of an id, or a new one. */
  readonly #pool = new SessionPool((id) => this.#live(id) ?? this.createSession({ id }));
  #sessions = new Map<string, WeakRef<Session>>();
  #sessionsGone = new FinalizationRegistry<string>((id) => {
    if (this.#sessions.get(id)?.deref() === undefined) this.#sessions.delete(id);
  });
  #prefixKeys = new PrefixKeys();
  /** The LoRA adapters of requests that name none (createContext's `adapters`). */
  #adapters: readonly AdapterUse[];
  #embeds = new EmbedJobs();
  #embedPort: EmbedPort = {
    model: undefined as unknown as ModelHandle, // set in the constructor
    jobs: this.#embeds,
    nextId: () => nextRequestId++,
    check: () => {
      if (this.#disposed) throw this.#gone();
    },
    submit: (job) => this.#native.embed(job),
    cancel: (id) => this.#native.cancel(id),
    changed: () => this.#updateRef(),
  };

  /** How this context's Sessions reach it. */
  #sessionPort: SessionPort = {
    generate: (session, options) => this.#generate(options, session),
    continue: (session, tail, options) => this.#continue(session, tail, options),
    command: (build) => this.#sessionCommand(build(nextRequestId++)),
    create: (options) => this.createSession(options),
  };

  static {
    poolOf = (ctx) => ctx.#pool;
  }

  private constructor(model: RegisteredModel, opts: ParsedContextOptions) {
    this.model = model;
    this.#embedPort = { ...this.#embedPort, model };
    this.#maxPending = opts.sequences + opts.maxQueued;
    // Model.createContext filled in the model's default markers (loadModel's toolCallMarkers).
    this.markers = resolveMarkers(model, opts.toolCallMarkers);
    this.reasoningMarkers = resolveReasoningMarkers(model, opts.reasoningMarkers);
    this.#adapters = resolveAdapters(opts.adapters, [], model);
    this.#native = new native.Context(model.nativeHandle(), contextConfig(opts, this.markers), Context.#eventSink(new WeakRef(this)));
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
  static async create(model: RegisteredModel, opts: ParsedContextOptions): Promise<Context> {
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

  /** Requests submitted (or tokenizing) and not finished. */
  get pendingRequests(): number {
    return this.#inFlight.requests + this.#tokenizing;
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
    this.#inFlight.fail(ev, err);
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
      case 'rpcFailed': {
        // An RPC server of the model died: everything on this context fails, typed, and
        // the context refuses further work (its engine thread may wait on that server forever).
        const err = new LlamuxError('RPC_UNAVAILABLE', ev.message);
        this.#failed = err;
        this.#disposed = true;
        this.#ready?.reject(new LlamuxError('RPC_UNAVAILABLE', `Could not create the context: ${ev.message}`));
        this.#ready = undefined;
        this.#inFlight.failAll(() => new LlamuxError('RPC_UNAVAILABLE', ev.message), true);
        this.#embeds.failAll(() => new LlamuxError('RPC_UNAVAILABLE', ev.message));
        void this.dispose();
        return;
      }
      case 'closed':
        return;
      case 'embedded':
        this.#embeds.deliver(ev);
        return;
      default:
        this.#inFlight.deliver(ev);
    }
  }

  /** The error for a call on a context that can no longer run anything. */
  #gone(): LlamuxError {
    if (this.#failed) return new LlamuxError('RPC_UNAVAILABLE', `The context cannot run: ${this.#failed.message}`);
    return new LlamuxError('DISPOSED', 'The context has been disposed');
  }


  #updateRef(): void {
    const busy = this.#inFlight.requests > 0 || this.#chained > 0 || this.#inFlight.commands > 0 || this.#embeds.size > 0 || this.#ready !== undefined;
    if (busy) busyContexts.add(this);
    else busyContexts.delete(this);
    if (this.#disposed && this.#inFlight.requests === 0 && this.#embeds.size === 0) return;
    this.#native.setRef(busy);
  }

  /**
   * Starts a request. Iterate the returned {@link Generation} for text deltas and a final
   * event, or await `generation.result`. A text prompt is tokenized first (off the caller's
   * stack); the request is queued once it has its tokens.
   * @throws LlamuxError INVALID_ARGUMENT (options), DISPOSED, QUEUE_FULL
   * @example
   * for await (const ev of ctx.generate({ prompt: 'Hello', maxTokens: 32 })) {
   *   if (ev.type === 'text') process.stdout.write(ev.text);
   * }
   */
  generate(options: GenerateOptions): Generation {
    return this.#generate(options, undefined);
  }

  #generate(options: GenerateOptions | SessionGenerateOptions, session: Session | undefined): Generation {
    if (this.#disposed) throw this.#gone();
    const o = this.#withAdapters(applyResponseFormat(parseOptions(GenerateOptionsSchema, options, 'generate options')));
    let target: SessionRef | undefined = session;
    if (!session && o.sessionId !== undefined) {
      deprecate('LLAMUX_DEP_SESSION_ID', 'generate({ sessionId }) is deprecated: use ctx.createSession() and session.generate()');
      target = this.#sessionRef(o.sessionId);
    }
    const tools = toolFields(o, this.markers, this.model);
    checkLogitBias(o, this.model.vocab.size);
    const tokens = (): Tokens => {
      if (o.parentKey === undefined) return promptTokens(this.model, o.prompt, o);
      const parent = this.#prefixKeys.tokens(o.parentKey);
      // The tail of a prefix key is tokenized without BOS and without special-token parsing.
      const tail = promptTokens(this.model, o.prompt, { addSpecial: false, parseSpecial: false, signal: o.signal });
      return tail instanceof Promise ? tail.then((t) => joinTokens(parent, t)) : joinTokens(parent, tail);
    };
    return this.#run(o, tokens, (id, prompt) => generateRequest(id, o, prompt, tools, target, reasoningFields(o, this.reasoningMarkers, prompt)), target);
  }

  /**
   * The one request path: queue limit, the Generation, tokens (now, or after tokenizing, in
   * call order), the native request from its mapper, submit.
   */
  #run(o: RunOptions, tokens: () => Tokens, build: (id: number, prompt: Int32Array) => NativeRequest, target: SessionRef | undefined): Generation {
    if (this.pendingRequests >= this.#maxPending) {
      throw new LlamuxError('QUEUE_FULL', `The request queue is full (${this.pendingRequests} requests running or waiting); wait for some to finish or raise maxQueued`);
    }
    const session = target instanceof Session ? target : undefined;
    const id = nextRequestId++;
    let submitted = false;
    const gen = new Generation(
      id,
      o.emitTokenIds,
      o.highWaterMark,
      () => (submitted ? this.#native.cancel(id) : gen.onError(abortError(undefined, 'The generation'))),
      (p) => this.#native.pause(id, p),
      o.logprobs !== undefined,
    );
    if (o.signal?.aborted) {
      gen.onError(abortError(o.signal, 'The generation'));
      return gen;
    }
    const now = this.#chained === 0 ? tokens() : undefined;
    if (now instanceof Int32Array) {
      this.#submit(gen, build(id, now), o.signal, session);
      submitted = true;
      return gen;
    }
    // Tokenizing: submit later, after every request started before this one.
    this.#tokenizing++;
    this.#chained++;
    this.#updateRef();
    if (session) Context.#track(session, gen);
    const signal = o.signal;
    const onAbort = () => gen.onError(abortError(signal, 'The generation'));
    signal?.addEventListener('abort', onAbort, { once: true });
    const prompt = now ?? Promise.resolve().then(tokens);
    // allSettled: a request that failed while tokenizing still holds its place in the order.
    const step = Promise.allSettled([prompt, this.#submitChain])
      .then(([r]) => {
        signal?.removeEventListener('abort', onAbort);
        if (r.status === 'rejected') throw r.reason;
        const p = r.value;
        if (gen.done) return;
        if (this.#disposed) throw this.#gone();
        this.#submit(gen, build(id, p), signal, undefined);
        submitted = true;
      })
      .catch((e: unknown) => {
        signal?.removeEventListener('abort', onAbort);
        gen.onError(signal?.aborted ? abortError(signal, 'The generation') : fromNative(e));
      })
      .finally(() => {
        this.#tokenizing--;
        this.#chained--;
        this.#updateRef();
      });
    this.#submitChain = step;
    return gen;
  }

  #submit(gen: Generation, req: NativeRequest, signal: AbortSignal | undefined, session: Session | undefined): void {
    const id = req.id;
    try {
      this.#native.submit(req);
    } catch (e) {
      throw fromNative(e);
    }
    this.#inFlight.add(id, gen, signal);
    this.#updateRef();
    if (session) Context.#track(session, gen);
  }

  static #track(session: Session, gen: Generation): void {
    Session.track(session, 'start');
    gen.result.then((r) => Session.track(session, 'end', r), () => Session.track(session, 'end'));
  }

  /** `generate(options).result`. */
  complete(options: GenerateOptions): Promise<GenerateResult> {
    return this.generate(options).result;
  }

  /**
   * `n` generations of one prompt, prefilled once (OpenAI's `n`): the prompt's KV is computed
   * on one session's sequence and shared with n - 1 forks (llama.cpp's seq_cp: with unified KV
   * the cells are shared, not copied); each choice then decodes only the prompt's last token
   * and samples on its own. Choice i uses seed `seed + i` (mod 2^32), so seeded choices differ
   * and every one is reproducible; greedy choices are identical. Runs side by side on n
   * sequences (with fewer, forks wait or move to the RAM tier). The forks end with their
   * generations. Not with `sessionId`.
   * @throws LlamuxError INVALID_ARGUMENT (options, n), CONTEXT_OVERFLOW, DISPOSED, QUEUE_FULL, ABORTED
   */
  generateChoices(options: GenerateOptions & { n: number }): Promise<Generation[]> {
    if (this.#disposed) return Promise.reject(this.#gone());
    return generateChoices(
      {
        model: this.model,
        markers: this.markers,
        generate: (o) => this.generate(o),
        createSession: () => this.createSession(),
        prefixTokens: (key) => this.#prefixKeys.tokens(key),
        prefill: async (session, prefix, signal, cacheScope, adapters) => {
          const set = resolveAdapters(adapters, this.#adapters, this.model);
          await this.#run({ emitTokenIds: false, highWaterMark: 1 << 30, signal }, () => prefix, (id, p) => prefillRequest(id, p, session, cacheScope, set), session).result;
        },
      },
      options,
    );
  }

  /**
   * Computes the KV of a prompt without generating, so later requests that start with it
   * (`generate({ parentKey, prompt })`) prefill only their own tokens. The warmed prefix
   * stays on an idle sequence and is saved to the RAM tier. Keys are content addresses.
   * @throws LlamuxError INVALID_ARGUMENT, CONTEXT_OVERFLOW, DISPOSED, ABORTED
   */
  async prefillOnly(prompt: PromptInput, options?: PrefillOptions): Promise<{ key: string; tokens: number; reusedTokens: number; prefilledTokens: number; cache: CacheReport }> {
    if (this.#disposed) throw this.#gone();
    const o = parseOptions(PrefillOptionsSchema, options, 'prefillOnly options');
    let tokens = await promptTokens(this.model, prompt, o);
    if (o.parentKey) tokens = joinTokens(this.#prefixKeys.tokens(o.parentKey), tokens);
    const adapters = resolveAdapters(o.adapters, this.#adapters, this.model);
    const key = this.#prefixKeys.remember(this.settings.layoutKey, tokens, adapterKey(adapters));
    const session = o.sessionId === undefined ? undefined : this.#sessionRef(o.sessionId);
    const run = { emitTokenIds: false, highWaterMark: 1 << 30, signal: o.signal };
    const r = await this.#run(run, () => tokens, (id, p) => prefillRequest(id, p, session, '', adapters), session).result;
    return { key, tokens: tokens.length, reusedTokens: r.reusedTokens, prefilledTokens: r.prefilledTokens, cache: r.cache };
  }

  /**
   * @deprecated Use `session.continue(tail, options)` (`ctx.createSession()`).
   * Continues a session with a tail of tokens (or text, tokenized without BOS): the prompt is
   * the session's committed tokens plus the tail, so only the tail is prefilled.
   * @throws LlamuxError TRANSCRIPT_MISMATCH, SESSION_BUSY, INVALID_ARGUMENT (unknown session)
   */
  continue(sessionId: string, tail: PromptInput, options: SessionContinueOptions = {}): Generation {
    deprecate('LLAMUX_DEP_CONTINUE', 'ctx.continue(sessionId, ...) is deprecated: use ctx.createSession() and session.continue()');
    return this.#continue(this.#sessionRef(sessionId), tail, options);
  }

  /**
   * Fill-in-the-middle for code editors: generates what goes between `prefix` and `suffix`,
   * prompted with the model's FIM tokens (`model.vocab.fim`; src/engine/infill.ts). `extra`
   * files go first, as repository context. Every generate option but the prompt applies.
   * @throws LlamuxError UNSUPPORTED (the vocabulary has no FIM tokens), INVALID_ARGUMENT, DISPOSED, QUEUE_FULL
   * @example
   * const r = await ctx.infill({ prefix: 'def add(a, b):\n    ', suffix: '\n\nprint(add(1, 2))', maxTokens: 32 }).result;
   */
  infill(options: InfillOptions): Generation {
    if (this.#disposed) throw this.#gone();
    const o = this.#withAdapters(applyResponseFormat(parseOptions(InfillOptionsSchema, options, 'infill options')));
    fimTokens(this.model);
    const g: ParsedGenerateOptions = { ...o, prompt: '' };
    const tools = toolFields(g, this.markers, this.model);
    checkLogitBias(g, this.model.vocab.size);
    return this.#run(g, () => infillTokens(this.model, o, o.signal), (id, prompt) => generateRequest(id, g, prompt, tools, undefined), undefined);
  }

  #continue(session: SessionRef, tail: PromptInput, options: SessionContinueOptions): Generation {
    if (this.#disposed) throw this.#gone();
    const o = this.#withAdapters(applyResponseFormat(parseOptions(ContinueOptionsSchema, options, 'continue options')));
    const tools = toolFields(o, this.markers, this.model);
    checkLogitBias(o, this.model.vocab.size);
    const tokens = () => promptTokens(this.model, tail, { addSpecial: false, parseSpecial: o.parseSpecial, signal: o.signal });
    return this.#run(o, tokens, (id, p) => continueRequest(id, o, p, tools, session, reasoningFields(o, this.reasoningMarkers, p)), session);
  }

  /** Parsed options with the request's adapter set resolved (its own, or the context's default). */
  #withAdapters<T extends { adapters?: AdapterUse[] | undefined }>(o: T): T {
    return { ...o, adapters: [...resolveAdapters(o.adapters, this.#adapters, this.model)] };
  }

  /** Queues a session command after every request started before it (in call order). */
  #sessionCommand(cmd: NativeSessionCommand): Promise<void> {
    const send = (): Promise<void> => {
      if (this.#disposed) return Promise.reject(this.#gone());
      try {
        this.#native.sessionCommand(cmd);
      } catch (e) {
        return Promise.reject(fromNative(e));
      }
      const done = this.#inFlight.command(cmd.id);
      this.#updateRef();
      return done;
    };
    if (this.#chained === 0) return send();
    this.#chained++;
    let done!: Promise<void>;
    const step = this.#submitChain.then(() => {
      done = send();
      this.#chained--;
      this.#updateRef();
    });
    this.#submitChain = step;
    return step.then(() => done);
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
    if (this.#live(id)) throw new LlamuxError('INVALID_ARGUMENT', `Session id "${id}" is already in use on this context`);
    const session = Session.create(this, this.#sessionPort, id, o.ttlMs, this.#native.openSession());
    this.#sessions.set(id, new WeakRef(session));
    this.#sessionsGone.register(session, id);
    Session.onRelease(session, () => {
      if (this.#sessions.get(id)?.deref() === session) this.#sessions.delete(id);
    });
    return session;
  }

  /** The live Session with this id, if any. */
  #live(id: string): Session | undefined {
    const s = this.#sessions.get(id)?.deref();
    return s && !s.ended ? s : undefined;
  }

  /** A string id from the deprecated API: its Session, through the pool (kept referenced there). */
  #sessionRef(id: string): SessionRef {
    return this.#pool.get(id);
  }

  /**
   * @deprecated Use `session.end()`.
   * Releases a session's pinned sequence (its KV stays as an ordinary cache entry).
   */
  endSession(sessionId: string): Promise<void> {
    deprecate('LLAMUX_DEP_END_SESSION', 'ctx.endSession(sessionId) is deprecated: use session.end()');
    // a name that never ran a request has nothing pinned: nothing to end
    return this.#live(sessionId)?.end() ?? Promise.resolve();
  }

  /**
   * @deprecated Use `session.fork()`.
   * Copies a session (shares its KV cells with unified KV) under a new id.
   */
  forkSession(fromSessionId: string, toSessionId: string, options: { wait?: boolean } = {}): Promise<void> {
    deprecate('LLAMUX_DEP_FORK_SESSION', 'ctx.forkSession(from, to) is deprecated: use session.fork()');
    return this.#sessionCommand(forkSessionCommand(nextRequestId++, this.#sessionRef(fromSessionId), this.#sessionRef(toSessionId), options.wait ?? false));
  }

  /**
   * Embeddings of one or more texts (or token arrays), computed on this context's engine
   * thread beside its generations (docs/api.md, Embeddings). Texts are tokenized with the
   * model's special tokens. Pooling defaults to the model's (its GGUF `pooling_type`).
   * @throws LlamuxError INVALID_ARGUMENT, UNSUPPORTED (the model declares no pooling and none was
   *   given), CONTEXT_OVERFLOW (an input longer than batchSize or the model's positions), DISPOSED, ABORTED
   * @example
   * const { embeddings } = await ctx.embed(['first text', 'second text']);
   */
  embed(inputs: string | Array<string | Int32Array | number[]>, options?: EmbedOptions): Promise<EmbedResult> {
    return embed(this.#embedPort, inputs, options);
  }

  /**
   * Scores each document against a query with a reranker (a cross-encoder GGUF with rank
   * pooling), best first.
   * @throws LlamuxError UNSUPPORTED (not a reranker), INVALID_ARGUMENT, CONTEXT_OVERFLOW, DISPOSED, ABORTED
   */
  rerank(query: string, documents: string[], options?: RerankOptions): Promise<RerankResult> {
    return rerank(this.#embedPort, query, documents, options);
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
      this.#inFlight.failAll(() => new LlamuxError('DISPOSED', 'The context was disposed'), false);
      this.#embeds.failAll(() => new LlamuxError('DISPOSED', 'The context was disposed'));
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
