// Marks in a rendered prompt (prompt-cache breakpoints, cache-breakpoints.ts): a mark is where
// the prompt stops agreeing with renderings of the same conversation altered only after it.
// The prompt worker locates them; the prompt builder tokenizes the prompt in pieces there.
import type { ChatMessage, ChatToolDefinition } from '../chat/types.js';

/** The conversation of a prompt job, altered after a mark. */
export interface MarkVariant {
  messages: ChatMessage[];
  tools: ChatToolDefinition[];
}

/** Where `text` stops agreeing with the renderings of the altered conversations (-1: none rendered). */
export function markOffset(text: string, variants: readonly MarkVariant[], render: (v: MarkVariant) => string): number {
  let at = -1;
  for (const v of variants) {
    let other: string;
    try {
      other = render(v);
    } catch {
      continue; // a template that refuses the altered conversation says nothing of the mark
    }
    const n = Math.min(text.length, other.length);
    let i = 0;
    while (i < n && text.charCodeAt(i) === other.charCodeAt(i)) i++;
    // never inside a surrogate pair
    if (i > 0 && i < text.length && (text.charCodeAt(i - 1) & 0xfc00) === 0xd800) i--;
    at = at < 0 ? i : Math.min(at, i);
  }
  return at;
}
