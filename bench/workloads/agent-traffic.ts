// Issue 41 [agents] item 3: agent traffic as today's clients send it, 8 turns each, on the zoo
// qwen35 model (the real Qwen3.5 vocabulary and chat template, hybrid memory, random weights):
//
//   claude-code  Anthropic /v1/messages: a 10-20k-token system prompt of tool schemas,
//                `cache_control` on the system block and on the last message's last block (the
//                breakpoint moves each turn), extended thinking whose blocks go back every turn.
//   codex        /v1/responses with `previous_response_id` (only the new function_call_output
//                is sent), and codex-full: the same turns with the whole item history resent
//                (`store: false`). A server that answers 404 on /v1/responses gets "n/a".
//   opencode     chat completions, the assistant's reasoning stripped from the history.
//
// Each turn the client forces a known shape on the random model: a reasoning budget (the end
// of the thinking span is forced), then a grammar-forced tool call on closed (enum) schemas.
// llama-server, built from the same llama.cpp source, gets the stateless equivalent of every
// turn: chat completions with the full history llamux saw (reasoning kept where the client kept
// it), `cache_prompt: true`, one slot, writing one token: what it writes is not the turn the
// history carries next, so its next prompt diverges right after this one whatever the length it
// wrote (the same cut it would face writing a whole turn, at a fraction of the time). Per turn: prompt
// tokens, prefilled tokens (llamux: its usage; llama-server: `timings.prompt_n`) and the time to
// the first streamed delta, on the client.
import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/native/binding.js';
import { ensureZooModels } from '../../src/gguf/index.js';
import { ChatTemplate, buildChatPrompt, loadModel, setLogger, type ChatMessage, type Model } from '../../src/index.js';
import { createServer } from '../../src/server/index.js';
import { llamaServerBinary, startLlamaServer } from '../drivers/llama-server.js';
import { postSse, type SseEvent } from '../drivers/sse.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';
import { tempDirFor } from '../util.js';
import { Prng } from '../../src/gguf/prng.js';
import { USER } from './replay.js';

export type Shape = 'claude-code' | 'codex' | 'codex-full' | 'opencode';
export const SHAPES: readonly Shape[] = ['claude-code', 'codex', 'codex-full', 'opencode'];
const SHAPE_LABELS: Record<Shape, string> = {
  'claude-code': 'Claude Code-like: /v1/messages, cache_control, thinking sent back',
  codex: 'Codex-like: /v1/responses, previous_response_id',
  'codex-full': 'Codex-like: /v1/responses, full history resent',
  opencode: 'opencode-like: chat completions, reasoning stripped',
};

const SYSTEM = 'You are a coding agent working in a TypeScript repository. Think briefly, then call one tool. Use the tools below to inspect and change files.';

type Json = Record<string, unknown>;
/** An OpenAI chat message (the stateless equivalent llama-server is sent). */
type ChatMsg = Json;

export interface TurnMeasure {
  promptTokens: number;
  prefilled: number;
  completionTokens: number;
  ttftMs: number;
  totalMs: number;
}

interface ShapeRun {
  turns: TurnMeasure[];
  /** The chat-completions equivalent of each request's history. */
  equivalents: ChatMsg[][];
  /** Why the shape was not measured (the server has no such endpoint). */
  na?: string;
}

interface Tool {
  name: string;
  description?: string;
  parameters: Json;
}

function toolResult(k: number, tokens: number): string {
  // ~1.3 tokens a word on the Qwen vocabulary
  const words = 'the test file lists each case and its status then the failing assertion with its diff'.split(' ');
  const out = Array.from({ length: Math.ceil(tokens / 1.3) }, (_, i) => words[(i * 7 + k) % words.length]!).join(' ');
  return JSON.stringify({ status: 'ok', step: k, output: out });
}

