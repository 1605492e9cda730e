// Whole-turn replay on the zoo qwen35 model when the history is not what the model wrote, or not
// what the template keeps: edited turns, new user messages (keep_reasoning), plain answers, and
// tenants. Expected counts and outputs come from the template, the tokenizer and a server that
// never saw the conversations (see turn-replay.test.ts for the hybrid model's one re-prefilled token).
import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/index.js';
import { BUDGET, CHAT_TOOLS, Harness, asTenant, assistant, concat, result, type Json } from './turn-replay-fixtures.js';

describe('whole-turn replay of changed histories (zoo qwen35)', () => {
  const h = Harness.setup({ cold: true });

  it('a replayed turn: the prompt is the previous prompt, the generated tokens and the new text, and greedy output equals a cold server given those tokens', async () => {
    const messages = h.start('greedy');
    const first = await h.chatCall(messages);
    const stored = h.server.store.getTurn(`call:${first.call.id}`);
    expect(stored?.tokens.length).toBe(first.r.usage.completion_tokens);
    messages.push({ role: 'assistant', content: null, reasoning_content: first.message.reasoning_content, tool_calls: first.message.tool_calls }, { role: 'tool', tool_call_id: first.call.id, content: result(0) });
    const equivalent: ChatMessage[] = [...h.startEquivalent(), assistant(first.message.reasoning_content, null, { id: first.call.id, name: 'Read', arguments: first.call.function.arguments }), { role: 'tool', toolCallId: first.call.id, content: result(0) }];
    const full = h.render(equivalent);
    const tokens = concat(h.tokenize(h.render(h.startEquivalent()), true), stored!.tokens, h.tokenize(full.slice(full.lastIndexOf('</tool_call>') + '</tool_call>'.length)));
    const r = await h.post('/v1/chat/completions', { model: 'q', messages, tools: CHAT_TOOLS, tool_choice: 'none', temperature: 0, max_tokens: 8 });
    expect(r.usage.prompt_tokens).toBe(tokens.length);
    expect(r.usage.prompt_tokens_details.cached_tokens).toBe(first.r.usage.prompt_tokens + first.r.usage.completion_tokens - 1);
    const m = r.choices[0].message as Json;
    expect(`${m.reasoning_content ?? ''}${m.content ?? ''}`).toBe(await h.coldText(tokens, 8));
  });

  it('an assistant message whose reasoning or content the client edited is not replayed: the template renders it, and the output is a cold server’s from those tokens', async () => {
    const messages = h.start('edited');
    const first = await h.chatCall(messages);
    const edits = [
      { reasoning: 'I will read the test file.', content: null },
      { reasoning: first.message.reasoning_content as string, content: 'Reading it now.' },
    ];
    for (const edit of edits) {
      const changed = await h.turnMetric('changed');
      const replayed = await h.turnMetric('replayed');
      const sent = [...messages, { role: 'assistant', content: edit.content, reasoning_content: edit.reasoning, tool_calls: first.message.tool_calls }, { role: 'tool', tool_call_id: first.call.id, content: result(0) }];
      const prefix = h.render(h.startEquivalent());
      const text = h.render([...h.startEquivalent(), assistant(edit.reasoning, edit.content, { id: first.call.id, name: 'Read', arguments: first.call.function.arguments }), { role: 'tool', toolCallId: first.call.id, content: result(0) }]);
      expect(text.startsWith(prefix)).toBe(true);
      // the template's text, tokenized from where the previous prompt ended
      const tokens = concat(h.tokenize(prefix, true), h.tokenize(text.slice(prefix.length)));
      const r = await h.post('/v1/chat/completions', { model: 'q', messages: sent, tools: CHAT_TOOLS, tool_choice: 'none', temperature: 0, max_tokens: 8 });
      expect(r.usage.prompt_tokens).toBe(tokens.length);
      expect(r.usage.prompt_tokens_details.cached_tokens).toBeLessThanOrEqual(first.r.usage.prompt_tokens);
      const m = r.choices[0].message as Json;
      expect(`${m.reasoning_content ?? ''}${m.content ?? ''}`).toBe(await h.coldText(tokens, 8));
      expect(await h.turnMetric('changed')).toBe(changed + 1);
      expect(await h.turnMetric('replayed')).toBe(replayed);
    }
  });

  it('after a new user message the template drops earlier reasoning (re-prefilled by default); keep_reasoning keeps the turn as generated and reuses its KV', async () => {
    for (const keep of [false, true]) {
      const messages = h.start(`keep-${keep}`);
      const first = await h.chatCall(messages);
      messages.push(
        { role: 'assistant', content: null, reasoning_content: first.message.reasoning_content, tool_calls: first.message.tool_calls },
        { role: 'tool', tool_call_id: first.call.id, content: result(0) },
        { role: 'user', content: 'Now the other file.' },
      );
      const dropped = await h.turnMetric('dropped');
      const equivalent: ChatMessage[] = [
        ...h.startEquivalent(),
        assistant(first.message.reasoning_content, null, { id: first.call.id, name: 'Read', arguments: first.call.function.arguments }),
        { role: 'tool', toolCallId: first.call.id, content: result(0) },
        { role: 'user', content: 'Now the other file.' },
      ];
      const reused = first.r.usage.prompt_tokens + first.r.usage.completion_tokens - 1;
      if (!keep) {
        const second = await h.post('/v1/chat/completions', { model: 'q', messages, tools: CHAT_TOOLS, tool_choice: 'none', temperature: 0, max_tokens: 1 });
        expect(second.usage.prompt_tokens_details.cached_tokens).toBeLessThan(reused);
        expect(await h.turnMetric('dropped')).toBe(dropped + 1);
        continue;
      }
      const second = await h.chatCall(messages, { 'x-llamux-keep-reasoning': 'true' });
      expect(second.r.usage.prompt_tokens).toBe(first.r.usage.prompt_tokens + first.r.usage.completion_tokens + h.afterLastCall(equivalent));
      expect(second.r.usage.prompt_tokens_details.cached_tokens).toBe(reused);
      // A third turn, after a tool result: both earlier turns stay as generated.
      messages.push(
        { role: 'assistant', content: null, reasoning_content: second.message.reasoning_content, tool_calls: second.message.tool_calls },
        { role: 'tool', tool_call_id: second.call.id, content: result(1) },
      );
      equivalent.push(assistant(second.message.reasoning_content, null, { id: second.call.id, name: 'Read', arguments: second.call.function.arguments }), { role: 'tool', toolCallId: second.call.id, content: result(1) });
      const third = await h.post('/v1/chat/completions', { model: 'q', messages, tools: CHAT_TOOLS, tool_choice: 'none', temperature: 0, max_tokens: 1, keep_reasoning: true });
      expect(third.usage.prompt_tokens).toBe(second.r.usage.prompt_tokens + second.r.usage.completion_tokens + h.afterLastCall(equivalent));
      expect(third.usage.prompt_tokens_details.cached_tokens).toBe(second.r.usage.prompt_tokens + second.r.usage.completion_tokens - 1);
    }
  });

  it('an x-llamux-keep-reasoning header other than true or false is a 400', async () => {
    const r = await fetch(`${h.server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-llamux-keep-reasoning': 'yes' },
      body: JSON.stringify({ model: 'q', messages: h.start('bad-header'), max_tokens: 1 }),
    });
    expect(r.status).toBe(400);
    expect(((await r.json()) as Json).error.message).toMatch(/x-llamux-keep-reasoning/);
  });

  it('plain answers (no calls) are known by their text: with keep_reasoning each user turn extends the previous prompt and answer', async () => {
    const messages: Json[] = [{ role: 'user', content: 'Answer with a JSON object.' }];
    const format = { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'object', properties: { a: { enum: ['x', 'y'] } }, required: ['a'], additionalProperties: false } } };
    let prev: Json | undefined;
    let prevText = '';
    for (let k = 0; k < 3; k++) {
      const r = await h.post('/v1/chat/completions', { model: 'q', messages, temperature: 0, max_tokens: 40, response_format: format, chat_template_kwargs: { enable_thinking: false }, keep_reasoning: true });
      expect(r.choices[0].finish_reason).toBe('stop');
      const content = r.choices[0].message.content as string;
      expect(JSON.parse(content)).toHaveProperty('a');
      if (prev) {
        // what follows the answer: the turn's closing, the user message, the generation prompt
        const text = h.template.render(messages as ChatMessage[], { addGenerationPrompt: true, variables: { enable_thinking: false } });
        const tail = text.slice(text.lastIndexOf(prevText) + prevText.length);
        // The answer ended on the end-of-turn token (not counted as generated, rendered by the
        // closing): every generated token was decoded to sample it, so all of them are reused.
        expect(r.usage.prompt_tokens).toBe(prev.usage.prompt_tokens + prev.usage.completion_tokens + h.tokenize(tail).length);
        expect(r.usage.prompt_tokens_details.cached_tokens).toBe(prev.usage.prompt_tokens + prev.usage.completion_tokens);
      }
      prev = r;
      prevText = content;
      messages.push({ role: 'assistant', content }, { role: 'user', content: `Another one (${k}).` });
    }
  });

  it('a turn generated for one tenant is never replayed into another tenant’s prompt', async () => {
    const server = h.cold;
    const messages = h.start('tenants');
    const first = await h.chatCall(messages, asTenant('alice', 'same'), {}, server);
    const { message: m, call } = first;
    messages.push({ role: 'assistant', content: null, reasoning_content: m.reasoning_content, tool_calls: m.tool_calls }, { role: 'tool', tool_call_id: call.id, content: result(0) });
    const equivalent: ChatMessage[] = [...h.startEquivalent(), assistant(m.reasoning_content, null, { id: call.id, name: call.function.name, arguments: call.function.arguments }), { role: 'tool', toolCallId: call.id, content: result(0) }];
    const prefix = h.render(h.startEquivalent());
    const text = h.render(equivalent);
    const measure = { tool_choice: 'none', max_tokens: 1 };
    const theirs = await h.chatCall(messages, asTenant('bob', 'same'), measure, server);
    // Bob's prompt is the template's rendering of the turn (its exact tokens are Alice's), and
    // nothing of Alice's KV is reused.
    expect(theirs.r.usage.prompt_tokens).toBe(h.tokenize(prefix, true).length + h.tokenize(text.slice(prefix.length)).length);
    expect(theirs.r.usage.prompt_tokens_details.cached_tokens).toBe(0);
    const mine = await h.chatCall(messages, asTenant('alice', 'same'), measure, server);
    expect(mine.r.usage.prompt_tokens).toBe(first.r.usage.prompt_tokens + first.r.usage.completion_tokens + h.afterLastCall(equivalent));
    expect(mine.r.usage.prompt_tokens_details.cached_tokens).toBe(first.r.usage.prompt_tokens + first.r.usage.completion_tokens - 1);
  });
});
