// The agent loop: render the conversation, generate, take the tool calls from the marker
// events, run them, write their results back in call order, and go again.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { buildChatPrompt, markerTexts, type MarkerTexts, type ReplaySpan } from '../chat/prompt.js';
import { ChatTemplate } from '../chat/template.js';
import { newToolCallId, parseToolCallSpan, xmlParamTypes } from '../chat/tool-calls.js';
import { ChatMessagesSchema, type ChatAssistantMessage, type ChatMessage, type ChatToolCall, type ChatToolDefinition } from '../chat/types.js';
import { Context, sessionPool } from '../engine/context.js';
import { AgentStateSchema, ResumeSchema } from './state-schema.js';
import { LlamuxError, abortError } from '../errors.js';
import { FinishReason, type FinalEvent, type ToolCallSpan } from '../engine/events.js';
import { parseOptions, type GenerateOptions } from '../options.js';
import { Session } from '../engine/session.js';
import { runToolCalls, type RunToolCallsOptions } from '../tools/runner.js';
import { toolParametersJsonSchema, toolToJsonSchema, type AnyTool, type ToolCall } from '../tools/tool.js';
import type {
  AgentEvent,
  AgentHeldResult,
  AgentPendingCall,
  AgentResult,
  AgentResumeInput,
  AgentSpan,
  AgentState,
  AgentToolCallInfo,
  AgentTurnInfo,
  AgentTurnReport,
} from './types.js';

/** Generation settings of every turn (the prompt, signal and token reporting are the agent's). */
export type AgentGenerateOptions = Omit<GenerateOptions, 'prompt' | 'signal' | 'emitTokenIds' | 'tokens' | 'detectToolCalls' | 'toolCalls' | 'sessionId' | 'waitForSession' | 'parentKey'>;

const AGENT_SET = ['prompt', 'signal', 'emitTokenIds', 'tokens', 'detectToolCalls', 'toolCalls', 'sessionId', 'waitForSession', 'parentKey'];

export interface AgentOptions {
  /** The context every turn runs on (its tool-call markers find the calls); optional with `session`. */
  context?: Context;
  /**
   * The Session every conversation of this agent runs on (`ctx.createSession()`); new states
   * take its id as their conversation id. Without it, each conversation gets its own Session.
   */
  session?: Session;
  /** Tools the model may call. A tool without a handler is manual: its calls are returned to you. */
  tools?: readonly AnyTool[];
  /** A Jinja chat template that replaces the model's own. */
  template?: string;
  /** Model calls per run (default 8). */
  maxTurns?: number;
  /** Checked after every turn whose tools ran; true stops the run with status 'halt_when'. */
  haltWhen?: (info: AgentTurnInfo) => boolean | Promise<boolean>;
  /** Sampling and limits for every turn (e.g. `{ temperature: 0, maxTokens: 512 }`). */
  generate?: AgentGenerateOptions;
  /** Options of each tool batch (timeouts, concurrency, onToolError, ...); the signal and session id are the agent's. */
  toolOptions?: Omit<RunToolCallsOptions, 'signal'>;
  /** Extra chat-template variables. */
  templateVariables?: Record<string, unknown>;
  /** Parse special-token text inside message contents (default false). */
  parseSpecialInContent?: boolean;
}

const AgentOptionsSchema = z
  .object({
    context: z.custom<Context>((v) => v instanceof Context, { message: 'expected a Context' }).optional(),
    session: z.custom<Session>((v) => v instanceof Session, { message: 'expected a Session (ctx.createSession())' }).optional(),
    tools: z.array(z.custom<AnyTool>((v) => typeof v === 'object' && v !== null && typeof (v as { name?: unknown }).name === 'string', { message: 'expected a tool' })).optional(),
    template: z.string().min(1).optional(),
    maxTurns: z.number().int().min(1).default(8),
    haltWhen: z.custom<AgentOptions['haltWhen']>((v) => typeof v === 'function', { message: 'expected a function' }).optional(),
    generate: z
      .record(z.string(), z.unknown())
      .refine((g) => !AGENT_SET.some((k) => k in g), {
        message: `expected generate options without ${AGENT_SET.slice(0, -1).join(', ')} or parentKey (the agent sets them)`,
      })
      .optional(),
    toolOptions: z.record(z.string(), z.unknown()).optional(),
    templateVariables: z.record(z.string(), z.unknown()).optional(),
    parseSpecialInContent: z.boolean().default(false),
  })
  .strict()
  .refine((o) => o.context !== undefined || o.session !== undefined, { message: 'expected a context or a session', path: ['context'] })
  .refine((o) => o.context === undefined || o.session === undefined || o.session.context === o.context, {
    message: 'expected the session to belong to the context',
    path: ['session'],
  });

