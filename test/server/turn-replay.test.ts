// Exact replay of whole assistant turns, in the three shapes agents send their history in, on the
// zoo qwen35 model (the real Qwen3.5 vocabulary and template, hybrid memory, random weights). A
// reasoning budget and a grammar-forced call make the random model write a known shape: reasoning,
// a forced `</think>` right before `<tool_call>` (the template renders `\n</think>\n\n` there),
// then the call. Expected counts come from the template and the tokenizer: each turn's prompt is
// the previous prompt, the tokens generated, then the template's text after the call (closing,
// tool result, generation prompt). The model's memory is hybrid: its recurrent state resumes at a
// checkpoint, taken when a request ends, which holds every token but the last one generated (it
// was sampled, never decoded): that one token is prefilled again.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate, loadModel, type ChatMessage, type ChatToolDefinition, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { tempDir } from '../helpers/paths.js';
import { zooModels } from '../helpers/zoo.js';

type Json = Record<string, any>;

const SYSTEM = 'You are a coding agent. Think briefly, then call one tool.';
const USER = 'Read the file with the failing test.';
const TOOLS: ChatToolDefinition[] = [
  { name: 'Read', description: 'Read a file.', parameters: { type: 'object', properties: { path: { type: 'string', description: 'The absolute path.', enum: ['/a.ts', '/b.ts'] } }, required: ['path'] } },
];
const BUDGET = 6;
/** A user request of its own per test: no test's conversation shares KV with another's. */
const userFor = (what: string): string => `${USER} (${what})`;
const result = (k: number): string => JSON.stringify({ status: 'ok', step: k, output: 'the test lists each case and its status' });

