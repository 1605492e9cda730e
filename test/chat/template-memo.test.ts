// ChatTemplate keeps a small memo of its renders (prompt building renders one prefix per
// replayed assistant turn, and an agent sends the same conversation again one turn longer). A
// memo hit must be the render of exactly those inputs: every input that changes the text
// (messages, tool-call arguments, tools, variables, the generation prompt) gives what a fresh
// template object renders.
import { describe, expect, it } from 'vitest';
import { ChatTemplate, type ChatMessage, type ChatToolDefinition } from '../../src/chat/index.js';
import { readTemplate } from '../server/fixtures.js';

const tools: ChatToolDefinition[] = [
  { name: 'get_weather', description: 'Current weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
];
const otherTools: ChatToolDefinition[] = [
  { name: 'get_weather', description: 'Current weather, in kelvin', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
];
const conversation = (city: string, result = '{"temperature": 18}'): ChatMessage[] => [
  { role: 'system', content: 'You are helpful.' },
  { role: 'user', content: `Weather in ${city}?` },
  { role: 'assistant', content: null, toolCalls: [{ id: 'call_abc123', name: 'get_weather', arguments: JSON.stringify({ city }) }] },
  { role: 'tool', toolCallId: 'call_abc123', content: result },
];

describe('ChatTemplate render memo', () => {
  it('serves a repeated render, and never one of other inputs (each equals a fresh template\'s render)', () => {
    const source = readTemplate('Qwen3.5-4B');
    const memo = new ChatTemplate(source);
    const fresh = () => new ChatTemplate(source);
    const cases: Array<[ChatMessage[], ChatToolDefinition[] | undefined, boolean, Record<string, unknown> | undefined]> = [
      [conversation('Paris'), tools, true, undefined],
      [conversation('Paris'), tools, true, undefined], // repeated: from the memo
      [conversation('Paris').slice(0, 2), tools, true, undefined], // a prefix
      [conversation('Lyon'), tools, true, undefined], // other tool-call arguments
      [conversation('Paris', '{"temperature": 19}'), tools, true, undefined], // other tool result
      [conversation('Paris'), otherTools, true, undefined], // other tool description
      [conversation('Paris'), undefined, true, undefined], // no tools
      [conversation('Paris'), tools, false, undefined], // no generation prompt
      [conversation('Paris'), tools, true, { enable_thinking: false }], // a template variable
    ];
    const texts = cases.map(([m, t, g, v]) => {
      const got = memo.renderUnchecked(m, t, g, v);
      expect(got).toBe(fresh().renderUnchecked(m, t, g, v));
      return got;
    });
    // the inputs that differ do change the text (the comparisons above are not vacuous)
    expect(new Set(texts).size).toBe(texts.length - 1);
    expect(texts[1]).toBe(texts[0]);
  });

});
