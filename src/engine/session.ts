import type { NativeSessionCommand } from '../native/binding.js';
import { LlamuxError } from '../errors.js';
import type { GenerateResult } from './events.js';
import type { Generation } from './generation.js';
import { endSessionCommand, forkSessionCommand } from '../native/request.js';
import type { GenerateOptions } from '../options.js';
import type { PromptInput } from './prompt-tokens.js';

/** What `session.generate()` takes: generate options without the session and prefix keys. */
export type SessionGenerateOptions = Omit<GenerateOptions, 'sessionId' | 'parentKey'>;

/** What `session.continue()` takes: generate options without a prompt, plus `expectCommitted`. */
export type SessionContinueOptions = Omit<GenerateOptions, 'prompt' | 'sessionId' | 'parentKey'> & {
  /** The caller's view of the committed tokens; a difference fails with TRANSCRIPT_MISMATCH. */
  expectCommitted?: ArrayLike<number>;
};

/** Counters of one session, kept as its requests finish. */
export interface SessionStats {
  id: string;
  /** Requests that finished on this session (successful ones; aborts and errors are not counted). */
  requests: number;
  /** Tokens the session's KV holds for the next turn: the last prompt plus its output (no EOG). */
  committedTokens: number;
  /** Sums over the session's requests. */
  reusedTokens: number;
  prefilledTokens: number;
  generatedTokens: number;
  /** The cache outcome of the last request, if any. */
  lastCacheOutcome: GenerateResult['cache']['outcome'] | undefined;
  /** A request of this session is running or waiting. */
  running: boolean;
  ended: boolean;
}

const token = Symbol('llamux.session');

/**
 * @internal What a Session needs of its context: its requests and commands go through it, with
 * the Session itself (no string ids). Each Context makes one (src/engine/context.ts); not public API.
 */
export interface SessionPort {
  generate(session: Session, options: SessionGenerateOptions): Generation;
  continue(session: Session, tail: PromptInput, options: SessionContinueOptions): Generation;
  /** Queues a session command built with a fresh request id; resolves on its sessionDone. */
  command(build: (id: number) => NativeSessionCommand): Promise<void>;
  create(options: { id?: string; ttlMs?: number }): Session;
}

/**
 * Filled in by src/engine/context.ts (`{ context: Context }`), so that `session.context` has the
 * Context class's exact type while this file never imports it (as ModelTypeRegistry in
 * src/model/handle.ts does for `ctx.model`).
 */
export interface ContextTypeRegistry {}

/** The Context class, as registered by src/engine/context.ts. */
export type RegisteredContext = ContextTypeRegistry extends { context: infer C } ? C : object;

/**
 * A conversation whose KV stays pinned to one sequence between requests: a prompt that
 * extends the last one prefills only its new tokens. Create with `ctx.createSession()`.
 */
export class Session {
  readonly id: string;
  /** @internal The native handle (Context.openSession): what the engine knows this session by. */
  readonly handle: number;
  /** The context this session runs on. */
  readonly context: RegisteredContext;
  /** Idle time after which the engine releases this session (undefined: the context's sessionTtlMs). */
  readonly ttlMs: number | undefined;
  #stats: Omit<SessionStats, 'id' | 'running' | 'ended'> = {
    requests: 0,
    committedTokens: 0,
    reusedTokens: 0,
    prefilledTokens: 0,
    generatedTokens: 0,
    lastCacheOutcome: undefined,
  };
  #running = 0;
  #ended = false;
  #port: SessionPort;

  /** @internal */
  constructor(key: symbol, context: RegisteredContext, port: SessionPort, id: string, ttlMs: number | undefined, handle: number) {
    if (key !== token) throw new LlamuxError('INVALID_ARGUMENT', 'Sessions are created with ctx.createSession()');
    this.context = context;
    this.#port = port;
    this.id = id;
    this.handle = handle;
    this.ttlMs = ttlMs;
  }

  /** @internal */
  static create(context: RegisteredContext, port: SessionPort, id: string, ttlMs: number | undefined, handle: number): Session {
    return new Session(token, context, port, id, ttlMs, handle);
  }

  get ended(): boolean {
    return this.#ended;
  }

  #check(): void {
    if (this.#ended) throw new LlamuxError('INVALID_ARGUMENT', `Session "${this.id}" has ended`);
  }

  /**
   * Runs a request on this session: the whole prompt is given, and the part shared with the
   * session's committed tokens is not prefilled again.
   * @throws LlamuxError INVALID_ARGUMENT (options, an ended session), DISPOSED, QUEUE_FULL
   */
  generate(options: SessionGenerateOptions): Generation {
    this.#check();
    return this.#port.generate(this, options);
  }

  /**
   * Appends a tail (tokens, or text tokenized without BOS) to the committed tokens and
   * generates: only the tail is prefilled.
   * @throws LlamuxError INVALID_ARGUMENT (no request ran yet), TRANSCRIPT_MISMATCH, SESSION_BUSY
   */
  continue(tail: PromptInput, options: SessionContinueOptions = {}): Generation {
    this.#check();
    return this.#port.continue(this, tail, options);
  }

  /**
   * A new session starting from this one's KV (cells are shared with unified KV) and
   * committed tokens.
   * @throws LlamuxError INVALID_ARGUMENT (id in use, nothing to fork yet), SESSION_BUSY
   */
  async fork(options: { id?: string; ttlMs?: number; wait?: boolean } = {}): Promise<Session> {
    this.#check();
    const { wait, ...rest } = options;
    const copy = this.#port.create({ ...(this.ttlMs !== undefined ? { ttlMs: this.ttlMs } : {}), ...rest });
    try {
      await this.#port.command((id) => forkSessionCommand(id, this, copy, wait ?? false));
    } catch (e) {
      copy.#ended = true;
      copy.#release();
      throw e;
    }
    copy.#stats.committedTokens = this.#stats.committedTokens;
    return copy;
  }

  /** Releases the session's sequence (its KV stays as an ordinary cache entry). Idempotent. */
  async end(): Promise<void> {
    if (this.#ended) return;
    this.#ended = true;
    try {
      await this.#port.command((id) => endSessionCommand(id, this));
    } finally {
      this.#release();
    }
  }

  stats(): SessionStats {
    return { id: this.id, ...this.#stats, running: this.#running > 0, ended: this.#ended };
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.end();
  }

  #onRelease: (() => void) | undefined;
  #release(): void {
    this.#onRelease?.();
    this.#onRelease = undefined;
  }

  /** @internal Context bookkeeping: called when a request of this session starts and ends. */
  static track(s: Session, event: 'start' | 'end', result?: GenerateResult): void {
    if (event === 'start') {
      s.#running++;
      return;
    }
    s.#running = Math.max(0, s.#running - 1);
    if (!result) return;
    s.#stats.requests++;
    s.#stats.committedTokens = result.promptTokens + result.generatedTokens;
    s.#stats.reusedTokens += result.reusedTokens;
    s.#stats.prefilledTokens += result.prefilledTokens;
    s.#stats.generatedTokens += result.generatedTokens;
    s.#stats.lastCacheOutcome = result.cache.outcome;
  }

  /** @internal */
  static onRelease(s: Session, fn: () => void): void {
    s.#onRelease = fn;
  }
}
