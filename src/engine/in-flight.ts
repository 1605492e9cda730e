// The requests and session commands a context has handed to the engine thread, and the
// routing of their events (text, tool-call spans, final, sessionDone) to each one.
import type { NativeEvent } from '../native/binding.js';
import { LlamuxError, abortError, toErrorCode } from '../errors.js';
import { finalResult, type Generation } from './generation.js';

interface RequestEntry {
  gen: Generation;
  signal?: AbortSignal;
  onAbort?: () => void;
}

type RequestEvent = Extract<NativeEvent, { type: 'text' | 'reasoning' | 'progress' | 'toolCallStart' | 'toolCallDelta' | 'toolCallEnd' | 'final' | 'sessionDone' }>;

export class InFlight {
  #requests = new Map<number, RequestEntry>();
  #commands = new Map<number, { resolve: () => void; reject: (e: unknown) => void }>();
  #cancel: (id: number) => void;

  /** `cancel` stops a request on the engine thread (its signal fired). */
  constructor(cancel: (id: number) => void) {
    this.#cancel = cancel;
  }

  get requests(): number {
    return this.#requests.size;
  }

  get commands(): number {
    return this.#commands.size;
  }

  /** A submitted request: its signal cancels it on the engine thread. */
  add(id: number, gen: Generation, signal: AbortSignal | undefined): void {
    const entry: RequestEntry = { gen };
    if (signal) {
      entry.signal = signal;
      entry.onAbort = () => this.#cancel(id);
      signal.addEventListener('abort', entry.onAbort, { once: true });
    }
    this.#requests.set(id, entry);
  }

  /** A submitted session command: settles with its sessionDone event. */
  command(id: number): Promise<void> {
    return new Promise<void>((resolve, reject) => this.#commands.set(id, { resolve, reject }));
  }

  #take(id: number): RequestEntry | undefined {
    const entry = this.#requests.get(id);
    if (!entry) return undefined;
    this.#requests.delete(id);
    if (entry.onAbort) entry.signal?.removeEventListener('abort', entry.onAbort);
    return entry;
  }

  /** Delivers a request's or command's event (unknown ids are ignored: already ended). */
  deliver(ev: RequestEvent): void {
    switch (ev.type) {
      case 'text':
        this.#requests.get(ev.id)?.gen.onText(ev.text, ev.tokens, ev.logprobs);
        return;
      case 'reasoning':
        this.#requests.get(ev.id)?.gen.onReasoning(ev.text, ev.tokens ?? new Int32Array(0));
        return;
      case 'toolCallStart':
        this.#requests.get(ev.id)?.gen.onEvent({ type: 'toolCallStart', index: ev.index });
        return;
      case 'progress':
        this.#requests.get(ev.id)?.gen.onEvent({ type: 'progress', total: ev.total, cached: ev.cached, processed: ev.processed, ms: ev.ms, retainedTokens: ev.retainedTokens ?? 0, retainRefused: ev.retainRefused ?? 0 });
        return;
      case 'toolCallDelta':
        this.#requests.get(ev.id)?.gen.onEvent({ type: 'toolCallDelta', index: ev.index, text: ev.text });
        return;
      case 'toolCallEnd':
        this.#requests.get(ev.id)?.gen.onEvent({ type: ev.truncated ? 'toolCallTruncated' : 'toolCallEnd', index: ev.index, text: ev.text, tokens: ev.tokens });
        return;
      case 'final': {
        const entry = this.#take(ev.id);
        if (!entry) return;
        if (ev.finishReason === 'abort') {
          entry.gen.onError(abortError(entry.signal, 'The generation'));
          return;
        }
        if (ev.finishReason === 'error') {
          entry.gen.onError(new LlamuxError(toErrorCode(ev.code), ev.message ?? 'Generation failed'));
          return;
        }
        entry.gen.onFinal(finalResult({ ...ev, finishReason: ev.finishReason }), ev.logprobs);
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
    }
  }

  /** An event that could not be delivered: its request or command ends with `err`. */
  fail(ev: NativeEvent, err: LlamuxError): void {
    const cmd = ev.type === 'sessionDone' ? this.#commands.get(ev.id) : undefined;
    if (cmd) {
      this.#commands.delete(ev.id);
      cmd.reject(err);
      return;
    }
    const entry = this.#take(ev.id);
    if (!entry) return;
    this.#cancel(ev.id); // a final may still be coming: the engine stops the request
    entry.gen.onError(err);
  }

  /**
   * Ends everything in flight with `err()` (the context failed or was disposed). `detach`
   * also removes the requests' abort listeners.
   */
  failAll(err: () => LlamuxError, detach: boolean): void {
    for (const [, cmd] of this.#commands) cmd.reject(err());
    this.#commands.clear();
    for (const [, entry] of this.#requests) {
      if (detach && entry.onAbort) entry.signal?.removeEventListener('abort', entry.onAbort);
      entry.gen.onError(err());
    }
    this.#requests.clear();
  }
}