const TOOL_NAMES = ['Bash', 'Read', 'Edit', 'Write', 'Glob', 'Grep', 'LS', 'MultiEdit', 'NotebookEdit', 'WebFetch', 'WebSearch', 'TodoWrite', 'Task', 'ExitPlanMode', 'BashOutput', 'KillShell'];
const DOC_WORDS = (
  'use this tool to read write search and change files in the repository the path must be absolute and the command runs in a ' +
  'persistent shell session with an optional timeout when the output is long it is truncated before it is returned prefer the ' +
  'dedicated tools over shell commands and never run interactive commands each call returns the result as text lines with numbers'
).split(' ');

/**
 * Tool schemas as agents send them: a few tools (Claude Code sends about 16) with long usage
 * descriptions, grown until the system turn reaches `targetTokens`.
 */
function agentTools(model: Model, count: number, targetTokens: number): { tools: Tool[]; systemTokens: number } {
  const template = ChatTemplate.fromModel(model);
  const measure = (tools: Tool[]) => buildChatPrompt(model, [{ role: 'system', content: SYSTEM }], { template, tools, addGenerationPrompt: false }).tokens.length;
  const make = (words: number): Tool[] => {
    const r = new Prng(41);
    return Array.from({ length: count }, (_, i) => {
      const name = i < TOOL_NAMES.length ? TOOL_NAMES[i]! : `${TOOL_NAMES[i % TOOL_NAMES.length]!}${Math.floor(i / TOOL_NAMES.length)}`;
      const description = Array.from({ length: words }, () => DOC_WORDS[Math.floor(r.next() * DOC_WORDS.length)]!).join(' ');
      // One parameter closed to two short values: a forced call is a few dozen tokens.
      const parameters = { type: 'object', properties: { path: { type: 'string', description: 'The absolute path.', enum: ['/a.ts', '/b.ts'] } }, required: ['path'] };
      return { name, description: `${description[0]!.toUpperCase()}${description.slice(1)}.`, parameters };
    });
  };
  const base = measure(make(1));
  let words = Math.max(1, Math.round((targetTokens - base) / count));
  let tools = make(words);
  let tokens = measure(tools);
  // one correction: tokens grow linearly with the words of each description
  words = Math.max(1, Math.round(words * (targetTokens - base) / Math.max(1, tokens - base)));
  tools = make(words);
  tokens = measure(tools);
  return { tools, systemTokens: tokens };
}

const firstDelta = (events: SseEvent[], isDelta: (e: SseEvent) => boolean, totalMs: number): number => events.find(isDelta)?.atMs ?? totalMs;

interface TurnOptions {
  url: string;
  tools: Tool[];
  turns: number;
  budget: number;
  resultTokens: number;
  maxTokens: number;
  /** claude-code: send the cache_control breakpoints (default true; --no-cache-control compares without). */
  cacheControl: boolean;
}

// ---------------------------------------------------------------------------------------------
// Claude Code-like: Anthropic Messages

