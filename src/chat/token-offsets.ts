// Token positions of character offsets in text that was tokenized whole: the count of leading
// tokens whose pieces (the raw bytes each token contributes) spell the text up to at most that
// offset. Used for prompt-cache breakpoints, which must never change how a prompt is tokenized
// (a prompt cut at a breakpoint tokenizes differently there than the same prompt without it, so
// the next turn, whose breakpoint has moved on, would depart from the KV at the old one).
import type { Model } from '../model/model.js';

/**
 * How many of `tokens[skip..]` (the tokenization of `text`; `skip` leading tokens such as a BOS
 * spell nothing of it) end at or before character offset `at` of `text`, plus `skip`: the last
 * token boundary at or before `at`. Each piece is checked against the text's bytes; where one
 * does not spell the text (a tokenizer that adds a leading space is allowed its first one), the
 * count stops there: a shorter prefix, never one that disagrees with the text.
 */
export function tokenBoundaryAt(model: Model, tokens: ArrayLike<number>, text: string, at: number, skip: number, pieces: Map<number, Uint8Array>): number {
  const target = Buffer.from(text.slice(0, at), 'utf8');
  let pos = 0;
  let i = skip;
  for (; i < tokens.length; i++) {
    const t = tokens[i]!;
    let piece = pieces.get(t);
    if (!piece) {
      piece = model.tokenPiece(t, { special: true });
      pieces.set(t, piece);
    }
    let p = piece;
    // SentencePiece's space prefix: the first piece has a space the text does not
    if (i === skip && p.length > 0 && p[0] === 0x20 && text[0] !== ' ') p = p.subarray(1);
    if (pos + p.length > target.length) break;
    if (!matches(target, pos, p)) break;
    pos += p.length;
  }
  return i;
}

function matches(target: Uint8Array, pos: number, piece: Uint8Array): boolean {
  for (let k = 0; k < piece.length; k++) if (target[pos + k] !== piece[k]) return false;
  return true;
}