describe('whole-turn replay on the zoo qwen35 model', () => {
  let model: Model;
  let template: ChatTemplate;
  let server: LlamuxServer;
  /** A second server whose KV never saw these conversations. */
  let cold: LlamuxServer;

  beforeAll(async () => {
    const zoo = await zooModels(['qwen35']);
    model = await loadModel(zoo.qwen35.path);
    template = ChatTemplate.fromModel(model);
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1, storePath: join(tempDir('turn-replay'), 'store.sqlite'), log: () => {} });
    cold = await createServer({ model, port: 0, ctx: 4096, parallel: 1, threads: 1, log: () => {} });
  });
  afterAll(async () => {
    await server?.close();
    await cold?.close();
    await model?.dispose();
  });

  async function post(path: string, body: Json, headers: Record<string, string> = {}, on = server): Promise<Json> {
    const r = await fetch(`${on.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const j = (await r.json()) as Json;
    if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(j)}`);
    return j;
  }

  async function turnMetric(outcome: string): Promise<number> {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const m = new RegExp(`^llamux_turn_replay_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text);
    return m ? Number(m[1]) : 0;
  }

  const tokenize = (text: string, first = false): Int32Array => model.tokenize(text, { addSpecial: first, parseSpecial: true });
  const render = (messages: ChatMessage[], variables?: Record<string, unknown>): string =>
    template.render(messages, { tools: TOOLS, addGenerationPrompt: true, ...(variables ? { variables } : {}) });
  /** Tokens of the template's text after the last call of the conversation (its turn's closing, the tool results, the generation prompt). */
  const afterLastCall = (messages: ChatMessage[], variables?: Record<string, unknown>): number => {
    const text = render(messages, variables);
    const end = text.lastIndexOf('</tool_call>') + '</tool_call>'.length;
    return tokenize(text.slice(end)).length;
  };
  const assistant = (reasoning: string, content: string | null, call: { id: string; name: string; arguments: string }): ChatMessage => ({
    role: 'assistant',
    content,
    ...(reasoning ? { reasoningContent: reasoning } : {}),
    toolCalls: [call],
  });

  /** Each turn k >= 1 prompt = turn k-1's prompt + its generated tokens + the text after its call; all but one generated token reused. */
  function expectOnlyNewPrefilled(turns: Array<{ prompt: number; cached: number; generated: number }>, after: number[]): void {
    for (let k = 1; k < turns.length; k++) {
      const prev = turns[k - 1]!;
      expect({ k, prompt: turns[k]!.prompt }).toEqual({ k, prompt: prev.prompt + prev.generated + after[k]! });
      expect({ k, cached: turns[k]!.cached }).toEqual({ k, cached: prev.prompt + prev.generated - 1 });
    }
  }

  it('Claude Code-like (/v1/messages, thinking blocks sent back): every later turn prefills only what follows the previous one', async () => {
    const tools = TOOLS.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));
    const messages: Json[] = [{ role: 'user', content: [{ type: 'text', text: userFor('claude') }] }];
    const equivalent: ChatMessage[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: userFor('claude') }];
    const turns: Array<{ prompt: number; cached: number; generated: number }> = [];
    const after: number[] = [0];
    const replayed = await turnMetric('replayed');
    for (let k = 0; k < 3; k++) {
      if (k > 0) after.push(afterLastCall(equivalent, { enable_thinking: true }));
      const r = await post(
        '/v1/messages',
        { model: 'q', max_tokens: 200, system: [{ type: 'text', text: SYSTEM }], tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, thinking: { type: 'enabled', budget_tokens: BUDGET }, messages, temperature: 0 },
        { 'anthropic-version': '2023-06-01' },
      );
      const u = r.usage as Json;
      turns.push({ prompt: u.input_tokens + u.cache_read_input_tokens + (u.cache_creation_input_tokens ?? 0), cached: u.cache_read_input_tokens, generated: u.output_tokens });
      const blocks = r.content as Json[];
      expect(blocks.map((b) => b.type)).toEqual(['thinking', 'tool_use']);
      const [thinking, use] = blocks as [Json, Json];
      messages.push({ role: 'assistant', content: blocks });
      messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: result(k) }] });
      equivalent.push(assistant(thinking.thinking, null, { id: use.id, name: use.name, arguments: JSON.stringify(use.input) }));
      equivalent.push({ role: 'tool', toolCallId: use.id, content: result(k) });
    }
    expectOnlyNewPrefilled(turns, after);
    expect(await turnMetric('replayed')).toBe(replayed + 1 + 2);
  });

  async function codex(full: boolean): Promise<void> {
    const tools = TOOLS.map((t) => ({ type: 'function', name: t.name, description: t.description, parameters: t.parameters, strict: false }));
    const user = userFor(full ? 'codex-full' : 'codex');
    const history: Json[] = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: user }] }];
    const equivalent: ChatMessage[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: user }];
    const turns: Array<{ prompt: number; cached: number; generated: number }> = [];
    const after: number[] = [0];
    let previous: string | undefined;
    let pending: Json[] = history.slice();
    for (let k = 0; k < 3; k++) {
      if (k > 0) after.push(afterLastCall(equivalent));
      const r = await post('/v1/responses', {
        model: 'q', instructions: SYSTEM, input: full ? history : pending, tools, tool_choice: 'required', parallel_tool_calls: false,
        max_output_tokens: 200, temperature: 0, reasoning_budget: BUDGET, store: !full, ...(previous && !full ? { previous_response_id: previous } : {}),
      });
      const u = r.usage as Json;
      turns.push({ prompt: u.input_tokens, cached: u.input_tokens_details.cached_tokens, generated: u.output_tokens });
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
    expectOnlyNewPrefilled(turns, after);
  }

  it('Codex-like (/v1/responses chained by previous_response_id): every later turn prefills only what follows the previous one', async () => {
    await codex(false);
  });

  it('Codex-like (/v1/responses, the whole item history resent, store: false): the same', async () => {
    await codex(true);
  });

  /** Turn 1 of a chat conversation: a forced call after a reasoning budget. */
  async function chatTurn1(messages: Json[], headers: Record<string, string> = {}): Promise<{ r: Json; message: Json; call: Json }> {
    const r = await post('/v1/chat/completions', { model: 'q', messages, tools: TOOLS.map((t) => ({ type: 'function', function: t })), tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: 200, reasoning_budget: BUDGET }, headers);
    const message = r.choices[0].message as Json;
    expect(message.tool_calls).toHaveLength(1);
    return { r, message, call: message.tool_calls[0] };
  }

  let conversation = '';
  const start = (what: string): Json[] => {
    conversation = what;
    return [{ role: 'system', content: SYSTEM }, { role: 'user', content: userFor(what) }];
  };
  const startEquivalent = (): ChatMessage[] => [{ role: 'system', content: SYSTEM }, { role: 'user', content: userFor(conversation) }];

  it('opencode-like (chat completions, reasoning stripped): the turn the template renders, reused up to the previous prompt', async () => {
    const messages = start('opencode');
    const first = await chatTurn1(messages);
    const changed = await turnMetric('changed');
    const turn1Text = render(startEquivalent());
    messages.push({ role: 'assistant', content: null, tool_calls: first.message.tool_calls }, { role: 'tool', tool_call_id: first.call.id, content: result(0) });
    const second = await chatTurn1(messages);
    // The history departs from what the model wrote where its reasoning was: the template's
    // text from there on, tokenized from the end of the previous prompt.
    const text = render([...startEquivalent(), { role: 'assistant', content: null, toolCalls: [{ id: first.call.id, name: 'Read', arguments: first.call.function.arguments }] }, { role: 'tool', toolCallId: first.call.id, content: result(0) }]);
    expect(text.startsWith(turn1Text)).toBe(true);
    expect(second.r.usage.prompt_tokens).toBe(first.r.usage.prompt_tokens + tokenize(text.slice(turn1Text.length)).length);
    expect(second.r.usage.prompt_tokens_details.cached_tokens).toBe(first.r.usage.prompt_tokens - 1);
    expect(await turnMetric('changed')).toBe(changed + 1);
  });

  /** Greedy text of a server that never saw the generated turns, from these prompt tokens. */
  async function coldText(tokens: ArrayLike<number>, maxTokens: number): Promise<string> {
    // every generated token's text (the completion's `text` leaves out a reasoning span the prompt opened)
    const r = await post('/v1/completions', { model: 'q', prompt: Array.from(tokens), max_tokens: maxTokens, temperature: 0, logprobs: 1 }, {}, cold);
    return (r.choices[0].logprobs.tokens as string[]).join('');
  }

  const concat = (...parts: ArrayLike<number>[]): number[] => parts.flatMap((p) => Array.from(p));

  it('a replayed turn: the prompt is the previous prompt, the generated tokens and the new text, and greedy output equals a cold server given those tokens', async () => {
    const messages = start('greedy');
    const first = await chatTurn1(messages);
    const stored = server.store.getTurn(`call:${first.call.id}`);
    expect(stored?.tokens.length).toBe(first.r.usage.completion_tokens);
    messages.push({ role: 'assistant', content: null, reasoning_content: first.message.reasoning_content, tool_calls: first.message.tool_calls }, { role: 'tool', tool_call_id: first.call.id, content: result(0) });
    const equivalent: ChatMessage[] = [...startEquivalent(), assistant(first.message.reasoning_content, null, { id: first.call.id, name: 'Read', arguments: first.call.function.arguments }), { role: 'tool', toolCallId: first.call.id, content: result(0) }];
    const full = render(equivalent);
    const tokens = concat(tokenize(render(startEquivalent()), true), stored!.tokens, tokenize(full.slice(full.lastIndexOf('</tool_call>') + '</tool_call>'.length)));
    const r = await post('/v1/chat/completions', { model: 'q', messages, tools: TOOLS.map((t) => ({ type: 'function', function: t })), tool_choice: 'none', temperature: 0, max_tokens: 8 });
    expect(r.usage.prompt_tokens).toBe(tokens.length);
    expect(r.usage.prompt_tokens_details.cached_tokens).toBe(first.r.usage.prompt_tokens + first.r.usage.completion_tokens - 1);
    const m = r.choices[0].message as Json;
    expect(`${m.reasoning_content ?? ''}${m.content ?? ''}`).toBe(await coldText(tokens, 8));
  });

  it('an assistant message whose reasoning or content the client edited is not replayed: the template renders it, and the output is a cold server’s from those tokens', async () => {
    const messages = start('edited');
    const first = await chatTurn1(messages);
    const edits = [
      { reasoning: 'I will read the test file.', content: null },
      { reasoning: first.message.reasoning_content as string, content: 'Reading it now.' },
    ];
    for (const edit of edits) {
      const changed = await turnMetric('changed');
      const replayed = await turnMetric('replayed');
      const sent = [...messages, { role: 'assistant', content: edit.content, reasoning_content: edit.reasoning, tool_calls: first.message.tool_calls }, { role: 'tool', tool_call_id: first.call.id, content: result(0) }];
      const prefix = render(startEquivalent());
      const text = render([...startEquivalent(), assistant(edit.reasoning, edit.content, { id: first.call.id, name: 'Read', arguments: first.call.function.arguments }), { role: 'tool', toolCallId: first.call.id, content: result(0) }]);
      expect(text.startsWith(prefix)).toBe(true);
      // the template's text, tokenized from where the previous prompt ended
      const tokens = concat(tokenize(prefix, true), tokenize(text.slice(prefix.length)));
      const r = await post('/v1/chat/completions', { model: 'q', messages: sent, tools: TOOLS.map((t) => ({ type: 'function', function: t })), tool_choice: 'none', temperature: 0, max_tokens: 8 });
      expect(r.usage.prompt_tokens).toBe(tokens.length);
      expect(r.usage.prompt_tokens_details.cached_tokens).toBeLessThanOrEqual(first.r.usage.prompt_tokens);
      const m = r.choices[0].message as Json;
      expect(`${m.reasoning_content ?? ''}${m.content ?? ''}`).toBe(await coldText(tokens, 8));
      expect(await turnMetric('changed')).toBe(changed + 1);
      expect(await turnMetric('replayed')).toBe(replayed);
    }
  });

  it('after a new user message the template drops earlier reasoning (re-prefilled by default); keep_reasoning keeps the turn as generated and reuses its KV', async () => {
    for (const keep of [false, true]) {
      const messages = start(`keep-${keep}`);
      const first = await chatTurn1(messages);
      messages.push(
        { role: 'assistant', content: null, reasoning_content: first.message.reasoning_content, tool_calls: first.message.tool_calls },
        { role: 'tool', tool_call_id: first.call.id, content: result(0) },
        { role: 'user', content: 'Now the other file.' },
      );
      const dropped = await turnMetric('dropped');
      const equivalent: ChatMessage[] = [
        ...startEquivalent(),
        assistant(first.message.reasoning_content, null, { id: first.call.id, name: 'Read', arguments: first.call.function.arguments }),
        { role: 'tool', toolCallId: first.call.id, content: result(0) },
        { role: 'user', content: 'Now the other file.' },
      ];
      const second = await chatTurn1(messages, keep ? { 'x-llamux-keep-reasoning': 'true' } : {});
      const reused = first.r.usage.prompt_tokens + first.r.usage.completion_tokens - 1;
      if (!keep) {
        expect(second.r.usage.prompt_tokens_details.cached_tokens).toBeLessThan(reused);
        expect(await turnMetric('dropped')).toBe(dropped + 1);
        continue;
      }
      expect(second.r.usage.prompt_tokens).toBe(first.r.usage.prompt_tokens + first.r.usage.completion_tokens + afterLastCall(equivalent));
      expect(second.r.usage.prompt_tokens_details.cached_tokens).toBe(reused);
      // A third turn, after a tool result: both earlier turns stay as generated.
      messages.push(
        { role: 'assistant', content: null, reasoning_content: second.message.reasoning_content, tool_calls: second.message.tool_calls },
        { role: 'tool', tool_call_id: second.call.id, content: result(1) },
      );
      equivalent.push(assistant(second.message.reasoning_content, null, { id: second.call.id, name: 'Read', arguments: second.call.function.arguments }), { role: 'tool', toolCallId: second.call.id, content: result(1) });
      const third = await post('/v1/chat/completions', { model: 'q', messages, tools: TOOLS.map((t) => ({ type: 'function', function: t })), tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: 200, reasoning_budget: BUDGET, keep_reasoning: true });
      expect(third.usage.prompt_tokens).toBe(second.r.usage.prompt_tokens + second.r.usage.completion_tokens + afterLastCall(equivalent));
      expect(third.usage.prompt_tokens_details.cached_tokens).toBe(second.r.usage.prompt_tokens + second.r.usage.completion_tokens - 1);
    }
  });

  it('plain answers (no calls) are known by their text: with keep_reasoning each user turn extends the previous prompt and answer', async () => {
    const messages: Json[] = [{ role: 'user', content: 'Answer with a JSON object.' }];
    const format = { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'object', properties: { a: { enum: ['x', 'y'] } }, required: ['a'], additionalProperties: false } } };
    let prev: Json | undefined;
    let prevText = '';
    for (let k = 0; k < 3; k++) {
      const r = await post('/v1/chat/completions', { model: 'q', messages, temperature: 0, max_tokens: 40, response_format: format, chat_template_kwargs: { enable_thinking: false }, keep_reasoning: true });
      expect(r.choices[0].finish_reason).toBe('stop');
      const content = r.choices[0].message.content as string;
      expect(JSON.parse(content)).toHaveProperty('a');
      if (prev) {
        // what follows the answer: the turn's closing, the user message, the generation prompt
        const text = template.render(messages as ChatMessage[], { addGenerationPrompt: true, variables: { enable_thinking: false } });
        const tail = text.slice(text.lastIndexOf(prevText) + prevText.length);
        // The answer ended on the end-of-turn token (not counted as generated, rendered by the
        // closing): every generated token was decoded to sample it, so all of them are reused.
        expect(r.usage.prompt_tokens).toBe(prev.usage.prompt_tokens + prev.usage.completion_tokens + tokenize(tail).length);
        expect(r.usage.prompt_tokens_details.cached_tokens).toBe(prev.usage.prompt_tokens + prev.usage.completion_tokens);
      }
      prev = r;
      prevText = content;
      messages.push({ role: 'assistant', content }, { role: 'user', content: `Another one (${k}).` });
    }
  });
});

describe('whole-turn replay between tenants', () => {
  it('a turn generated for one tenant is never replayed into another tenant’s prompt', async () => {
    const zoo = await zooModels(['qwen35']);
    const model = await loadModel(zoo.qwen35.path);
    const server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1, apiKey: 'k', isolateTenants: true, log: () => {} });
    try {
      const post = async (body: Json, tenant: string): Promise<Json> => {
        const r = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer k', 'x-llamux-tenant': tenant, 'x-llamux-conversation': 'same' }, body: JSON.stringify(body) });
        expect(r.status).toBe(200);
        return (await r.json()) as Json;
      };
      const template = ChatTemplate.fromModel(model);
      const tokenize = (text: string, first = false): Int32Array => model.tokenize(text, { addSpecial: first, parseSpecial: true });
      const ask = { model: 'q', tools: TOOLS.map((t) => ({ type: 'function', function: t })), tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: 200, reasoning_budget: BUDGET };
      const messages: Json[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: USER }];
      const first = await post({ ...ask, messages }, 'alice');
      const m = first.choices[0].message as Json;
      messages.push({ role: 'assistant', content: null, reasoning_content: m.reasoning_content, tool_calls: m.tool_calls }, { role: 'tool', tool_call_id: m.tool_calls[0].id, content: result(0) });
      const call = m.tool_calls[0];
      const equivalent: ChatMessage[] = [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: USER },
        { role: 'assistant', content: null, reasoningContent: m.reasoning_content, toolCalls: [{ id: call.id, name: call.function.name, arguments: call.function.arguments }] },
        { role: 'tool', toolCallId: call.id, content: result(0) },
      ];
      const prefix = template.render(equivalent.slice(0, 2), { tools: TOOLS, addGenerationPrompt: true });
      const text = template.render(equivalent, { tools: TOOLS, addGenerationPrompt: true });
      const theirs = await post({ ...ask, messages }, 'bob');
      // Bob's prompt is the template's rendering of the turn (its exact tokens are Alice's), and
      // nothing of Alice's KV is reused.
      expect(theirs.usage.prompt_tokens).toBe(tokenize(prefix, true).length + tokenize(text.slice(prefix.length)).length);
      expect(theirs.usage.prompt_tokens_details.cached_tokens).toBe(0);
      const mine = await post({ ...ask, messages }, 'alice');
      expect(mine.usage.prompt_tokens).toBe(first.usage.prompt_tokens + first.usage.completion_tokens + tokenize(text.slice(text.lastIndexOf('</tool_call>') + '</tool_call>'.length)).length);
      expect(mine.usage.prompt_tokens_details.cached_tokens).toBe(first.usage.prompt_tokens + first.usage.completion_tokens - 1);
    } finally {
      await server.close();
      await model.dispose();
    }
  });
});