async function claudeCode(o: TurnOptions): Promise<ShapeRun> {
  const tools = o.tools.map((t) => ({ name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), input_schema: t.parameters }));
  const messages: Array<{ role: 'user' | 'assistant'; content: Json[] }> = [{ role: 'user', content: [{ type: 'text', text: USER }] }];
  const equivalent: ChatMsg[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: USER }];
  const run: ShapeRun = { turns: [], equivalents: [] };
  for (let k = 0; k <= o.turns; k++) {
    progress(`agent-traffic: llamux, claude-code, turn ${k}/${o.turns}`);
    // The breakpoint on the last block of the last message only, as Claude Code moves it.
    const cc = o.cacheControl ? { cache_control: { type: 'ephemeral' } } : {};
    const sent = messages.map((m, i) =>
      i === messages.length - 1 ? { ...m, content: m.content.map((b, j) => (j === m.content.length - 1 ? { ...b, ...cc } : b)) } : m,
    );
    const body = {
      model: 'qwen35',
      max_tokens: o.maxTokens,
      system: [{ type: 'text', text: SYSTEM, ...cc }],
      tools,
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      thinking: { type: 'enabled', budget_tokens: o.budget },
      messages: sent,
      temperature: 0,
      stream: true,
    };
    run.equivalents.push(structuredClone(equivalent));
    const r = await postSse(`${o.url}/v1/messages`, body, { 'anthropic-version': '2023-06-01' });
    if (r.status !== 200) throw new Error(`claude-code turn ${k}: ${r.status} ${r.errorBody?.slice(0, 300)}`);
    const blocks: Json[] = [];
    let usage: Json = {};
    for (const e of r.events) {
      const d = e.data ?? {};
      if (e.event === 'message_start') usage = { ...((d.message as Json)?.usage as Json) };
      else if (e.event === 'content_block_start') blocks[d.index as number] = { ...(d.content_block as Json) };
      else if (e.event === 'content_block_delta') {
        const b = blocks[d.index as number]!;
        const delta = d.delta as Json;
        if (delta.type === 'thinking_delta') b.thinking = `${(b.thinking as string | undefined) ?? ''}${delta.thinking as string}`;
        else if (delta.type === 'signature_delta') b.signature = delta.signature;
        else if (delta.type === 'text_delta') b.text = `${(b.text as string | undefined) ?? ''}${delta.text as string}`;
        else if (delta.type === 'input_json_delta') b.partial = `${(b.partial as string | undefined) ?? ''}${delta.partial_json as string}`;
      } else if (e.event === 'message_delta') usage = { ...usage, ...((d.usage as Json) ?? {}) };
      else if (e.event === 'error') throw new Error(`claude-code turn ${k}: ${JSON.stringify(d).slice(0, 300)}`);
    }
    for (const b of blocks) {
      if (b.type === 'tool_use' && typeof b.partial === 'string') {
        b.input = b.partial.length > 0 ? JSON.parse(b.partial) : (b.input ?? {});
        delete b.partial;
      }
    }
    const n = (v: unknown) => (typeof v === 'number' ? v : 0);
    // Anthropic: input_tokens excludes both cache figures; tokens written at a breakpoint were prefilled too.
    const prefilled = n(usage.input_tokens) + n(usage.cache_creation_input_tokens);
    run.turns.push({
      promptTokens: prefilled + n(usage.cache_read_input_tokens),
      prefilled,
      completionTokens: n(usage.output_tokens),
      ttftMs: firstDelta(r.events, (e) => e.event === 'content_block_delta', r.totalMs),
      totalMs: r.totalMs,
    });
    const call = blocks.find((b) => b.type === 'tool_use');
    if (!call) throw new Error(`claude-code turn ${k}: no tool_use block`);
    const thinking = blocks.filter((b) => b.type === 'thinking').map((b) => b.thinking as string).join('');
    const text = blocks.filter((b) => b.type === 'text').map((b) => b.text as string).join('');
    messages.push({ role: 'assistant', content: blocks.filter((b) => b.type !== 'text' || (b.text as string).length > 0) });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: toolResult(k, o.resultTokens) }] });
    equivalent.push({
      role: 'assistant',
      content: text.length > 0 ? text : null,
      ...(thinking.length > 0 ? { reasoning_content: thinking } : {}),
      tool_calls: [{ id: call.id, type: 'function', function: { name: call.name, arguments: JSON.stringify(call.input) } }],
    });
    equivalent.push({ role: 'tool', tool_call_id: call.id, content: toolResult(k, o.resultTokens) });
  }
  return run;
}

// ---------------------------------------------------------------------------------------------
// Codex-like: the Responses API (written against OpenAI's spec)

