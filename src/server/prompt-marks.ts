// Marks in a rendered prompt (prompt-cache breakpoints, cache-breakpoints.ts): a mark is where
// the prompt stops agreeing with renderings of the same conversation altered only after it.
// The prompt worker locates them; the prompt builder turns each into the last token boundary at
// or before it (src/chat/token-offsets.ts), the tokens unchanged.
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

/**
 * The marks of one prompt job. Text-like breakpoints (a block whose text the template copies)
 * are located together by one rendering of `marked`: each such block followed by its own mark
 * text, found once, and the rendering with every mark removed equal to the prompt. Any other
 * mark, or all of them when that check fails, falls back to `variants[k]` (markOffset).
 */
export interface PromptMarks {
  marked?: { variant: MarkVariant; texts: ReadonlyArray<string | undefined> };
  variants: MarkVariant[][];
}

/** Each mark's offset in `text` (-1: not located). */
export function markOffsets(text: string, marks: PromptMarks, render: (v: MarkVariant) => string): number[] {
  const out = marks.variants.map(() => -1);
  const m = marks.marked;
  if (m) {
    let rendered: string | undefined;
    try {
      rendered = render(m.variant);
    } catch {
      rendered = undefined;
    }
    if (rendered !== undefined) {
      const found: Array<{ k: number; at: number; len: number }> = [];
      let complete = true;
      m.texts.forEach((t, k) => {
        if (t === undefined) return;
        const at = rendered!.indexOf(t);
        if (at < 0 || rendered!.indexOf(t, at + 1) >= 0) complete = false;
        else found.push({ k, at, len: t.length });
      });
      found.sort((a, b) => a.at - b.at);
      let stripped = '';
      let pos = 0;
      let removed = 0;
      const offsets: Array<[number, number]> = [];
      for (const f of found) {
        if (f.at < pos) complete = false; // overlapping marks: never
        stripped += rendered.slice(pos, f.at);
        offsets.push([f.k, f.at - removed]);
        removed += f.len;
        pos = f.at + f.len;
      }
      stripped += rendered.slice(pos);
      if (complete && stripped === text) for (const [k, o] of offsets) out[k] = o;
    }
  }
  return out.map((o, k) => (o >= 0 ? o : markOffset(text, marks.variants[k]!, render)));
}
