// Anthropic prompt caching with the official @anthropic-ai/sdk client: cache_control breakpoints
// on the system prompt, a message block and a tool; cache_creation / cache_read usage, streamed
// and not; count_tokens; malformed breakpoints. Expected token counts come from the server's
// /tokenize of the rendered prefix, never from the breakpoint code.
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplate } from '../../src/chat/template.js';
import { loadModel, type Model } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';
import { anthropicFor } from './clients.js';
import { ANTHROPIC_TOOLS, QUESTION, ensureChatModels } from './fixtures.js';

/** The shared part of the system prompt (the breakpoint's block): ~180 tokens of the demo vocabulary. */
const SHARED = 'You are a careful assistant for weather questions. Answer briefly and cite the tool output when you use it. '.repeat(2);

/** Tokens of `text` as the prompt builder tokenizes its first piece (BOS added, template tokens parsed). */
async function tokenCount(server: LlamuxServer, text: string): Promise<number> {
  const res = await fetch(`${server.url}/tokenize`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ content: text, add_special: true, parse_special: true }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { tokens: number[] }).tokens.length;
}

/** A request whose system prompt is SHARED (breakpoint) then a per-conversation block. */
function request(tail: string, ttl?: '5m' | '1h'): Anthropic.MessageCreateParamsNonStreaming {
  return {
    model: 'claude-any',
    max_tokens: 8,
    ...GREEDY,
    system: [
      { type: 'text', text: SHARED, cache_control: ttl ? { type: 'ephemeral', ttl } : { type: 'ephemeral' } },
      { type: 'text', text: tail },
    ],
    messages: [{ role: 'user', content: QUESTION }],
  };
}

/** Greedy sampling (the SDK's types no longer list `temperature`; the Messages API takes it). */
const GREEDY = { temperature: 0 };

const text = (m: Anthropic.Message): string => m.content.map((b) => (b.type === 'text' ? b.text : '')).join('');

