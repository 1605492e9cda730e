// The tokens of media a model has already tokenized, keyed by a hash of the encoded bytes (and
// the limits that shaped them). A chat client sends every image of the history again on every
// turn; decoding, hashing the pixels and tokenizing each one again cost ~1.5 ms per 640x400
// screenshot on 2 cores (8 ms of a turn-8 request, bench multimodal suite). Equal bytes decode
// to equal pixels, so the tokens are the same. An entry is used only while the projector still
// holds the media (native mediaHeld): the engine finds media runs there, and refuses a request
// whose media it dropped.
import { createHash } from 'node:crypto';
import { native } from '../native/binding.js';
import type { Model } from '../model/model.js';

const MAX_ENTRIES = 512;

const byModel = new WeakMap<Model, Map<string, Int32Array>>();

function keyOf(model: Model, bytes: Uint8Array): string {
  const l = model.mediaLimits;
  return `${createHash('sha256').update(bytes).digest('base64')}:${l.maxPixels}:${l.maxAudioSeconds}`;
}

/** The tokens of this medium from an earlier request, or undefined. */
export function cachedMediaTokens(model: Model, bytes: Uint8Array): { key: string; tokens: Int32Array | undefined } {
  const key = keyOf(model, bytes);
  const entries = byModel.get(model);
  const tokens = entries?.get(key);
  if (tokens === undefined) return { key, tokens };
  if (!native.mediaHeld(model.nativeHandle(), tokens)) {
    entries!.delete(key);
    return { key, tokens: undefined };
  }
  // most recently used last (a Map keeps insertion order)
  entries!.delete(key);
  entries!.set(key, tokens);
  return { key, tokens };
}

export function rememberMediaTokens(model: Model, key: string, tokens: Int32Array): void {
  let entries = byModel.get(model);
  if (!entries) byModel.set(model, (entries = new Map()));
  entries.set(key, tokens);
  if (entries.size > MAX_ENTRIES) entries.delete(entries.keys().next().value!);
}
