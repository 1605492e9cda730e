// Prefix keys of prefillOnly(): content addresses under the context's layout key. The layout
// key itself (model fingerprint + KV layout) is computed once, natively (LayoutKey in
// native/kv/hash.h, also the disk tier's compatibility check), and reported as settings.layoutKey.
import { createHash } from 'node:crypto';
import { LlamuxError } from '../errors.js';

/**
 * Content address of a token prefix under a layout key and a LoRA adapter set (its key from
 * adapterKey(), src/model/adapter.ts; '' for the base model, which keeps the keys it always had).
 */
export function prefixKey(layoutKey: string, tokens: Int32Array, adapters = ''): string {
  const h = createHash('sha256');
  h.update(layoutKey);
  if (adapters !== '') h.update(`\0lora:${adapters}\0`);
  h.update(Buffer.from(tokens.buffer, tokens.byteOffset, tokens.byteLength));
  return h.digest('hex');
}

/** The prefixes a context warmed, by key (the 4096 most recent). */
export class PrefixKeys {
  #tokens = new Map<string, Int32Array>();

  /** Records a warmed prefix; returns its key. */
  remember(layoutKey: string, tokens: Int32Array, adapters = ''): string {
    const key = prefixKey(layoutKey, tokens, adapters);
    this.#tokens.delete(key);
    this.#tokens.set(key, tokens);
    if (this.#tokens.size > 4096) this.#tokens.delete(this.#tokens.keys().next().value!);
    return key;
  }

  /** @throws LlamuxError INVALID_ARGUMENT for a key this context did not return */
  tokens(parentKey: string): Int32Array {
    const parent = this.#tokens.get(parentKey);
    if (!parent) throw new LlamuxError('INVALID_ARGUMENT', `Unknown parentKey "${parentKey}": it was not returned by prefillOnly() on this context`);
    return parent;
  }
}
