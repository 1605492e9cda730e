// Token log-probabilities in the OpenAI shapes (chat `logprobs.content`, legacy completions).
import type { TokenLogprob } from '../engine/events.js';
import type { Model } from '../model/model.js';

/** A token's text (control tokens rendered) and its UTF-8 bytes (a piece may hold part of a character). */
function piece(model: Model, token: number): { text: string; bytes: number[] } {
  const b = model.tokenPiece(token, { special: true });
  return { text: Buffer.from(b).toString('utf8'), bytes: Array.from(b) };
}

/** Chat completions: `choices[].logprobs.content`. */
export function chatLogprobs(model: Model, lps: readonly TokenLogprob[]) {
  return lps.map((l) => {
    const p = piece(model, l.token);
    return {
      token: p.text,
      logprob: l.logprob,
      bytes: p.bytes,
      top_logprobs: l.top.map((t) => {
        const q = piece(model, t.token);
        return { token: q.text, logprob: t.logprob, bytes: q.bytes };
      }),
    };
  });
}

/** Legacy completions: parallel arrays; `text_offset` counts UTF-16 units from the completion's start. */
export function completionLogprobs(model: Model, lps: readonly TokenLogprob[], offset: number) {
  const tokens: string[] = [];
  const tokenLogprobs: number[] = [];
  const top: Record<string, number>[] = [];
  const textOffset: number[] = [];
  let at = offset;
  for (const l of lps) {
    const p = piece(model, l.token);
    tokens.push(p.text);
    tokenLogprobs.push(l.logprob);
    top.push(Object.fromEntries(l.top.map((t) => [piece(model, t.token).text, t.logprob])));
    textOffset.push(at);
    at += p.text.length;
  }
  return { tokens, token_logprobs: tokenLogprobs, top_logprobs: top, text_offset: textOffset, next: at };
}
