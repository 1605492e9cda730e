// One running request as seen by its caller: an async iterator of events and a result.
import { AsyncQueue } from './async-queue.js';
import type { NativeEvent } from '../native/binding.js';
import type { LlamuxError } from '../errors.js';
import type { FinalEvent, FinishReason, GenerateEvent, GenerateResult, TextEvent, TokenLogprob, ToolCallSpan } from './events.js';

/** A native final that ended well (its reason is neither abort nor error). */
type NativeFinal = Extract<NativeEvent, { type: 'final' }> & { finishReason: FinishReason };

/** The numbers of a successful final; the Generation adds the text, tokens and spans. */
export function finalResult(ev: NativeFinal): Omit<GenerateResult, 'text' | 'tokens' | 'toolCalls' | 'truncatedToolCall' | 'reasoning' | 'logprobs'> {
  const s = ev.stats;
  return {
    finishReason: ev.finishReason,
    ...(ev.stop !== undefined ? { stop: ev.stop } : {}),
    promptTokens: s.promptTokens,
    reusedTokens: s.reusedTokens,
    prefilledTokens: s.prefilledTokens,
    generatedTokens: s.generatedTokens,
    shiftedTokens: s.shiftedTokens ?? 0,
    timings: {
      queuedMs: s.queuedMs,
      ttftMs: s.ttftMs,
      prefillMs: s.prefillMs,
      decodeMs: s.decodeMs,
      prefillTokensPerSec: s.prefillTokensPerSec,
      decodeTokensPerSec: s.decodeTokensPerSec,
      sampleMs: s.sampleMs,
      draftedTokens: s.draftedTokens ?? 0,
      acceptedTokens: s.acceptedTokens ?? 0,
    },
    cache: {
      outcome: s.cacheOutcome ?? 'cold',
      ...(s.cacheTier ? { tier: s.cacheTier } : {}),
      reusedTokens: s.reusedTokens,
      prefilledTokens: s.prefilledTokens,
      restoreMs: s.restoreMs ?? 0,
      ...(s.checkpoint !== undefined ? { checkpoint: s.checkpoint } : {}),
      retainedTokens: s.retainedTokens ?? 0,
      retainRefused: s.retainRefused ?? 0,
    },
  };
}

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
  #reasoning: string[] | undefined;
  #reasoningTokens: number[] = [];
  #tokens: number[] | undefined;
  #logprobs: TokenLogprob[] | undefined;
  #toolCalls: ToolCallSpan[] = [];
  #truncated: ToolCallSpan | undefined;
  #done = false;
  #paused = false;
  #cancel: () => void;
  #setPaused: (paused: boolean) => void;
  #highWater: number;

  /** @internal */
  constructor(id: number, wantTokens: boolean, highWater: number, cancel: () => void, setPaused: (p: boolean) => void, wantLogprobs = false) {
    this.id = id;
    this.#cancel = cancel;
    this.#setPaused = setPaused;
    this.#highWater = highWater;
    if (wantTokens) this.#tokens = [];
    if (wantLogprobs) this.#logprobs = [];
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
  onText(text: string, tokens: Int32Array | undefined, logprobs?: TokenLogprob[]): void {
    if (this.#done) return;
    this.#text.push(text);
    if (this.#tokens && tokens) for (const t of tokens) this.#tokens.push(t);
    const ev: TextEvent = tokens ? { type: 'text', text, tokens } : { type: 'text', text };
    if (logprobs) {
      ev.logprobs = logprobs;
      for (const l of logprobs) this.#logprobs?.push(l);
    }
    this.#queue.push(ev);
    // Backpressure only applies to a consumer that iterates; `result` alone never pauses.
    if (!this.#paused && this.#queue.iterating && this.#queue.size > this.#highWater) {
      this.#paused = true;
      this.#setPaused(true);
    }
  }

  /** @internal */
  onReasoning(text: string, tokens: Int32Array): void {
    if (this.#done) return;
    (this.#reasoning ??= []).push(text);
    for (const t of tokens) this.#reasoningTokens.push(t);
    if (this.#tokens) for (const t of tokens) this.#tokens.push(t);
    this.#queue.push({ type: 'reasoning', text, tokens });
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
  onFinal(result: Omit<GenerateResult, 'text' | 'tokens' | 'toolCalls' | 'truncatedToolCall' | 'reasoning' | 'logprobs'>, logprobs?: TokenLogprob[]): void {
    if (this.#done) return;
    this.#done = true;
    const full: GenerateResult = { ...result, text: this.#text.join(''), toolCalls: this.#toolCalls };
    if (logprobs) for (const l of logprobs) this.#logprobs?.push(l);
    if (this.#logprobs) full.logprobs = this.#logprobs;
    if (this.#truncated) full.truncatedToolCall = this.#truncated;
    if (this.#reasoning) full.reasoning = { text: this.#reasoning.join(''), tokens: Int32Array.from(this.#reasoningTokens) };
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
