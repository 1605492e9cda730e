// The identity of a context's KV layout: which saved KV states and warmed prefixes a context
// may use. One function, so prefix keys and any other layout-dependent key cannot disagree.
import { createHash } from 'node:crypto';

/** What decides whether KV computed by one context is valid in another. */
export interface KvLayout {
  unifiedKv: boolean;
  kvCacheTypeK: number;
  kvCacheTypeV: number;
  sequenceContextSize: number;
  flashAttention: 'auto' | 'on' | 'off';
}

/** The layout key: the model fingerprint (weights + vocabulary) and the KV-relevant settings. */
export function layoutKey(modelFingerprint: string, l: KvLayout): string {
  const h = createHash('sha256');
  h.update(modelFingerprint);
  h.update(JSON.stringify([l.unifiedKv, l.kvCacheTypeK, l.kvCacheTypeV, l.sequenceContextSize, l.flashAttention]));
  return h.digest('hex');
}

/** Content address of a token prefix under a layout (`prefillOnly()` keys). */
export function prefixKey(layout: string, tokens: Int32Array): string {
  const h = createHash('sha256');
  h.update(layout);
  h.update(Buffer.from(tokens.buffer, tokens.byteOffset, tokens.byteLength));
  return h.digest('hex');
}
