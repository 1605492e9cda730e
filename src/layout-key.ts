// Prefix keys of prefillOnly(): content addresses under the context's layout key. The layout
// key itself (model fingerprint + KV layout) is computed once, natively (LayoutKey in
// native/hash.h, also the disk tier's compatibility check), and reported as settings.layoutKey.
import { createHash } from 'node:crypto';

/** Content address of a token prefix under a layout key. */
export function prefixKey(layoutKey: string, tokens: Int32Array): string {
  const h = createHash('sha256');
  h.update(layoutKey);
  h.update(Buffer.from(tokens.buffer, tokens.byteOffset, tokens.byteLength));
  return h.digest('hex');
}
