// Exact replay of whole assistant turns, in the three shapes agents send their history in, on the
// zoo qwen35 model (the real Qwen3.5 vocabulary and template, hybrid memory, random weights). A
// reasoning budget and a grammar-forced call make the random model write a known shape: reasoning,
// a forced `</think>` right before `<tool_call>` (the template renders `\n</think>\n\n` there),
// then the call. Expected counts come from the template and the tokenizer: each turn's prompt is
// the previous prompt, the tokens generated, then the template's text after the call (closing,
// tool result, generation prompt). The model's memory is hybrid: its recurrent state resumes at a
// checkpoint, taken when a request ends, which holds every token but the last one generated (the
// call's end marker was sampled and ended the generation, never decoded): that one token is
// prefilled again.
import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/index.js';
import { CHAT_TOOLS, Harness, SYSTEM, TOOLS, assistant, result, userFor, type Json, type Measured } from './turn-replay-fixtures.js';

describe('whole-turn replay in the agent client shapes (zoo qwen35)', () => {
  const h = Harness.setup();

  it('Claude Code-like (/v1/messages, thinking blocks sent back): every later turn prefills only what follows the previous one', async () => {
    const tools = TOOLS.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));
    const messages: Json[] = [{ role: 'user', content: [{ type: 'text', text: userFor('claude') }] }];
    const equivalent: ChatMessage[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: userFor('claude') }];
    const turns: Measured[] = [];
    const after: number[] = [0];
    const replayed = await h.turnMetric('replayed');
    for (let k = 0; k < 3; k++) {
      if (k > 0) after.push(h.afterLastCall(equivalent, { enable_thinking: true }));
      // the last turn only measures its prompt
      const last = k === 2;
      const r = await h.post(
        '/v1/messages',
        { model: 'q', max_tokens: last ? 1 : 200, system: [{ type: 'text', text: SYSTEM }], tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, thinking: { type: 'enabled', budget_tokens: 6 }, messages, temperature: 0 },
        { 'anthropic-version': '2023-06-01' },
      );
      const u = r.usage as Json;
      turns.push({ prompt: u.input_tokens + u.cache_read_input_tokens + (u.cache_creation_input_tokens ?? 0), cached: u.cache_read_input_tokens, generated: u.output_tokens });
      if (last) break;
      const blocks = r.content as Json[];
      expect(blocks.map((b) => b.type)).toEqual(['thinking', 'tool_use']);
      const [thinking, use] = blocks as [Json, Json];
      messages.push({ role: 'assistant', content: blocks });
      messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: result(k) }] });
      equivalent.push(assistant(thinking.thinking, null, { id: use.id, name: use.name, arguments: JSON.stringify(use.input) }));
      equivalent.push({ role: 'tool', toolCallId: use.id, content: result(k) });
    }
    h.expectOnlyNewPrefilled(turns, after);
    // turn 1 replays turn 0; turn 2 replays turns 0 and 1
    expect(await h.turnMetric('replayed')).toBe(replayed + 3);
  });

  async function codex(full: boolean): Promise<void> {
    const tools = TOOLS.map((t) => ({ type: 'function', name: t.name, description: t.description, parameters: t.parameters, strict: false }));
    const user = userFor(full ? 'codex-full' : 'codex');
    const history: Json[] = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: user }] }];
    const equivalent: ChatMessage[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: user }];
    const turns: Measured[] = [];
    const after: number[] = [0];
    let previous: string | undefined;
    let pending: Json[] = history.slice();
    for (let k = 0; k < 3; k++) {
      if (k > 0) after.push(h.afterLastCall(equivalent));
      const last = k === 2;
      const r = await h.post('/v1/responses', {
        model: 'q', instructions: SYSTEM, input: full ? history : pending, tools, tool_choice: 'required', parallel_tool_calls: false,
        max_output_tokens: last ? 1 : 200, temperature: 0, reasoning_budget: 6, store: !full, ...(previous && !full ? { previous_response_id: previous } : {}),
      });
      const u = r.usage as Json;
      turns.push({ prompt: u.input_tokens, cached: u.input_tokens_details.cached_tokens, generated: u.output_tokens });
      if (last) break;
      previous = r.id as string;
      const output = r.output as Json[];
      expect(output.map((o) => o.type)).toEqual(['reasoning', 'function_call']);
      const [reasoning, call] = output as [Json, Json];
      const out = { type: 'function_call_output', call_id: call.call_id, output: result(k) };
      history.push(...output, out);
      pending = [out];
      equivalent.push(assistant((reasoning.content as Json[]).map((c) => c.text as string).join(''), null, { id: call.call_id, name: call.name, arguments: call.arguments }));
      equivalent.push({ role: 'tool', toolCallId: call.call_id, content: result(k) });
    }
    h.expectOnlyNewPrefilled(turns, after);
  }

  it('Codex-like (/v1/responses chained by previous_response_id): every later turn prefills only what follows the previous one', async () => {
    await codex(false);
  });

  it('Codex-like (/v1/responses, the whole item history resent, store: false): the same', async () => {
    await codex(true);
  });

  it('opencode-like (chat completions, reasoning stripped): the turn as the template renders it, the previous prompt reused', async () => {
    const messages = h.start('opencode');
    const first = await h.chatCall(messages);
    const changed = await h.turnMetric('changed');
    const turn1Text = h.render(h.startEquivalent());
    messages.push({ role: 'assistant', content: null, tool_calls: first.message.tool_calls }, { role: 'tool', tool_call_id: first.call.id, content: result(0) });
    const second = await h.post('/v1/chat/completions', { model: 'q', messages, tools: CHAT_TOOLS, tool_choice: 'none', temperature: 0, max_tokens: 1 });
    // The history departs from what the model wrote where its reasoning was: the template's text
    // from there on, tokenized from the end of the previous prompt.
    const text = h.render([...h.startEquivalent(), { role: 'assistant', content: null, toolCalls: [{ id: first.call.id, name: 'Read', arguments: first.call.function.arguments }] }, { role: 'tool', toolCallId: first.call.id, content: result(0) }]);
    expect(text.startsWith(turn1Text)).toBe(true);
    expect(second.usage.prompt_tokens).toBe(first.r.usage.prompt_tokens + h.tokenize(text.slice(turn1Text.length)).length);
    // the checkpoint before the previous prompt's last token
    expect(second.usage.prompt_tokens_details.cached_tokens).toBe(first.r.usage.prompt_tokens - 1);
    expect(await h.turnMetric('changed')).toBe(changed + 1);
  });
});