describe('Anthropic prompt caching (cache_control) with @anthropic-ai/sdk', () => {
  let model: Model;
  let server: LlamuxServer;
  let anthropic: Anthropic;
  let breakpoint: number;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    server = await createServer({ model, port: 0, ctx: 4096, parallel: 2, threads: 1, log: () => {} });
    anthropic = anthropicFor(server);
    // The demo template renders the system prompt as `<|im_start|>system\n` + its text.
    breakpoint = await tokenCount(server, `<|im_start|>system\n${SHARED}`);
  });
  afterAll(async () => {
    await server.close();
    await model.dispose();
  });

  it('a first request writes the prefix up to the breakpoint; another conversation reads it, with the output of a cold run', async () => {
    expect(breakpoint).toBeGreaterThan(100);
    const first = await anthropic.messages.create(request('Alpha conversation.')).withResponse();
    const u1 = first.data.usage;
    expect(u1.cache_creation_input_tokens).toBe(breakpoint);
    expect(u1.cache_read_input_tokens).toBe(0);
    expect(u1.cache_creation).toEqual({ ephemeral_5m_input_tokens: breakpoint, ephemeral_1h_input_tokens: 0 });
    expect(first.response.headers.get('x-llamux-cache-retention')).toBe('kept');
    // input_tokens excludes both: the three add up to the prompt
    const count1 = await anthropic.messages.countTokens({ model: 'claude-any', system: request('Alpha conversation.').system!, messages: request('').messages });
    expect(u1.input_tokens + u1.cache_creation_input_tokens! + u1.cache_read_input_tokens!).toBe(count1.input_tokens);

    // Another conversation (no x-llamux-conversation header): the tails differ from their first
    // character, so exactly the breakpoint's prefix is shared.
    const second = await anthropic.messages.create(request('Beta conversation.'));
    expect(second.usage.cache_read_input_tokens).toBe(breakpoint);
    expect(second.usage.cache_creation_input_tokens).toBe(0);

    // The same request on a server that never saw the prefix.
    const cold = await createServer({ model, port: 0, ctx: 4096, parallel: 1, threads: 1, log: () => {} });
    try {
      const c = await anthropicFor(cold).messages.create(request('Beta conversation.'));
      expect(c.usage.cache_read_input_tokens).toBe(0);
      expect(c.usage.cache_creation_input_tokens).toBe(breakpoint);
      expect(text(second)).toBe(text(c));
      expect(second.content).toEqual(c.content);
    } finally {
      await cold.close();
    }
  });

  it('streams the same numbers: message_start after the prefill, message_delta with the output', async () => {
    const body = request('Gamma conversation.', '1h');
    const whole = await anthropic.messages.create({ ...body, system: request('Delta conversation.', '1h').system });
    expect(whole.usage.cache_read_input_tokens).toBe(breakpoint); // written by the first test (5m), refreshed as 1h
    const starts: Anthropic.Usage[] = [];
    const deltas: Anthropic.MessageDeltaUsage[] = [];
    const stream = anthropic.messages.stream(body);
    stream.on('streamEvent', (e) => {
      if (e.type === 'message_start') starts.push(structuredClone(e.message.usage));
      if (e.type === 'message_delta') deltas.push(structuredClone(e.usage));
    });
    const final = await stream.finalMessage();
    expect(starts).toHaveLength(1);
    expect(deltas).toHaveLength(1);
    const start = starts[0]!;
    const count = await anthropic.messages.countTokens({ model: 'claude-any', system: body.system!, messages: body.messages });
    expect(start.cache_read_input_tokens).toBe(breakpoint);
    expect(start.cache_creation_input_tokens).toBe(0);
    expect(start.input_tokens).toBe(count.input_tokens - breakpoint);
    expect(start.output_tokens).toBe(0);
    expect(deltas[0]).toMatchObject({ input_tokens: start.input_tokens, cache_read_input_tokens: breakpoint, cache_creation_input_tokens: 0, output_tokens: final.usage.output_tokens });
    expect(final.usage.output_tokens).toBeGreaterThan(0);

    // Without any breakpoint, message_start has numbers too (it had nulls before).
    const plainStarts: Anthropic.Usage[] = [];
    const plain = anthropic.messages.stream({ model: 'claude-any', max_tokens: 4, ...GREEDY, messages: [{ role: 'user', content: QUESTION }] });
    plain.on('streamEvent', (e) => {
      if (e.type === 'message_start') plainStarts.push(structuredClone(e.message.usage));
    });
    const plainFinal = await plain.finalMessage();
    const plainCount = await anthropic.messages.countTokens({ model: 'claude-any', messages: [{ role: 'user', content: QUESTION }] });
    expect(plainStarts[0]!.cache_creation_input_tokens).toBe(0);
    expect(typeof plainStarts[0]!.cache_read_input_tokens).toBe('number');
    expect(plainStarts[0]!.input_tokens + plainStarts[0]!.cache_read_input_tokens!).toBe(plainCount.input_tokens);
    expect(plainFinal.usage.cache_read_input_tokens).toBe(plainStarts[0]!.cache_read_input_tokens);
  });

  it('a 1h breakpoint reports its creation as ephemeral_1h, streamed from message_start on', async () => {
    const other = `Weather desk rules: answer in one sentence and never guess a temperature you did not read. `.repeat(2);
    const body: Anthropic.MessageCreateParamsStreaming = {
      model: 'claude-any',
      max_tokens: 4,
      ...GREEDY,
      stream: true,
      system: [{ type: 'text', text: other, cache_control: { type: 'ephemeral', ttl: '1h' } }, { type: 'text', text: 'Epsilon.' }],
      messages: [{ role: 'user', content: QUESTION }],
    };
    const expected = await tokenCount(server, `<|im_start|>system\n${other}`);
    const starts: Anthropic.Usage[] = [];
    const stream = anthropic.messages.stream(body);
    stream.on('streamEvent', (e) => {
      if (e.type === 'message_start') starts.push(structuredClone(e.message.usage));
    });
    const final = await stream.finalMessage();
    expect(starts[0]).toMatchObject({ cache_creation_input_tokens: expected, cache_read_input_tokens: 0, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: expected } });
    expect(final.usage.cache_creation_input_tokens).toBe(expected);
  });

  it('a breakpoint on a message block and on a tool sits where the rendered prompt reaches the block end', async () => {
    const doc = 'Station report: Paris, clear sky, light wind from the west, humidity moderate, pressure steady. '.repeat(2);
    const messages: Anthropic.MessageParam[] = [
      { role: 'user', content: [{ type: 'text', text: doc, cache_control: { type: 'ephemeral' } }, { type: 'text', text: QUESTION }] },
    ];
    const m = await anthropic.messages.create({ model: 'claude-any', max_tokens: 4, ...GREEDY, messages });
    expect(m.usage.cache_creation_input_tokens).toBe(await tokenCount(server, `<|im_start|>user\n${doc}`));

    // The tool: the template renders it as JSON inside the system turn; the breakpoint is where
    // every continuation after it still agrees (its JSON and the newline the template puts after each tool).
    const tools: Anthropic.Tool[] = [{ ...ANTHROPIC_TOOLS[0]!, description: `Current weather for a city. ${'Use it for any city. '.repeat(4)}`, cache_control: { type: 'ephemeral' } }];
    const t = await anthropic.messages.create({ model: 'claude-any', max_tokens: 4, ...GREEDY, tools, messages: [{ role: 'user', content: 'Hello there.' }] });
    const rendered = ChatTemplate.fromModel(model).render([{ role: 'user', content: 'Hello there.' }], {
      tools: [{ name: tools[0]!.name, description: tools[0]!.description!, parameters: tools[0]!.input_schema as Record<string, unknown> }],
      addGenerationPrompt: true,
    });
    const end = rendered.indexOf('\n</tools>');
    expect(end).toBeGreaterThan(0);
    expect(t.usage.cache_creation_input_tokens).toBe(await tokenCount(server, rendered.slice(0, end + 1)));
  });

  it('count_tokens equals the prompt tokens of the real request (input + creation + read), with breakpoints and tools', async () => {
    const body: Anthropic.MessageCreateParamsNonStreaming = {
      ...request('Zeta conversation.'),
      tools: ANTHROPIC_TOOLS,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Paris, please. ', cache_control: { type: 'ephemeral' } }, { type: 'text', text: QUESTION }] }],
    };
    const real = await anthropic.messages.create(body);
    const { model: modelName, system, messages, tools } = body;
    const counted = await anthropic.messages.countTokens({ model: modelName, system: system!, messages, tools: tools! });
    const u = real.usage;
    expect(counted.input_tokens).toBe(u.input_tokens + u.cache_creation_input_tokens! + u.cache_read_input_tokens!);
    // and without any breakpoint too
    const plain: Anthropic.MessageCreateParamsNonStreaming = { model: 'claude-any', max_tokens: 4, ...GREEDY, system: 'Be brief.', messages: [{ role: 'user', content: QUESTION }], tools: ANTHROPIC_TOOLS };
    const r = await anthropic.messages.create(plain);
    const c = await anthropic.messages.countTokens({ model: 'claude-any', system: 'Be brief.', messages: plain.messages, tools: ANTHROPIC_TOOLS });
    expect(c.input_tokens).toBe(r.usage.input_tokens + r.usage.cache_creation_input_tokens! + r.usage.cache_read_input_tokens!);
    expect(r.usage.cache_creation_input_tokens).toBe(0);
  });

  it('refuses malformed cache_control with 400 in Anthropic\'s error shape, and the server stays healthy', async () => {
    const bad = async (body: unknown, message: RegExp): Promise<void> => {
      const res = await fetch(`${server.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      expect(res.status).toBe(400);
      const j = (await res.json()) as { type: string; error: { type: string; message: string } };
      expect(j.type).toBe('error');
      expect(j.error.type).toBe('invalid_request_error');
      expect(j.error.message).toMatch(message);
    };
    const block = (cache_control: unknown) => ({ type: 'text', text: 'Hi.', cache_control });
    const base = { model: 'claude-any', max_tokens: 4 };
    await bad({ ...base, messages: [{ role: 'user', content: [block({ type: 'ephemeral', ttl: '10m' })] }] }, /messages\.0\.content\.0\.cache_control: ttl must be "5m" or "1h"/);
    await bad({ ...base, messages: [{ role: 'user', content: [block({ type: 'persistent' })] }] }, /cache_control/);
    await bad({ ...base, system: [block({ type: 'ephemeral', ttl: 5 })], messages: [{ role: 'user', content: 'Hi.' }] }, /system\.0\.cache_control/);
    await bad({ ...base, messages: [{ role: 'user', content: [1, 2, 3, 4, 5].map(() => block({ type: 'ephemeral' })) }] }, /A maximum of 4 blocks with cache_control may be provided\. Found 5\./);
    await bad(
      { ...base, system: [block({ type: 'ephemeral' })], messages: [{ role: 'user', content: [block({ type: 'ephemeral', ttl: '1h' })] }] },
      /ttl="1h" breakpoint must not come after a ttl="5m"/,
    );
    // count_tokens checks them too
    const res = await fetch(`${server.url}/v1/messages/count_tokens`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'claude-any', messages: [{ role: 'user', content: [block({ type: 'ephemeral', ttl: '2h' })] }] }),
    });
    expect(res.status).toBe(400);
    // the SDK sees a BadRequestError
    await expect(
      anthropic.messages.create({ ...base, messages: [{ role: 'user', content: [1, 2, 3, 4, 5].map(() => ({ type: 'text' as const, text: 'x', cache_control: { type: 'ephemeral' as const } })) }] }),
    ).rejects.toBeInstanceOf(Anthropic.BadRequestError);
    // four are fine
    const ok = await anthropic.messages.create({ ...base, messages: [{ role: 'user', content: [1, 2, 3, 4].map((i) => ({ type: 'text' as const, text: `Part ${i} of the question. `, cache_control: { type: 'ephemeral' as const } })) }] });
    expect(ok.type).toBe('message');
  });
});