async function codex(o: TurnOptions, full: boolean): Promise<ShapeRun> {
  const tools = o.tools.map((t) => ({ type: 'function', name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.parameters, strict: false }));
  const run: ShapeRun = { turns: [], equivalents: [] };
  const history: Json[] = [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: USER }] }];
  const equivalent: ChatMsg[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: USER }];
  let previous: string | undefined;
  let pending: Json[] = history.slice();
  // `reasoning_budget` is llamux's own field (it makes the random model close its reasoning); a
  // server that refuses it gets the request without it.
  let budgetField = true;
  const shape = full ? 'codex-full' : 'codex';
  for (let k = 0; k <= o.turns; k++) {
    progress(`agent-traffic: llamux, ${shape}, turn ${k}/${o.turns}`);
    const body: Json = {
      model: 'qwen35',
      instructions: SYSTEM,
      input: full ? history : pending,
      tools,
      tool_choice: 'required',
      parallel_tool_calls: false,
      reasoning: { effort: 'low' },
      max_output_tokens: o.maxTokens,
      temperature: 0,
      stream: true,
      store: !full,
      ...(previous !== undefined && !full ? { previous_response_id: previous } : {}),
      ...(budgetField ? { reasoning_budget: o.budget } : {}),
    };
    run.equivalents.push(structuredClone(equivalent));
    let r = await postSse(`${o.url}/v1/responses`, body);
    if (r.status === 404 && k === 0) return { turns: [], equivalents: [], na: 'the server answers 404 on /v1/responses' };
    if (r.status === 400 && budgetField && /reasoning_budget/.test(r.errorBody ?? '')) {
      budgetField = false;
      delete body.reasoning_budget;
      r = await postSse(`${o.url}/v1/responses`, body);
    }
    if (r.status !== 200) throw new Error(`${shape} turn ${k}: ${r.status} ${r.errorBody?.slice(0, 300)}`);
    const done = r.events.find((e) => e.event === 'response.completed' || e.data?.type === 'response.completed');
    const failed = r.events.find((e) => e.event === 'response.failed' || e.event === 'error');
    if (!done) throw new Error(`${shape} turn ${k}: no response.completed (${JSON.stringify(failed?.data ?? {}).slice(0, 300)})`);
    const response = done.data!.response as Json;
    const usage = (response.usage ?? {}) as Json;
    const cached = ((usage.input_tokens_details as Json | undefined)?.cached_tokens as number | undefined) ?? 0;
    const input = (usage.input_tokens as number | undefined) ?? 0;
    run.turns.push({
      promptTokens: input,
      prefilled: input - cached,
      completionTokens: (usage.output_tokens as number | undefined) ?? 0,
      ttftMs: firstDelta(r.events, (e) => /\.delta$/.test(e.event || String(e.data?.type ?? '')), r.totalMs),
      totalMs: r.totalMs,
    });
    previous = response.id as string;
    const output = (response.output ?? []) as Json[];
    const call = output.find((it) => it.type === 'function_call');
    const reasoning = output
      .filter((it) => it.type === 'reasoning')
      .map((it) => ((it.content ?? it.summary ?? []) as Json[]).map((c) => (c.text as string | undefined) ?? '').join(''))
      .join('');
    const text = output
      .filter((it) => it.type === 'message')
      .map((it) => ((it.content ?? []) as Json[]).map((c) => (c.text as string | undefined) ?? '').join(''))
      .join('');
    history.push(...output);
    if (call) {
      const result = { type: 'function_call_output', call_id: call.call_id, output: toolResult(k, o.resultTokens) };
      history.push(result);
      pending = [result];
      equivalent.push({
        role: 'assistant',
        content: text.length > 0 ? text : null,
        ...(reasoning.length > 0 ? { reasoning_content: reasoning } : {}),
        tool_calls: [{ id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } }],
      });
      equivalent.push({ role: 'tool', tool_call_id: call.call_id, content: toolResult(k, o.resultTokens) });
    } else {
      // No call came back: the agent goes on with a user message.
      const next = { type: 'message', role: 'user', content: [{ type: 'input_text', text: `Go on (${k}).` }] };
      history.push(next);
      pending = [next];
      equivalent.push({ role: 'assistant', content: text, ...(reasoning.length > 0 ? { reasoning_content: reasoning } : {}) });
      equivalent.push({ role: 'user', content: `Go on (${k}).` });
    }
  }
  return run;
}

