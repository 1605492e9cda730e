// The one place a request's text becomes tokens: generate's text prompt, continue's tail,
// prefillOnly's prompt and a prefix key's tail all go through promptTokens().
import type { ModelHandle } from '../model/handle.js';
import type { PromptPart } from '../options.js';
import { keepMedia, mediaPromptTokens } from './media.js';
import { toInt32Array } from './tokens.js';

export interface PromptTokenizeOptions {
  addSpecial: boolean;
  parseSpecial: boolean;
  signal?: AbortSignal | undefined;
}

/** A prompt: text, token ids, or content parts (text and media). */
export type PromptInput = string | Int32Array | number[] | readonly PromptPart[];

function isParts(prompt: PromptInput): prompt is readonly PromptPart[] {
  return Array.isArray(prompt) && prompt.length > 0 && typeof prompt[0] === 'object';
}

/**
 * Token ids of a prompt: given ids as they are (now), text through `model.tokenizeAsync`
 * (later; rejects with ABORTED when `signal` fires), content parts through libmtmd (later;
 * src/engine/media.ts: the tokens carry their media).
 */
export function promptTokens(model: ModelHandle, prompt: PromptInput, o: PromptTokenizeOptions): Int32Array | Promise<Int32Array> {
  if (isParts(prompt)) return mediaPromptTokens(model, prompt, o);
  if (typeof prompt !== 'string') return toInt32Array(prompt as Int32Array | number[]);
  return model.tokenizeAsync(prompt, { addSpecial: o.addSpecial, parseSpecial: o.parseSpecial, ...(o.signal ? { signal: o.signal } : {}) });
}

/** A prefix followed by a tail, as one array. */
export function joinTokens(prefix: Int32Array, tail: Int32Array): Int32Array {
  const out = new Int32Array(prefix.length + tail.length);
  out.set(prefix, 0);
  out.set(tail, prefix.length);
  return keepMedia(tail, out);
}
