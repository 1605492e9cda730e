// Token-id arrays at the API edge (shared by Model and Context without an import cycle).
import { LlamuxError } from '../errors.js';

/** Token ids as an Int32Array (copied and checked unless already one). */
export function toInt32Array(tokens: ArrayLike<number>): Int32Array {
  if (tokens instanceof Int32Array) return tokens;
  if (!tokens || typeof tokens.length !== 'number') {
    throw new LlamuxError('INVALID_ARGUMENT', 'Expected tokens to be an Int32Array or an array of token ids');
  }
  const out = new Int32Array(tokens.length);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (!Number.isInteger(t) || (t as number) < 0 || (t as number) > 0x7fffffff) {
      throw new LlamuxError('INVALID_ARGUMENT', `Expected token ids but the value at index ${i} is ${String(t)}`);
    }
    out[i] = t as number;
  }
  return out;
}