// ---------------------------------------------------------------------------------------------
// opencode-like: chat completions, reasoning stripped

async function opencode(o: TurnOptions): Promise<ShapeRun> {
  const tools = o.tools.map((t) => ({ type: 'function', function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.parameters } }));
  const messages: ChatMsg[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: USER }];
  const run: ShapeRun = { turns: [], equivalents: [] };
  for (let k = 0; k <= o.turns; k++) {
    progress(`agent-traffic: llamux, opencode, turn ${k}/${o.turns}`);
    run.equivalents.push(structuredClone(messages));
    const body = {
      model: 'qwen35', messages, tools, tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: o.maxTokens,
      reasoning_budget: o.budget, stream: true, stream_options: { include_usage: true },
    };
    const r = await postSse(`${o.url}/v1/chat/completions`, body);
    if (r.status !== 200) throw new Error(`opencode turn ${k}: ${r.status} ${r.errorBody?.slice(0, 300)}`);
    const s = readChatStream(r.events, r.totalMs);
    run.turns.push(s.measure);
    if (s.calls.length === 0) throw new Error(`opencode turn ${k}: no tool call`);
    const call = s.calls[0]!;
    messages.push({ role: 'assistant', content: s.text.length > 0 ? s.text : null, tool_calls: [{ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } }] });
    messages.push({ role: 'tool', tool_call_id: call.id, content: toolResult(k, o.resultTokens) });
  }
  return run;
}

interface ChatStream {
  measure: TurnMeasure;
  text: string;
  calls: Array<{ id: string; name: string; arguments: string }>;
}

/** A chat-completions stream: llamux's usage, or llama-server's `timings.prompt_n`. */
function readChatStream(events: SseEvent[], totalMs: number): ChatStream {
  let text = '';
  const calls: Array<{ id: string; name: string; arguments: string }> = [];
  let usage: Json | undefined;
  let timings: Json | undefined;
  let ttft = -1;
  for (const e of events) {
    const d = e.data;
    if (!d) continue;
    if (d.error) throw new Error(`stream error: ${JSON.stringify(d.error).slice(0, 300)}`);
    const choice = (d.choices as Json[] | undefined)?.[0];
    const delta = choice?.delta as Json | undefined;
    if (delta) {
      const toolCalls = (delta.tool_calls as Json[] | undefined) ?? [];
      if (ttft < 0 && ((delta.content as string | undefined) || (delta.reasoning_content as string | undefined) || toolCalls.length > 0)) ttft = e.atMs;
      if (typeof delta.content === 'string') text += delta.content;
      for (const tc of toolCalls) {
        const i = tc.index as number;
        const f = (tc.function ?? {}) as Json;
        calls[i] ??= { id: '', name: '', arguments: '' };
        if (tc.id) calls[i].id = tc.id as string;
        if (f.name) calls[i].name = f.name as string;
        if (f.arguments) calls[i].arguments += f.arguments as string;
      }
    }
    if (d.usage) usage = d.usage as Json;
    if (d.timings) timings = d.timings as Json;
  }
  const prompt = (usage?.prompt_tokens as number | undefined) ?? -1;
  const cached = ((usage?.prompt_tokens_details as Json | undefined)?.cached_tokens as number | undefined) ?? 0;
  return {
    measure: {
      promptTokens: prompt,
      prefilled: timings ? ((timings.prompt_n as number | undefined) ?? -1) : prompt - cached,
      completionTokens: (usage?.completion_tokens as number | undefined) ?? -1,
      ttftMs: ttft < 0 ? totalMs : ttft,
      totalMs,
    },
    text,
    calls: calls.filter(Boolean),
  };
}

