import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent, type AgentEvent, type AgentState } from '../../src/agent/index.js';
import { askUser, defineTool, halt, loadModel, LlamuxError, type Context, type Model } from '../../src/index.js';
import { ensureChatModels } from '../server/fixtures.js';

const question = [{ role: 'user' as const, content: 'What is the weather in Paris?' }];
const ANSWER = 'The weather in Paris is sunny and 18°C.';
const cityParams = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };

async function collect(it: AsyncIterable<AgentEvent>): Promise<AgentEvent[]> {
  const out: AgentEvent[] = [];
  for await (const ev of it) out.push(ev);
  return out;
}

async function rejection(p: Promise<unknown>): Promise<LlamuxError> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(LlamuxError);
  return e as LlamuxError;
}

describe('Agent on the scripted demo model', () => {
  let model: Model;
  let ctx: Context;
  let calls: Array<Record<string, unknown>>;
  const weather = defineTool({
    name: 'get_weather',
    description: 'Current weather',
    parameters: cityParams,
    handler: (args) => {
      calls.push(args);
      return { temperature: 18, condition: 'sunny' };
    },
  });

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.demo);
    ctx = await model.createContext({ contextSize: 8192, sequences: 2, threads: 1 });
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('runs render → generate → tool → generate and reports each turn’s cache use', async () => {
    calls = [];
    const agent = new Agent({ context: ctx, tools: [weather], generate: { temperature: 0 } });
    const events = await collect(agent.stream(question));
    const types = events.filter((e) => e.type !== 'text' && e.type !== 'toolCallDelta').map((e) => e.type);
    expect(types).toEqual(['turnStart', 'toolCallStart', 'toolCall', 'turnEnd', 'toolResult', 'turnStart', 'turnEnd', 'done']);
    const deltas = events.flatMap((e) => (e.type === 'toolCallDelta' ? [e.text] : []));
    expect(deltas.join('')).toBe('{"name": "get_weather", "arguments": {"city": "Paris"}}');
    expect(events.flatMap((e) => (e.type === 'text' ? [e.text] : [])).join('')).toBe(ANSWER);
    expect(calls).toEqual([{ city: 'Paris' }]);
    const done = events.at(-1)!;
    if (done.type !== 'done') throw new Error('no done event');
    const r = done.result;
    expect(r.status).toBe('completed');
    expect(r.text).toBe(ANSWER);
    expect(r.turns).toHaveLength(2);
    const [t1, t2] = r.turns as [typeof r.turns[0], typeof r.turns[0]];
    expect(t2.replayedCalls).toBe(1);
    // Turn 2 prefills only what is new: the previous prompt and the call are KV hits.
    expect(t2.reusedTokens).toBeGreaterThanOrEqual(t1.promptTokens + t1.generatedTokens);
    expect(t2.prefilledTokens).toBe(t2.promptTokens - t2.reusedTokens);
    const roles = r.state.messages.map((m) => m.role);
    expect(roles).toEqual(['user', 'assistant', 'tool', 'assistant']);
    const call = events.find((e) => e.type === 'toolCall');
    const result = events.find((e) => e.type === 'toolResult');
    if (call?.type !== 'toolCall' || result?.type !== 'toolResult') throw new Error('missing events');
    expect(call.call).toMatchObject({ name: 'get_weather', arguments: { city: 'Paris' } });
    expect(result).toMatchObject({ toolCallId: call.call.id, content: '{"temperature":18,"condition":"sunny"}', isError: false });
    expect(r.state.spans[call.call.id]!.tokens.length).toBe(t1.generatedTokens);
  });

  it('stops at maxTurns with the results written, and a later run continues from the state', async () => {
    calls = [];
    const agent = new Agent({ context: ctx, tools: [weather], maxTurns: 1, generate: { temperature: 0 } });
    const first = await agent.run(question);
    expect(first.status).toBe('max_turns');
    expect(first.state.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
    const second = await agent.run(first.state);
    expect(second.status).toBe('completed');
    expect(second.text).toBe(ANSWER);
    expect(second.turns[0]!.reusedTokens).toBeGreaterThanOrEqual(first.turns[0]!.promptTokens + first.turns[0]!.generatedTokens);
    expect(second.state.turns).toBe(2);
  });

  it('step() makes exactly one model call', async () => {
    const agent = new Agent({ context: ctx, tools: [weather], generate: { temperature: 0 } });
    const r = await agent.step(question);
    expect(r.status).toBe('ready');
    expect(r.turns).toHaveLength(1);
    expect(r.state.messages.at(-1)!.role).toBe('tool');
  });

  it('haltWhen sees the turn’s calls and results and stops the run', async () => {
    const seen: unknown[] = [];
    const agent = new Agent({
      context: ctx,
      tools: [weather],
      generate: { temperature: 0 },
      haltWhen: (info) => {
        seen.push({ turn: info.turn, calls: info.toolCalls.map((c) => c.name), results: info.toolResults.map((x) => x.content) });
        return true;
      },
    });
    const r = await agent.run(question);
    expect(r.status).toBe('halt_when');
    expect(seen).toEqual([{ turn: 1, calls: ['get_weather'], results: ['{"temperature":18,"condition":"sunny"}'] }]);
  });

  it('suspends on askUser with a JSON-serialisable state and resumes with the answer', async () => {
    const asking = defineTool({ name: 'get_weather', parameters: cityParams, handler: ({ city }) => askUser(`Which ${String(city)}?`, { choices: ['France', 'Texas'] }) });
    const agent = new Agent({ context: ctx, tools: [asking], generate: { temperature: 0 } });
    const events = await collect(agent.stream(question));
    const ask = events.find((e) => e.type === 'askUser');
    expect(ask).toMatchObject({ question: 'Which Paris?', options: { choices: ['France', 'Texas'] } });
    const done = events.at(-1)!;
    if (done.type !== 'done') throw new Error('no done');
    expect(done.result.status).toBe('awaiting_user');
    const saved = JSON.stringify(done.result.state);
    const state = JSON.parse(saved) as AgentState;
    expect(state.pending).toMatchObject([{ reason: 'ask_user', question: 'Which Paris?', name: 'get_weather' }]);
    expect((await rejection(agent.run(state))).message).toMatch(/call resume\(\) first/);
    const resumed = agent.resume(state, { answer: '{"temperature": 18}' });
    expect(resumed.status).toBe('ready');
    expect(resumed.messages.at(-1)).toMatchObject({ role: 'tool', content: '{"temperature": 18}', toolCallId: state.pending[0]!.id });
    const r = await agent.run(resumed);
    expect(r.status).toBe('completed');
    expect(r.text).toBe(ANSWER);
    expect(r.turns[0]!.replayedCalls).toBe(1);
  });

  it('returns manual-tool calls to the caller and takes their results by id', async () => {
    const manual = defineTool({ name: 'get_weather', parameters: cityParams });
    const agent = new Agent({ context: ctx, tools: [manual], generate: { temperature: 0 } });
    const events = await collect(agent.stream(question));
    const waiting = events.find((e) => e.type === 'awaitingTools');
    if (waiting?.type !== 'awaitingTools') throw new Error('no awaitingTools event');
    expect(waiting.calls).toMatchObject([{ name: 'get_weather', arguments: { city: 'Paris' }, reason: 'manual' }]);
    const done = events.at(-1)!;
    if (done.type !== 'done') throw new Error('no done');
    const state = done.result.state;
    expect(done.result.status).toBe('awaiting_tools');
    const id = waiting.calls[0]!.id;
    expect((await rejection(Promise.resolve().then(() => agent.resume(state, { results: {} })))).message).toMatch(new RegExp(`Missing results for pending tool calls "${id}" \\(get_weather\\)`));
    expect(() => agent.resume(state, { results: { [id]: 'x', other: 'y' } })).toThrow(/No pending tool call has the id "other"/);
    expect(() => agent.resume({ ...state, pending: [] }, { answer: 'x' })).toThrow(/no pending tool calls/);
    const r = await agent.run(agent.resume(state, { results: { [id]: { content: '{"temperature": 18}', isError: false } } }));
    expect(r.status).toBe('completed');
    expect(r.text).toBe(ANSWER);
  });

  it('halts when a tool returns halt(), keeping the call pending', async () => {
    const stopper = defineTool({ name: 'get_weather', parameters: cityParams, handler: (_a) => halt('enough', { ok: true }) });
    const agent = new Agent({ context: ctx, tools: [stopper], generate: { temperature: 0 } });
    const r = await agent.run(question);
    expect(r.status).toBe('halted');
    expect(r.halt).toMatchObject({ haltedReason: 'tool_halt', reason: 'enough', result: { ok: true } });
    expect(r.state.pending).toMatchObject([{ reason: 'halt', haltReason: 'enough' }]);
  });

  it('answers a call of an unknown tool with an error result and goes on', async () => {
    const other = defineTool({ name: 'get_time', handler: (_a) => '12:00' });
    // tools: [] turns the tool grammar off, which would otherwise only allow get_time.
    const agent = new Agent({ context: ctx, tools: [other], generate: { temperature: 0, tools: [] } });
    const events = await collect(agent.stream(question));
    const result = events.find((e) => e.type === 'toolResult');
    expect(result).toMatchObject({ isError: true, name: 'get_weather' });
    if (result?.type === 'toolResult') expect(result.content).toMatch(/^unknown_tool: /);
    const done = events.at(-1)!;
    expect(done.type === 'done' && done.result.status).toBe('completed');
  });

  it('never runs a call cut off by the token limit', async () => {
    calls = [];
    const agent = new Agent({ context: ctx, tools: [weather], generate: { temperature: 0, maxTokens: 4 } });
    const events = await collect(agent.stream(question));
    expect(calls).toEqual([]);
    const cut = events.find((e) => e.type === 'toolCallTruncated');
    expect(cut).toMatchObject({ type: 'toolCallTruncated', index: 0 });
    expect(events.some((e) => e.type === 'toolCall' || e.type === 'toolResult')).toBe(false);
    const done = events.at(-1)!;
    expect(done.type === 'done' && done.result.status).toBe('length');
  });

  it('runs every conversation on the Session it was given (no context needed)', async () => {
    calls = [];
    const chat = ctx.createSession();
    const agent = new Agent({ session: chat, tools: [weather], generate: { temperature: 0 } });
    expect(agent.context).toBe(ctx);
    expect(agent.createState(question).conversationId).toBe(chat.id);
    const r = await agent.run(question);
    expect(r.status).toBe('completed');
    expect(r.text).toBe(ANSWER);
    // Both turns ran on the session; the second extended the first's tokens.
    expect(chat.stats().requests).toBe(2);
    expect(r.turns[1]!.reusedTokens).toBeGreaterThan(0);
    await chat.end();
    const other = await model.createContext({ contextSize: 512 });
    expect(() => new Agent({ context: other, session: ctx.createSession() })).toThrow(/session to belong to the context/);
    expect(() => new Agent({} as never)).toThrow(/expected a context or a session/);
    await other.dispose();
  });

  it('rejects with ABORTED when the signal is already aborted', async () => {
    const agent = new Agent({ context: ctx, tools: [weather] });
    const err = await rejection(agent.run(question, { signal: AbortSignal.abort() }));
    expect(err.code).toBe('ABORTED');
    expect(err.name).toBe('AbortError');
  });

  it('validates its options and input', () => {
    expect(() => new Agent({ context: ctx, maxTurns: 0 })).toThrow(/expected .* for "maxTurns" but received 0 of type number/);
    expect(() => new Agent({ context: ctx, generate: { prompt: 'x' } as never })).toThrow(/without prompt, signal, emitTokenIds, tokens, detectToolCalls, toolCalls, sessionId/);
    expect(() => new Agent({ context: ctx, maxTurn: 3 } as never)).toThrow(/unknown option "maxTurn"/);
    expect(() => new Agent({ context: {} as never })).toThrow(/expected a Context/);
    expect(() => new Agent({ context: ctx, template: '{% if %}' })).toThrow(/not valid Jinja/);
    const agent = new Agent({ context: ctx });
    expect(() => agent.createState([{ role: 'user', content: 1 } as never])).toThrow(/"0.content"/);
  });
});