export interface AgentRunOptions {
  signal?: AbortSignal;
}

const RunOptionsSchema = z
  .object({ signal: z.custom<AbortSignal>((v) => v instanceof AbortSignal, { message: 'expected an AbortSignal' }).optional() })
  .strict();

function newConversationId(): string {
  return `conv_${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
}

interface TurnOutcome {
  state: AgentState;
  report: AgentTurnReport;
  calls: AgentToolCallInfo[];
  results: AgentHeldResult[];
}

/**
 * A tool-calling loop over one context.
 *
 * @example
 * const agent = new Agent({ context: ctx, tools: [weather], generate: { temperature: 0 } });
 * for await (const ev of agent.stream([{ role: 'user', content: 'Weather in Paris?' }])) {
 *   if (ev.type === 'text') process.stdout.write(ev.text);
 *   if (ev.type === 'turnEnd') console.log(ev.report.reusedTokens, 'tokens reused');
 * }
 */
export class Agent {
  readonly context: Context;
  readonly maxTurns: number;
  #tools: readonly AnyTool[];
  #toolsByName: Map<string, AnyTool>;
  #toolDefs: ChatToolDefinition[];
  #template: ChatTemplate;
  #markers: MarkerTexts | undefined;
  #haltWhen: AgentOptions['haltWhen'];
  #generate: AgentGenerateOptions;
  #toolOptions: Omit<RunToolCallsOptions, 'signal'>;
  #variables: Record<string, unknown> | undefined;
  #parseSpecialInContent: boolean;
  #session: Session | undefined;

  /** @throws LlamuxError INVALID_ARGUMENT (options, or a template that does not parse) */
  constructor(options: AgentOptions) {
    const o = parseOptions(AgentOptionsSchema, options, 'agent options');
    this.#session = o.session;
    this.context = o.context ?? o.session!.context;
    this.maxTurns = o.maxTurns;
    this.#tools = o.tools ?? [];
    this.#toolsByName = new Map(this.#tools.map((t) => [t.name, t]));
    this.#toolDefs = this.#tools.map((t) => toolToJsonSchema(t));
    this.#template = ChatTemplate.fromModel(this.context.model, o.template);
    this.#markers = markerTexts(this.context);
    this.#haltWhen = o.haltWhen;
    this.#generate = (o.generate ?? {}) as AgentGenerateOptions;
    this.#toolOptions = (o.toolOptions ?? {}) as Omit<RunToolCallsOptions, 'signal'>;
    this.#variables = o.templateVariables;
    this.#parseSpecialInContent = o.parseSpecialInContent;
  }

  /** A fresh state for a conversation (copied; the agent never mutates what you pass). */
  createState(messages: readonly ChatMessage[]): AgentState {
    const msgs = parseOptions(ChatMessagesSchema, messages, 'chat messages') as ChatMessage[];
    return { version: 1, conversationId: this.#session?.id ?? newConversationId(), messages: structuredClone(msgs), status: 'ready', turns: 0, pending: [], held: [], spans: {} };
  }

  /** The conversation's Session: the agent's own, or one per conversation id. */
  #sessionOf(conversationId: string): Session {
    if (this.#session) return this.#session;
    return sessionPool(this.context).get(conversationId);
  }

  #toState(input: readonly ChatMessage[] | AgentState): AgentState {
    if (Array.isArray(input)) return this.createState(input as ChatMessage[]);
    const s = parseOptions(AgentStateSchema, input, 'agent state') as AgentState;
    return structuredClone(s);
  }

  /**
   * Gives the pending calls their results (an ask-user answer, manual tools' outputs, or results
   * for halted calls) and writes every result of the batch in call order. Returns a new state
   * ready for the next model call.
   * @throws LlamuxError INVALID_ARGUMENT (a pending call left without a result, an unknown id,
   *   or `answer` when not exactly one question is pending)
   */
  resume(state: AgentState, input: AgentResumeInput): AgentState {
    const s = this.#toState(state);
    const r = parseOptions(ResumeSchema, input, 'resume input');
    if (s.pending.length === 0) throw new LlamuxError('INVALID_ARGUMENT', 'The agent state has no pending tool calls to resume');
    const given = new Map<string, { content: string; isError: boolean }>();
    if ('answer' in r) {
      const asks = s.pending.filter((p) => p.reason === 'ask_user');
      if (asks.length !== 1 || s.pending.length !== 1) {
        throw new LlamuxError('INVALID_ARGUMENT', `"answer" needs exactly one pending question, but ${s.pending.length} calls are pending (${s.pending.map((p) => `${p.id}: ${p.reason}`).join(', ')}); pass "results" by call id`);
      }
      given.set(asks[0]!.id, { content: r.answer, isError: false });
    } else {
      for (const [id, v] of Object.entries(r.results)) {
        given.set(id, typeof v === 'string' ? { content: v, isError: false } : { content: v.content, isError: v.isError ?? false });
      }
    }
    const pendingIds = new Set(s.pending.map((p) => p.id));
    const unknown = [...given.keys()].filter((id) => !pendingIds.has(id));
    if (unknown.length) throw new LlamuxError('INVALID_ARGUMENT', `No pending tool call has the id ${unknown.map((i) => `"${i}"`).join(', ')}`);
    const missing = s.pending.filter((p) => !given.has(p.id));
    if (missing.length) throw new LlamuxError('INVALID_ARGUMENT', `Missing results for pending tool calls ${missing.map((p) => `"${p.id}" (${p.name})`).join(', ')}`);
    for (const p of s.pending) {
      const v = given.get(p.id)!;
      s.held.push({ toolCallId: p.id, name: p.name, content: v.content, isError: v.isError });
    }
    s.pending = [];
    commitHeld(s);
    s.status = 'ready';
    delete s.halt;
    return s;
  }

  /**
   * Runs the loop, yielding events, until the model answers without tools, a tool asks the user
   * or halts, manual tools need results, `haltWhen` says stop, or `maxTurns` model calls were
   * made. The generator's return value (and the last event, `done`) is the {@link AgentResult}.
   * @throws LlamuxError INVALID_ARGUMENT (input, or a state with pending calls: resume() first),
   *   ABORTED, and whatever the context throws
   */
  async *stream(input: readonly ChatMessage[] | AgentState, options?: AgentRunOptions): AsyncGenerator<AgentEvent, AgentResult, undefined> {
    const { signal } = parseOptions(RunOptionsSchema, options, 'run options');
    let state = this.#toState(input);
    if (state.pending.length > 0) {
      throw new LlamuxError('INVALID_ARGUMENT', `The conversation is waiting for results of ${state.pending.map((p) => `"${p.id}"`).join(', ')}; call resume() first`);
    }
    const reports: AgentTurnReport[] = [];
    let made = 0;
    for (;;) {
      if (made >= this.maxTurns) {
        state.status = 'max_turns';
        break;
      }
      const t: TurnOutcome = yield* this.#turn(state, signal);
      made++;
      state = t.state;
      reports.push(t.report);
      if (state.status !== 'ready') break;
      if (this.#haltWhen) {
        const info: AgentTurnInfo = { turn: t.report.turn, state, report: t.report, toolCalls: t.calls, toolResults: t.results };
        if (await this.#haltWhen(info)) {
          state.status = 'halt_when';
          break;
        }
      }
    }
    const result = resultOf(state, reports);
    yield { type: 'done', result };
    return result;
  }

  /** `stream()` to the end; resolves with the result. */
  async run(input: readonly ChatMessage[] | AgentState, options?: AgentRunOptions): Promise<AgentResult> {
    const it = this.stream(input, options);
    for (;;) {
      const n = await it.next();
      if (n.done) return n.value;
    }
  }

  /**
   * Exactly one model call (and its tools). The result's status is 'ready' when the loop would
   * go on.
   */
  async step(input: readonly ChatMessage[] | AgentState, options?: AgentRunOptions): Promise<AgentResult> {
    const { signal } = parseOptions(RunOptionsSchema, options, 'run options');
    const state = this.#toState(input);
    if (state.pending.length > 0) {
      throw new LlamuxError('INVALID_ARGUMENT', `The conversation is waiting for results of ${state.pending.map((p) => `"${p.id}"`).join(', ')}; call resume() first`);
    }
    const it = this.#turn(state, signal);
    for (;;) {
      const n = await it.next();
      if (n.done) return resultOf(n.value.state, [n.value.report]);
    }
  }

  async *#turn(state: AgentState, signal: AbortSignal | undefined): AsyncGenerator<AgentEvent, TurnOutcome, undefined> {
    const model = this.context.model;
    const turn = state.turns + 1;
    const spans = state.spans;
    const prompt = buildChatPrompt(model, state.messages, {
      template: this.#template,
      tools: this.#toolDefs,
      variables: this.#variables,
      parseSpecialInContent: this.#parseSpecialInContent,
      ...(this.#markers ? { markers: this.#markers } : {}),
      replay: (call) => replaySpan(spans[call.id]),
    });
    yield { type: 'turnStart', turn, promptTokens: prompt.tokens.length, replayedCalls: prompt.replayed };

    // The conversation keeps its sequence (its Session): each turn prefills only what is new.
    const gen = this.#sessionOf(state.conversationId).generate({
      // The tools constrain the spans (a tool grammar) unless the caller set generate.tools.
      ...(this.#generate.tools === undefined && this.#tools.length > 0 && this.context.markers
        ? { tools: this.#tools.map((t) => ({ name: t.name, parameters: t.parameters === undefined ? true : toolParametersJsonSchema(t) })) }
        : {}),
      ...this.#generate,
      prompt: prompt.tokens,
      emitTokenIds: true,
      ...(signal ? { signal } : {}),
      waitForSession: true,
    });
    let prelude = { text: [] as string[], tokens: [] as number[] };
    const preludes = new Map<number, { text: string; tokens: number[] }>();
    const ended: ToolCallSpan[] = [];
    let final: FinalEvent | undefined;
    for await (const ev of gen) {
      switch (ev.type) {
        case 'text':
          prelude.text.push(ev.text);
          if (ev.tokens) for (const t of ev.tokens) prelude.tokens.push(t);
          yield { type: 'text', turn, text: ev.text };
          break;
        case 'toolCallStart':
          preludes.set(ev.index, { text: prelude.text.join(''), tokens: prelude.tokens });
          prelude = { text: [], tokens: [] };
          yield { type: 'toolCallStart', turn, index: ev.index };
          break;
        case 'toolCallDelta':
          yield { type: 'toolCallDelta', turn, index: ev.index, text: ev.text };
          break;
        case 'toolCallEnd':
          ended.push({ index: ev.index, text: ev.text, tokens: ev.tokens });
          break;
        case 'toolCallTruncated':
          yield { type: 'toolCallTruncated', turn, index: ev.index, text: ev.text };
          break;
        case 'final':
          final = ev;
          break;
      }
    }
    if (!final) throw new LlamuxError('INTERNAL', 'The generation ended without a final event');

    // Calls, in span order, with fresh ids; each single-call span is kept for exact replay.
    const calls: AgentToolCallInfo[] = [];
    for (const span of ended) {
      // XML call bodies (qwen-xml) are typed by the tools' schemas: strings raw, the rest JSON.
      const parsed = parseToolCallSpan(span.text, xmlParamTypes(this.#tools.map((t) => ({ name: t.name, parameters: t.parameters === undefined ? undefined : toolParametersJsonSchema(t) }))));
      for (const p of parsed) {
        const info: AgentToolCallInfo = { id: newToolCallId(), name: p.name, arguments: p.arguments };
        if (p.invalidArguments !== undefined) info.invalidArguments = p.invalidArguments;
        calls.push(info);
        if (parsed.length === 1) {
          const s: AgentSpan = { text: span.text, tokens: Array.from(span.tokens) };
          const pre = preludes.get(span.index);
          if (pre && pre.text.length > 0) s.prelude = pre;
          spans[info.id] = s;
        }
      }
    }
    for (const call of calls) yield { type: 'toolCall', turn, call };

    const report: AgentTurnReport = {
      turn,
      promptTokens: final.promptTokens,
      reusedTokens: final.reusedTokens,
      prefilledTokens: final.prefilledTokens,
      generatedTokens: final.generatedTokens,
      ttftMs: final.timings.ttftMs,
      finishReason: final.finishReason,
      replayedCalls: prompt.replayed.length,
    };
    yield { type: 'turnEnd', turn, report, text: final.text };

    const assistant: ChatAssistantMessage = { role: 'assistant', content: final.text.length > 0 ? final.text : null };
    if (calls.length > 0) {
      assistant.toolCalls = calls.map(
        (c): ChatToolCall => ({ id: c.id, name: c.name || 'invalid_tool_call', arguments: c.invalidArguments ?? c.arguments }),
      );
    }
    state.messages.push(assistant);
    state.turns = turn;
    delete state.halt;

    if (calls.length === 0) {
      state.status = final.finishReason === FinishReason.Length || final.truncatedToolCall ? 'length' : 'completed';
      return { state, report, calls, results: [] };
    }

    // Run the calls that have handlers (unknown names get an error result from the runner);
    // calls of manual tools go back to the caller. Truncated spans never reach this point.
    const runnable: ToolCall[] = [];
    const manual: AgentPendingCall[] = [];
    for (const c of calls) {
      const tool = this.#toolsByName.get(c.name);
      if (tool && typeof tool.handler !== 'function' && tool.isolate === undefined && c.invalidArguments === undefined) {
        manual.push({ id: c.id, name: c.name, arguments: c.arguments, reason: 'manual' });
      } else {
        runnable.push(c.invalidArguments !== undefined
          ? { id: c.id, name: c.name, arguments: {}, _invalid_arguments: c.invalidArguments }
          : { id: c.id, name: c.name, arguments: c.arguments });
      }
    }
    const run = runnable.length > 0
      ? await runToolCalls(runnable, this.#tools, { ...this.#toolOptions, sessionId: state.conversationId, ...(signal ? { signal } : {}) })
      : { messages: [], outcomes: [], halt: undefined };
    if (run.halt?.haltedReason === 'cancelled') throw abortError(signal, 'The agent run');

    const results: AgentHeldResult[] = [];
    const pending: AgentPendingCall[] = [];
    for (const outcome of run.outcomes) {
      const c = calls.find((x) => x.id === outcome.call.id)!;
      if (outcome.kind === 'message') {
        results.push({ toolCallId: c.id, name: c.name, content: outcome.message.content, isError: outcome.message.isError });
      } else if (outcome.kind === 'ask_user') {
        const p: AgentPendingCall = { id: c.id, name: c.name, arguments: c.arguments, reason: 'ask_user', question: outcome.question };
        if (outcome.options) p.options = { ...outcome.options };
        pending.push(p);
      } else {
        pending.push({ id: c.id, name: c.name, arguments: c.arguments, reason: 'halt', haltReason: outcome.reason, haltResult: outcome.result });
      }
    }
    pending.push(...manual);
    // Events in call order.
    const order = new Map(calls.map((c, i) => [c.id, i]));
    results.sort((a, b) => order.get(a.toolCallId)! - order.get(b.toolCallId)!);
    pending.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
    for (const r of results) yield { type: 'toolResult', turn, ...r };
    for (const p of pending) {
      if (p.reason === 'ask_user') {
        yield { type: 'askUser', turn, toolCallId: p.id, name: p.name, question: p.question ?? '', ...(p.options ? { options: p.options } : {}) };
      }
    }
    if (manual.length > 0) yield { type: 'awaitingTools', turn, calls: manual };

    state.held = results;
    state.pending = pending;
    if (run.halt) state.halt = run.halt;
    if (pending.length === 0) {
      commitHeld(state);
      state.status = run.halt ? 'halted' : 'ready';
    } else if (pending.some((p) => p.reason === 'halt') || run.halt?.haltedReason === 'tool_error') {
      state.status = 'halted';
    } else if (pending.some((p) => p.reason === 'ask_user')) {
      state.status = 'awaiting_user';
    } else {
      state.status = 'awaiting_tools';
    }
    return { state, report, calls, results };
  }
}

function replaySpan(s: AgentSpan | undefined): ReplaySpan | undefined {
  if (!s) return undefined;
  return s.prelude ? { text: s.text, tokens: s.tokens, prelude: s.prelude } : { text: s.text, tokens: s.tokens };
}

/** Appends the held results as tool messages in the order of the last assistant message's calls. */
function commitHeld(state: AgentState): void {
  const last = [...state.messages].reverse().find((m): m is ChatAssistantMessage => m.role === 'assistant');
  const byId = new Map(state.held.map((h) => [h.toolCallId, h]));
  for (const call of last?.toolCalls ?? []) {
    const h = byId.get(call.id);
    if (!h) throw new LlamuxError('INTERNAL', `Tool call "${call.id}" has no result`);
    state.messages.push({ role: 'tool', toolCallId: h.toolCallId, name: h.name, content: h.content });
  }
  state.held = [];
}

function resultOf(state: AgentState, turns: AgentTurnReport[]): AgentResult {
  const last = [...state.messages].reverse().find((m): m is ChatAssistantMessage => m.role === 'assistant');
  const r: AgentResult = { status: state.status, state, text: last?.content ?? '', turns };
  if (state.halt) r.halt = state.halt;
  return r;
}
