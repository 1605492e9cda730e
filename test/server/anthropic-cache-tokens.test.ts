// A cache_control breakpoint never changes the prompt's tokens. The first landing tokenized the
// prompt in pieces cut at each breakpoint; on the real Qwen3.5 vocabulary (zoo qwen35) a tool
// result's closing `"}` and the template's newline after it are one token, so the cut prompt had
// one token more, and the next turn (its breakpoint moved on, as Claude Code moves it) departed
// from the conversation's KV there. Now the prompt is tokenized whole and each breakpoint is the
// last token boundary at or before its block's end. Expected numbers come from the tokenizer
// (the server's /tokenize and the model's detokenize), never from the breakpoint code.
import type Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildChatPrompt } from '../../src/chat/prompt.js';
import { ChatTemplate } from '../../src/chat/template.js';
import type { ChatMessage, ChatToolDefinition } from '../../src/chat/types.js';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { zooModels } from '../helpers/zoo.js';
import { anthropicFor } from './clients.js';

const EPHEMERAL = { type: 'ephemeral' as const };
const RESULT = JSON.stringify({ status: 'ok', step: 0, output: 'the test file lists each case and its status' });
const TOOL = { name: 'Read', description: 'Read a file of the repository.', input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } };
const CHAT_TOOLS: ChatToolDefinition[] = [{ name: TOOL.name, description: TOOL.description, parameters: TOOL.input_schema }];

/** The conversation as the server renders it (anthropicToChatMessages): blocks joined, tool_use as calls, tool_result as tool messages. */
function chatOf(system: string, turns: Array<{ user: string; call?: boolean; result?: boolean; reply?: string }>): ChatMessage[] {
  const out: ChatMessage[] = [{ role: 'system', content: system }];
  turns.forEach((t, i) => {
    if (t.user) out.push({ role: 'user', content: t.user });
    if (t.call) out.push({ role: 'assistant', content: null, toolCalls: [{ id: `toolu_${i}`, name: 'Read', arguments: { path: '/a.ts' } }] });
    if (t.result) out.push({ role: 'tool', toolCallId: `toolu_${i}`, content: RESULT });
    if (t.reply) out.push({ role: 'assistant', content: t.reply });
  });
  return out;
}

const common = (o: Record<string, unknown>) => ({ model: 'qwen35', max_tokens: 2, temperature: 0, tools: [TOOL], ...o }) as unknown as Anthropic.MessageCreateParamsNonStreaming;

/** Turn 1 as Claude Code sends it: breakpoints on the system block and on the last block (a tool result); one more mid-word. */
function turn1(system: string, cached = true): Anthropic.MessageCreateParamsNonStreaming {
  const cc = cached ? { cache_control: EPHEMERAL } : {};
  return common({
    system: [{ type: 'text', text: system, ...cc }],
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'Explain the naï', ...cc }, { type: 'text', text: 've approach, then fix the test.' }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_0', name: 'Read', input: { path: '/a.ts' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_0', content: RESULT, ...cc }] },
    ],
  });
}
const turn1Chat = (system: string) => chatOf(system, [{ user: 'Explain the naïve approach, then fix the test.', call: true, result: true }]);