describe('Agent with parallel tool calls', () => {
  let model: Model;
  let ctx: Context;

  beforeAll(async () => {
    const paths = await ensureChatModels();
    model = await loadModel(paths.parallel);
    ctx = await model.createContext({ contextSize: 8192, sequences: 2, threads: 1 });
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('writes exactly one result per call, in call order, whatever order they finish in', async () => {
    const finished: string[] = [];
    const slow = defineTool({ name: 'get_weather', parameters: cityParams, handler: async (_a) => {
      await new Promise((r) => setTimeout(r, 60));
      finished.push('get_weather');
      return { temperature: 18 };
    } });
    const fast = defineTool({ name: 'get_time', handler: (_a) => {
      finished.push('get_time');
      return '12:00';
    } });
    const agent = new Agent({ context: ctx, tools: [slow, fast], generate: { temperature: 0 } });
    const r = await agent.run(question);
    expect(finished).toEqual(['get_time', 'get_weather']);
    expect(r.status).toBe('completed');
    expect(r.text).toBe(ANSWER);
    const [user, assistant, tool1, tool2] = r.state.messages;
    expect(user!.role).toBe('user');
    if (assistant?.role !== 'assistant') throw new Error('expected the assistant turn');
    expect(assistant.content).toBe('\n Done.');
    expect(assistant.toolCalls!.map((c) => [c.name, c.arguments])).toEqual([
      ['get_weather', { city: 'Paris' }],
      ['get_time', { tz: 'CET' }],
    ]);
    expect(tool1).toMatchObject({ role: 'tool', toolCallId: assistant.toolCalls![0]!.id, content: '{"temperature":18}' });
    expect(tool2).toMatchObject({ role: 'tool', toolCallId: assistant.toolCalls![1]!.id, content: '12:00' });
    // The model wrote the calls, then its text; the template renders the text first, so the
    // turn diverges from the KV at its start and the calls are rendered, not spliced.
    expect(r.turns[1]!.replayedCalls).toBe(0);
    expect(r.turns[1]!.reusedTokens).toBeGreaterThanOrEqual(r.turns[0]!.promptTokens);
  });

  it('holds finished results while a sibling asks the user, then writes all in call order', async () => {
    const asking = defineTool({ name: 'get_weather', parameters: cityParams, handler: (_a) => askUser('Celsius?') });
    const time = defineTool({ name: 'get_time', handler: (_a) => '12:00' });
    const agent = new Agent({ context: ctx, tools: [asking, time], generate: { temperature: 0 } });
    const first = await agent.run(question);
    expect(first.status).toBe('awaiting_user');
    expect(first.state.held).toMatchObject([{ name: 'get_time', content: '12:00' }]);
    expect(first.state.messages.at(-1)!.role).toBe('assistant');
    const resumed = agent.resume(first.state, { answer: 'yes' });
    expect(resumed.messages.slice(-2).map((m) => (m.role === 'tool' ? m.content : m.role))).toEqual(['yes', '12:00']);
    const r = await agent.run(resumed);
    expect(r.status).toBe('completed');
  });
});
