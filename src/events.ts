/** Why a generation ended. Errors and aborts reject instead (see LlamuxError). */
export type FinishReason = 'eog' | 'stop' | 'length' | 'abort' | 'error';

export interface GenerateTimings {
  /** Waiting for a free sequence. */
  queuedMs: number;
  /** Submit to first sampled token; -1 if none. */
  ttftMs: number;
  prefillMs: number;
  decodeMs: number;
  prefillTokensPerSec: number;
  decodeTokensPerSec: number;
}

export interface GenerateResult {
  text: string;
  /** Generated token ids (when `tokens: true`). */
  tokens?: Int32Array;
  finishReason: FinishReason;
  /** The stop string that ended generation (finishReason 'stop'). */
  stop?: string;
  promptTokens: number;
  /** Prompt tokens whose KV was already computed (reused). */
  reusedTokens: number;
  /** Prompt tokens decoded for this request: promptTokens - reusedTokens. */
  prefilledTokens: number;
  generatedTokens: number;
  timings: GenerateTimings;
}

/** A text delta. Never splits a UTF-8 character; never contains text at or past a stop string. */
export interface TextEvent {
  type: 'text';
  text: string;
  /** Token ids sampled since the previous event (when `tokens: true`). */
  tokens?: Int32Array;
}

/** The last event of a successful generation. */
export interface FinalEvent extends GenerateResult {
  type: 'final';
}

export type GenerateEvent = TextEvent | FinalEvent;
