// Locating prompt-cache breakpoints in a rendered prompt (src/server/prompt-marks.ts,
// cache-breakpoints.ts), on a plain renderer: one rendering finds every text-like breakpoint
// when the template copies the text, the per-breakpoint variants find it when the template
// transforms the text (here: trims it), and a conversation the template renders differently
// after the block gives the position where the renderings stop agreeing.
import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/chat/types.js';
import { collectBreakpoints, promptMarks, type CacheableRequest, type ToChat } from '../../src/server/cache-breakpoints.js';
import { markOffsets, type MarkVariant } from '../../src/server/prompt-marks.js';

const toChat: ToChat = (r) => {
  const messages: ChatMessage[] = [];
  if (r.system !== undefined) messages.push({ role: 'system', content: typeof r.system === 'string' ? r.system : r.system.map((b) => b.text).join('') });
  for (const m of r.messages) {
    const text = typeof m.content === 'string' ? m.content : m.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    messages.push(m.role === 'user' ? { role: 'user', content: text } : { role: 'assistant', content: text });
  }
  return { messages, tools: [] };
};

/** A ChatML-like renderer; `trim` strips each content as some templates do. */
const renderer = (trim: boolean) => (v: MarkVariant) =>
  v.messages.map((m) => `<|${m.role}|>${trim ? String(m.content ?? '').trim() : String(m.content ?? '')}<|end|>`).join('') + '<|assistant|>';

const request: CacheableRequest = {
  system: [
    { type: 'text', text: 'Shared rules. ', cache_control: { type: 'ephemeral' } },
    { type: 'text', text: 'Per conversation.' },
  ],
  messages: [
    { role: 'user', content: [{ type: 'text', text: 'A long document.  ', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'The question?' }] },
  ],
};

describe('locating cache_control breakpoints in the rendered prompt', () => {
  const bps = collectBreakpoints(request, toChat);
  const marks = promptMarks(request, bps, toChat);

  it('finds every text-like breakpoint in one rendering when the template copies the text', () => {
    const render = renderer(false);
    const text = render(toChat(request));
    let renders = 0;
    const offsets = markOffsets(text, marks, (v) => {
      renders++;
      return render(v);
    });
    expect(renders).toBe(1);
    expect(offsets).toEqual([text.indexOf('Per conversation.'), text.indexOf('The question?')]);
  });

  it('falls back to the variants when the template transforms the text, and still ends at the rendered block', () => {
    // a breakpoint at the end of a content the template trims: the mark keeps the spaces
    const trimmed: CacheableRequest = { ...request, messages: [{ role: 'user', content: [{ type: 'text', text: 'The question?  ', cache_control: { type: 'ephemeral' } }] }] };
    const tb = collectBreakpoints(trimmed, toChat);
    const render = renderer(true);
    const text = render(toChat(trimmed));
    let renders = 0;
    const offsets = markOffsets(text, promptMarks(trimmed, tb, toChat), (v) => {
      renders++;
      return render(v);
    });
    expect(renders).toBe(1 + 2 * 2); // the combined rendering that does not strip back, then A and B for each
    expect(offsets).toEqual([text.indexOf('Per conversation.'), text.indexOf('The question?') + 'The question?'.length]);
  });

  it('gives no position when no rendering of the variants succeeds', () => {
    const text = renderer(false)(toChat(request));
    expect(markOffsets(text, { variants: marks.variants }, () => {
      throw new Error('template refused');
    })).toEqual([-1, -1]);
  });
});