// ---------------------------------------------------------------------------------------------
// llama-server: the stateless equivalent

async function llamaServerShape(bin: string, path: string, tools: Tool[], run: ShapeRun, ctx: number, threads: number, shape: Shape): Promise<TurnMeasure[]> {
  const srv = await startLlamaServer(bin, path, { ctx, parallel: 1, threads });
  const chatTools = tools.map((t) => ({ type: 'function', function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.parameters } }));
  const out: TurnMeasure[] = [];
  try {
    for (let k = 0; k < run.equivalents.length; k++) {
      progress(`agent-traffic: llama-server, ${shape}, turn ${k}/${run.equivalents.length - 1}`);
      const body = {
        model: 'qwen35', messages: run.equivalents[k], tools: chatTools, temperature: 0, max_tokens: 1,
        cache_prompt: true, stream: true, stream_options: { include_usage: true },
      };
      const r = await postSse(`${srv.url}/v1/chat/completions`, body);
      if (r.status !== 200) throw new Error(`llama-server ${shape} turn ${k}: ${r.status} ${r.errorBody?.slice(0, 300)}`);
      out.push(readChatStream(r.events, r.totalMs).measure);
    }
  } finally {
    await srv.close();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The suite

export interface AgentTrafficOptions {
  quick?: boolean;
  threads?: number;
  turns?: number;
  /** Tokens of the system turn with its tool schemas (about). */
  systemTokens?: number;
  /** claude-code: with its cache_control breakpoints (default true). */
  cacheControl?: boolean;
}

/** An OpenAI chat message as the library's prompt builder takes it. */
function toChatMessage(m: ChatMsg): ChatMessage {
  if (m.role === 'assistant') {
    const calls = (m.tool_calls as Json[] | undefined) ?? [];
    return {
      role: 'assistant',
      content: (m.content as string | null | undefined) ?? null,
      ...(calls.length ? { toolCalls: calls.map((c) => ({ id: c.id as string, name: (c.function as Json).name as string, arguments: (c.function as Json).arguments as string })) } : {}),
      ...(typeof m.reasoning_content === 'string' ? { reasoningContent: m.reasoning_content } : {}),
    };
  }
  if (m.role === 'tool') return { role: 'tool', toolCallId: m.tool_call_id as string, content: m.content as string };
  return { role: m.role as 'system' | 'user', content: m.content as string };
}

/**
 * Tokens of request k that no cache can hold, rendered on the client with the model's template:
 * where the client sends the assistant turns back as generated, what follows the last one's body
 * (the turn's closing, which the model did not write: a forced call ends the generation at
 * `</tool_call>`; the tool result, turn wrappers, the generation prompt); where it strips
 * reasoning, everything after the longest prefix shared with the previous request's prompt (the
 * rewritten turn too).
 */
export function newTokensPerTurn(model: Model, tools: Tool[], equivalents: ChatMsg[][], strips: boolean, variables?: Record<string, unknown>): number[] {
  const template = ChatTemplate.fromModel(model);
  const render = (msgs: ChatMsg[], addGenerationPrompt: boolean) =>
    buildChatPrompt(model, msgs.map(toChatMessage), { template, tools, addGenerationPrompt, ...(variables ? { variables } : {}) }).tokens;
  const prompts = equivalents.map((msgs) => render(msgs, true));
  // What the template writes after an assistant turn's body (`<|im_end|>\n`), from a probe turn.
  const probe = template.render([{ role: 'user', content: 'q' }, { role: 'assistant', content: 'probeanswer' }], { addGenerationPrompt: false, ...(variables ? { variables } : {}) });
  const closing = probe.slice(probe.lastIndexOf('probeanswer') + 'probeanswer'.length);
  const closingTokens = model.tokenize(closing, { addSpecial: false, parseSpecial: true }).length;
  return prompts.map((p, k) => {
    if (k === 0) return p.length;
    if (strips) {
      const prev = prompts[k - 1]!;
      let i = 0;
      while (i < prev.length && i < p.length && prev[i] === p[i]) i++;
      return p.length - i;
    }
    const msgs = equivalents[k]!;
    let last = msgs.length - 1;
    while (last >= 0 && msgs[last]!.role !== 'assistant') last--;
    return p.length - render(msgs.slice(0, last + 1), false).length + closingTokens;
  });
}

export async function runAgentTrafficBench(opts: AgentTrafficOptions = {}): Promise<string> {
  const turns = opts.turns ?? (opts.quick ? 3 : 8);
  const systemTokens = opts.systemTokens ?? (opts.quick ? 1500 : 12_000);
  const threads = opts.threads ?? (opts.quick ? 1 : 2);
  const budget = 8;
  const resultTokens = opts.quick ? 40 : 120;
  setLogger('silent');
  progress('agent-traffic: preparing the zoo qwen35 model');
  const zoo = await ensureZooModels(join(packageRoot, '.cache', 'zoo'), { vocabDir: join(packageRoot, '.cache', 'llama.cpp-models'), architectures: ['qwen35'] });
  // A private copy: the zoo folder is shared, and a checkout of another version may replace
  // the file while llama-server still has to open it.
  const dir = tempDirFor('agent-traffic');
  const path = join(dir, 'qwen35.gguf');
  copyFileSync(zoo.qwen35.path, path);
  const model: Model = await loadModel(path);
  const runs: Partial<Record<Shape, ShapeRun>> = {};
  const ls: Partial<Record<Shape, TurnMeasure[]>> = {};
  const newTokens: Partial<Record<Shape, number[]>> = {};
  let tools: Tool[] = [];
  let systemPromptTokens = 0;
  const maxTokens = 400;
  let ctx = 0;
  const lsBin = opts.quick ? { why: 'quick mode' } : llamaServerBinary();
  try {
    progress('agent-traffic: building the tool schemas');
    ({ tools, systemTokens: systemPromptTokens } = agentTools(model, opts.quick ? 8 : 16, systemTokens));
    ctx = systemPromptTokens + (turns + 1) * (maxTokens + resultTokens + 200) + 1024;
    const o = { tools, turns, budget, resultTokens, maxTokens, cacheControl: opts.cacheControl ?? true };
    for (const shape of SHAPES) {
      // A fresh server per shape: nothing of one shape's conversation helps the next.
      const server = await createServer({ model, port: 0, ctx, parallel: 1, threads });
      try {
        const t = { ...o, url: server.url };
        runs[shape] = shape === 'claude-code' ? await claudeCode(t) : shape === 'opencode' ? await opencode(t) : await codex(t, shape === 'codex-full');
      } finally {
        await server.close();
      }
      const run = runs[shape]!;
      if (lsBin.path && !run.na) ls[shape] = await llamaServerShape(lsBin.path, path, tools, run, ctx, threads, shape);
    }
    for (const shape of SHAPES) {
      const run = runs[shape]!;
      if (!run.na) newTokens[shape] = newTokensPerTurn(model, tools, run.equivalents, shape === 'opencode', shape === 'claude-code' ? { enable_thinking: true } : undefined);
    }
  } finally {
    progressDone();
    await model.dispose();
    rmSync(dir, { recursive: true, force: true });
  }

  const out: string[] = [];
  const summary: Row[] = [];
  for (const shape of SHAPES) {
    const run = runs[shape]!;
    if (run.na) {
      out.push(`### agent-traffic: ${SHAPE_LABELS[shape]}\n\nn/a: ${run.na}\n`);
      summary.push({
        shape,
        [`llamux turn ${turns} TTFT ms`]: 'n/a',
        [`llama-server turn ${turns} TTFT ms`]: 'n/a',
        'llamux / llama-server': 'n/a',
        'target ≤ 0.5x': 'n/a',
        'llamux prefilled only new tokens': 'n/a',
        [`llamux / llama-server prefilled, turns 1-${turns}`]: 'n/a',
      });
      continue;
    }
    const fresh = newTokens[shape]!;
    const l = ls[shape];
    const rows: Row[] = run.turns.map((t, k) => ({
      turn: k,
      'prompt tokens': fmt(t.promptTokens, 0),
      'new tokens': fmt(fresh[k]!, 0),
      'llamux prefilled': fmt(t.prefilled, 0),
      'llamux TTFT ms': fmt(t.ttftMs),
      ...(l ? { 'llama-server prefilled': fmt(l[k]!.prefilled, 0), 'llama-server TTFT ms': fmt(l[k]!.ttftMs), 'llamux / llama-server TTFT': `${(t.ttftMs / l[k]!.ttftMs).toFixed(2)}x` } : {}),
    }));
    const label = shape === 'claude-code' && opts.cacheControl === false ? SHAPE_LABELS[shape].replace('cache_control', 'no cache_control (--no-cache-control)') : SHAPE_LABELS[shape];
    out.push(table(`agent-traffic: ${label}`, rows));
    const excess = run.turns.map((t, k) => (k > 0 ? t.prefilled - fresh[k]! : 0));
    const over = excess.map((e, k) => (e > 0 ? k : -1)).filter((k) => k > 0);
    const maxExcess = Math.max(...excess);
    // A hybrid model's KV can only be resumed where a state checkpoint was kept: one token
    // prefilled again at the cut is shown, not counted as a miss.
    const onlyNew = maxExcess <= 0 ? 'yes' : maxExcess <= 1 ? 'yes, +1 token at the cut' : `no (turns ${over.join(', ')}: up to +${maxExcess})`;
    const last = run.turns[turns]!;
    summary.push({
      shape,
      [`llamux turn ${turns} TTFT ms`]: fmt(last.ttftMs),
      [`llama-server turn ${turns} TTFT ms`]: l ? fmt(l[turns]!.ttftMs) : '-',
      'llamux / llama-server': l ? `${(last.ttftMs / l[turns]!.ttftMs).toFixed(2)}x` : '-',
      'target ≤ 0.5x': l ? (last.ttftMs / l[turns]!.ttftMs <= 0.5 ? 'met' : 'missed') : '-',
      'llamux prefilled only new tokens': onlyNew,
      [`llamux / llama-server prefilled, turns 1-${turns}`]: l ? `${fmt(sum(run.turns.slice(1).map((t) => t.prefilled)), 0)} / ${fmt(sum(l.slice(1).map((t) => t.prefilled)), 0)}` : '-',
    });
  }
  out.unshift(table(`agent-traffic: turn ${turns} per client shape (zoo qwen35: Qwen3.5 vocabulary and template, hybrid, random weights; system prompt ${systemPromptTokens} tokens with ${tools.length} tool schemas; ${threads} thread${threads > 1 ? 's' : ''}${opts.cacheControl === false ? '; claude-code without cache_control' : ''})`, summary));
  if (lsBin.why) out.push(`note: llama-server not measured (${lsBin.why})\n`);
  else out.push('note: llama-server gets each turn as chat completions with the full history (reasoning kept where the client kept it), cache_prompt on, one slot, max_tokens 1: its next prompt diverges right after this one (a hybrid model needs a checkpoint there), as it would after writing a whole turn of its own\n');
  const file = writeResult('agent-traffic', { mode: opts.quick ? 'quick' : 'full', turns, threads, systemPromptTokens, tools: tools.length, budget, resultTokens, llamux: runs, llamaServer: lsBin.path ? ls : { notMeasured: lsBin.why } });
  out.push(`results: ${file}`);
  return out.join('\n');
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