describe('cache_control breakpoints leave the tokens alone (zoo qwen35: the real Qwen3.5 vocabulary and template)', () => {
  let model: Model;
  let server: LlamuxServer;
  let anthropic: Anthropic;
  let template: ChatTemplate;

  const render = (messages: ChatMessage[], tools = CHAT_TOOLS) => template.render(messages, { tools, addGenerationPrompt: true });
  async function tokenize(content: string): Promise<number[]> {
    const res = await fetch(`${server.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content, add_special: true, parse_special: true }) });
    expect(res.status).toBe(200);
    return ((await res.json()) as { tokens: number[] }).tokens;
  }
  /** Tokens of the whole prompt that the prefix up to `at` shares: the last token boundary at or before `at`. */
  async function boundary(text: string, at: number): Promise<{ at: number; cutTokens: number }> {
    const whole = await tokenize(text);
    const cut = await tokenize(text.slice(0, at));
    let i = 0;
    while (i < whole.length && i < cut.length && whole[i] === cut[i]) i++;
    return { at: i, cutTokens: cut.length };
  }
  const countTokens = async (body: Anthropic.MessageCreateParamsNonStreaming) => (await anthropic.messages.countTokens({ model: body.model, system: body.system!, messages: body.messages, tools: body.tools! })).input_tokens;
  const stripped = (body: Anthropic.MessageCreateParamsNonStreaming) => JSON.parse(JSON.stringify(body, (k, v) => (k === 'cache_control' ? undefined : v))) as Anthropic.MessageCreateParamsNonStreaming;

  beforeAll(async () => {
    model = await loadModel((await zooModels(['qwen35'])).qwen35.path);
    server = await createServer({ model, port: 0, ctx: 2048, parallel: 1, threads: 1, log: () => {} });
    anthropic = anthropicFor(server);
    template = ChatTemplate.fromModel(model);
  });
  afterAll(async () => {
    await server?.close();
    await model?.dispose();
  });

  it('the prompt builder: marks leave the tokens unchanged, each at the last token boundary at or before it', () => {
    const messages = turn1Chat('You are a coding agent.');
    const text = render(messages);
    const end = text.lastIndexOf(RESULT) + RESULT.length; // the tool result's end: `"}` merges with the newline after it
    const mid = text.indexOf('naï') + 'naï'.length; // inside a word
    const clean = text.indexOf('You are a coding agent.') + 'You are a coding agent.'.length; // before <|im_end|>
    const plain = buildChatPrompt(model, messages, { template, tools: CHAT_TOOLS });
    const marked = buildChatPrompt(model, messages, { template, tools: CHAT_TOOLS, marks: () => [clean, mid, end] });
    expect([...marked.tokens]).toEqual([...plain.tokens]);
    // the old cut really changes this prompt's tokens: the text up to the tool result's end alone ends in another token
    const cutTokens = model.tokenize(text.slice(0, end), { addSpecial: true, parseSpecial: true });
    expect([...cutTokens.slice(0, -1)]).toEqual([...plain.tokens.slice(0, cutTokens.length - 1)]);
    expect(cutTokens[cutTokens.length - 1]).not.toBe(plain.tokens[cutTokens.length - 1]);
    // expected from the tokenizer: the longest token prefix whose text lies within the text up to each mark
    const within = (at: number): number => {
      let k = 0;
      while (k < plain.tokens.length && text.slice(0, at).startsWith(model.detokenize(plain.tokens.subarray(0, k + 1), { special: true }))) k++;
      return k;
    };
    expect(marked.markTokens).toEqual([within(clean), within(mid), within(end)]);
    expect(marked.markTokens[2]).toBe(cutTokens.length - 1); // one token short of the cut: the merged token is left out
    expect(marked.markTokens[0]).toBe(model.tokenize(text.slice(0, clean), { addSpecial: true, parseSpecial: true }).length); // a clean boundary: exact
  });

  it('count_tokens is the same with and without breakpoints, and the breakpoint written is the last token boundary before the block end', async () => {
    const system = 'You are a coding agent working in a TypeScript repository. Think briefly, then call one tool.';
    const body = turn1(system);
    const text = render(turn1Chat(system));
    const total = (await tokenize(text)).length;
    expect(await countTokens(body)).toBe(total);
    expect(await countTokens(stripped(body))).toBe(total);
    const b = await boundary(text, text.lastIndexOf(RESULT) + RESULT.length);
    expect(b.at).toBe(b.cutTokens - 1); // the merge: a cut there would have added a token

    const m = await anthropic.messages.create(body).withResponse();
    const u = m.data.usage;
    expect(m.response.headers.get('x-llamux-cache-retention')).toBe('kept');
    expect(u.input_tokens + u.cache_creation_input_tokens! + u.cache_read_input_tokens!).toBe(total);
    expect(u.cache_creation_input_tokens! + u.cache_read_input_tokens!).toBe(b.at);

    // Turn 2 as Claude Code sends it: the model's call and its result appended, the breakpoint
    // moved to the new result. The prefix kept at turn 1's breakpoint is the same tokens in this
    // prompt, so it is read (the first landing's cut prompt shared none of it past the system block).
    const body2 = common({
      system: body.system,
      messages: [
        ...stripped(body).messages,
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Read', input: { path: '/a.ts' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: RESULT, cache_control: EPHEMERAL }] },
      ],
    });
    const text2 = render(chatOf(system, [{ user: 'Explain the naïve approach, then fix the test.', call: true, result: true }, { user: '', call: true, result: true }]));
    expect(text2.startsWith(text.slice(0, text.lastIndexOf(RESULT) + RESULT.length))).toBe(true);
    const total2 = (await tokenize(text2)).length;
    expect(await countTokens(body2)).toBe(total2);
    const u2 = (await anthropic.messages.create(body2)).usage;
    expect(u2.input_tokens + u2.cache_creation_input_tokens! + u2.cache_read_input_tokens!).toBe(total2);
    expect(u2.cache_read_input_tokens).toBeGreaterThanOrEqual(b.at);
    const b2 = await boundary(text2, text2.lastIndexOf(RESULT) + RESULT.length);
    expect(u2.cache_creation_input_tokens! + u2.cache_read_input_tokens!).toBe(b2.at);
  });

  it('a breakpoint inside a word (two text blocks joined) sits before the token that spans it', async () => {
    const system = 'You review pull requests for a small team.';
    const body = common({
      system,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Explain the naï', cache_control: EPHEMERAL }, { type: 'text', text: 've approach, then fix the test.' }] }],
    });
    const text = render(chatOf(system, [{ user: 'Explain the naïve approach, then fix the test.' }]));
    expect(await countTokens(body)).toBe(await countTokens(stripped(body)));
    const b = await boundary(text, text.indexOf('naï') + 'naï'.length);
    const u = (await anthropic.messages.create(body)).usage;
    expect(u.cache_creation_input_tokens! + u.cache_read_input_tokens!).toBe(b.at);
  });

  it('a top-level cache_control (automatic caching) is a breakpoint on the last block, string contents too', async () => {
    for (const [i, last] of [['tool_result', RESULT], ['string', 'Weather in Paris?']] as const) {
      const system = `You are assistant number ${i === 'tool_result' ? 'one' : 'two'} of the weather desk.`;
      const messages: Anthropic.MessageParam[] =
        i === 'tool_result'
          ? [
              { role: 'user', content: 'Read the file.' },
              { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_0', name: 'Read', input: { path: '/a.ts' } }] },
              { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_0', content: RESULT }] },
            ]
          : [{ role: 'user', content: last }];
      const chat = i === 'tool_result' ? chatOf(system, [{ user: 'Read the file.', call: true, result: true }]) : chatOf(system, [{ user: last }]);
      const text = render(chat);
      const b = await boundary(text, text.lastIndexOf(last) + last.length);
      const r = await anthropic.messages.create({ ...common({ system, messages }), cache_control: EPHEMERAL } as Anthropic.MessageCreateParamsNonStreaming).withResponse();
      expect(r.response.headers.get('x-llamux-cache-retention'), i).toBe('kept');
      expect(r.data.usage.cache_creation_input_tokens! + r.data.usage.cache_read_input_tokens!, i).toBe(b.at);
      expect(r.data.usage.input_tokens + b.at, i).toBe((await tokenize(text)).length);
    }
  });

  it('a top-level cache_control counts toward the 4, is checked like the others, and defers to the last block\'s own', async () => {
    const post = (body: unknown) => fetch(`${server.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const four = [1, 2, 3, 4].map((k) => ({ type: 'text', text: `Part ${k}. `, cache_control: EPHEMERAL }));
    const base = { model: 'qwen35', max_tokens: 1, temperature: 0 };
    const tooMany = await post({ ...base, cache_control: EPHEMERAL, messages: [{ role: 'user', content: [...four, { type: 'text', text: 'The question?' }] }] });
    expect(tooMany.status).toBe(400);
    expect(((await tooMany.json()) as { error: { message: string } }).error.message).toMatch(/A maximum of 4 blocks with cache_control may be provided\. Found 5\./);
    const bad = await post({ ...base, cache_control: { type: 'ephemeral', ttl: '2h' }, messages: [{ role: 'user', content: 'Hi.' }] });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { type: string; error: { type: string; message: string } }).error).toMatchObject({ type: 'invalid_request_error', message: expect.stringMatching(/^cache_control: ttl must be "5m" or "1h"/) });
    // the last block has its own: still four
    const ok = await post({ ...base, cache_control: EPHEMERAL, messages: [{ role: 'user', content: four }] });
    expect(ok.status).toBe(200);
    const counted = await fetch(`${server.url}/v1/messages/count_tokens`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'qwen35', cache_control: EPHEMERAL, messages: [{ role: 'user', content: 'Hi.' }] }) });
    expect(counted.status).toBe(200);
    expect(((await counted.json()) as { input_tokens: number }).input_tokens).toBe((await tokenize(render([{ role: 'user', content: 'Hi.' }], []))).length);
  });
});
