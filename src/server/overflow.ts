// What the server does with a prompt longer than a sequence of its context (--overflow).
import { HttpError } from './http.js';

export type OverflowPolicy = 'error' | 'truncate-middle';

export interface FittedPrompt {
  tokens: Int32Array;
  /** Prompt tokens dropped from the middle (0: the prompt was sent whole). */
  truncatedTokens: number;
}

/**
 * `error`: a prompt of `limit` tokens or more is a 400 (context_length). `truncate-middle`: a
 * prompt that leaves fewer than `reserve` tokens for the answer (`max_tokens`, else a quarter of
 * the sequence; at most half of it) keeps its first and last (limit − reserve) / 2 tokens, so the
 * system prompt and the latest turn survive, and reports how many it dropped.
 */
export function fitPrompt(tokens: Int32Array, limit: number, maxTokens: number | undefined, policy: OverflowPolicy): FittedPrompt {
  if (policy === 'error') {
    if (tokens.length >= limit) {
      throw new HttpError(
        400,
        'context_length',
        `The prompt is ${tokens.length} tokens but a sequence of this server's context holds ${limit}; shorten the prompt, start the server with a larger --ctx, or with --overflow truncate-middle`,
      );
    }
    return { tokens, truncatedTokens: 0 };
  }
  const reserve = Math.max(1, Math.min(maxTokens ?? Math.floor(limit / 4), Math.floor(limit / 2)));
  const budget = limit - reserve;
  if (tokens.length <= budget) return { tokens, truncatedTokens: 0 };
  // A cut never splits an image's run of media ids (negative ids, src/engine/media.ts): it moves
  // to the run's edge, so the image is kept whole or dropped whole.
  const inRun = (at: number): boolean => at > 0 && at < tokens.length && tokens[at - 1]! < 0 && tokens[at]! < 0;
  let head = Math.ceil(budget / 2);
  while (inRun(head)) head--;
  let from = tokens.length - (budget - Math.ceil(budget / 2));
  while (inRun(from)) from++;
  const out = new Int32Array(head + tokens.length - from);
  out.set(tokens.subarray(0, head), 0);
  out.set(tokens.subarray(from), head);
  return { tokens: out, truncatedTokens: tokens.length - out.length };
}
