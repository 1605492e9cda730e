// An agent conversation replayed turn by turn: a system prompt with tool schemas, a user request,
// then turns of (assistant tool call, tool result). For every request, the time to first token
// and the prompt tokens each system prefilled:
//   llamux library with a session, llamux's server through the official `openai` client (the
//   assistant messages carry the ids the server minted, so the calls are replayed by id),
//   llamux with prefixCache: false, and node-llama-cpp 3.21.1 on one context sequence that keeps
//   its own token history and evaluates only what differs (what its LlamaChat does).
//
// The models have random weights, so every system is made to generate the scripted assistant turn
// token for token (llamux: a grammar of token ids; node-llama-cpp: replacement tokens through
// its evaluate() iterator). Each system therefore holds, after turn k, exactly the tokens an agent
// loop would hold, and the next prompt extends them.
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type OpenAI from 'openai';
import { packageRoot } from '../../src/native/binding.js';
import {
  ChatTemplate,
  buildChatPrompt,
  loadModel,
  setLogger,
  type ChatMessage,
  type ChatToolDefinition,
  type GenerateResult,
  type Model,
} from '../../src/index.js';
import { startBenchServer, streamChat, tokenGrammar } from '../drivers/server.js';
import { withNodeLlamaCpp } from '../drivers/node-llama-cpp.js';
import { llamaServerBinary, startLlamaServer, streamTokenCompletion } from '../drivers/llama-server.js';
import { benchPrompt, ensureBenchModel, type BenchModelName } from '../models.js';
import { replayPlotSubtitle, replayPlotTitle, writeReplayPlot, type PlotSeries } from '../plot.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';
import { Prng } from '../../src/gguf/prng.js';
import { fmtSpread, spread } from '../stats.js';

// ---------------------------------------------------------------------------------------------
// The conversation

const WORDS = (
  'the a file path of to and in for with from by on is are return returns list each line lines content text string ' +
  'number optional required default value values name names directory repository project source test tests command ' +
  'output error errors result results match matches pattern query search find read write edit change changes diff ' +
  'commit branch message status code function class module package version build run check format request response ' +
  'header body url method limit offset page size count total first last start end before after new old current ' +
  'working tree index cache log logs user answer question when only all any not if or else this that which'
).split(' ');

const TOOL_NAMES = [
  'read_file', 'search_code', 'run_tests', 'edit_file', 'list_directory', 'git_diff', 'run_command', 'find_files',
  'write_file', 'git_status', 'git_log', 'git_commit', 'http_get', 'open_issue', 'query_database', 'format_code',
  'install_package', 'lint_project', 'build_project', 'ask_user', 'read_logs', 'list_branches', 'create_branch', 'fetch_docs',
];
const PARAM_NAMES = ['path', 'query', 'pattern', 'limit', 'offset', 'command', 'timeout', 'message', 'branch', 'content', 'url', 'method'];

/** The scripted assistant turns, cycled: text the model writes, then one call. */
export const CALLS: Array<{ content: string; name: string; arguments: Record<string, unknown> }> = [
  { content: 'Let me read the failing test first.', name: 'read_file', arguments: { path: 'test/cache/prefix.test.ts' } },
  { content: 'I will search for the function.', name: 'search_code', arguments: { query: 'longestPrefix', limit: 20 } },
  { content: 'Running the tests to see the error.', name: 'run_tests', arguments: { pattern: 'test/cache' } },
  { content: 'Now the source file.', name: 'read_file', arguments: { path: 'src/cache/prefix.ts' } },
  { content: 'The bound is off by one; fixing it.', name: 'edit_file', arguments: { path: 'src/cache/prefix.ts', old: 'i <= n', new: 'i < n' } },
  { content: 'Checking the directory for related files.', name: 'list_directory', arguments: { path: 'src/cache' } },
  { content: 'Let me look at the diff.', name: 'git_diff', arguments: { path: 'src/cache' } },
  { content: 'Running the whole suite again.', name: 'run_tests', arguments: { pattern: 'test' } },
  { content: 'Reading the changelog before the commit.', name: 'read_file', arguments: { path: 'CHANGELOG.md' } },
];

const SYSTEM = 'You are a coding agent working in a TypeScript repository. Use the tools to inspect and change files, one call at a time, and answer briefly.';
export const USER = 'The test suite fails after the last change to the cache module. Find the cause, fix it and run the tests again.';

/** A deterministic PRNG in [0, 1) (the project's mulberry32). */
function rng(seed: number): () => number {
  const p = new Prng(seed);
  return () => p.next();
}

function words(r: () => number, n: number): string {
  return Array.from({ length: n }, () => WORDS[Math.floor(r() * WORDS.length)]!).join(' ');
}

function sentence(r: () => number, n: number): string {
  const w = words(r, n);
  return `${w[0]!.toUpperCase()}${w.slice(1)}.`;
}

function toolDefinition(r: () => number, name: string): ChatToolDefinition {
  const nParams = 1 + Math.floor(r() * 3);
  const properties: Record<string, unknown> = {};
  const names = [...PARAM_NAMES].sort(() => r() - 0.5).slice(0, nParams);
  for (const p of names) {
    properties[p] = { type: p === 'limit' || p === 'offset' || p === 'timeout' ? 'integer' : 'string', description: sentence(r, 4 + Math.floor(r() * 5)) };
  }
  return {
    name,
    description: sentence(r, 8 + Math.floor(r() * 7)),
    parameters: { type: 'object', properties, required: names.slice(0, 1) },
  };
}

export interface ConversationSize {
  /** Tokens of the system turn with its tool schemas (reached or just passed). */
  systemTokens: number;
  /** Tokens of each tool result's content. */
  resultTokens: number;
  /** Turns of (tool call, tool result) after the first request. */
  turns: number;
}

export interface AgentConversation {
  tools: ChatToolDefinition[];
  /** The same tools in OpenAI's request shape. */
  openaiTools: OpenAI.Chat.Completions.ChatCompletionTool[];
  /** The assistant turn generated at request k (k = 0..turns). */
  calls: Array<{ id: string; content: string; name: string; arguments: Record<string, unknown> }>;
  /** The tool result appended after call k (k = 0..turns-1). */
  results: string[];
  /** The prompt of request k (k = 0..turns): the conversation so far with the generation prompt. */
  prompts: Int32Array[];
  /** The tokens the model generates at request k (its scripted turn, up to the end-of-turn token). */
  generated: Int32Array[];
  /** Tokens of request k's prompt that no earlier request prompted or generated. */
  newTokens: number[];
  systemTokens: number;
  /** Tool-call markers as they are tokenized inside the conversation. */
  markers: { start: number[]; end: number[] };
}

/** Tokens of `text` as they come out mid-conversation (after a '.', no SentencePiece space prefix). */
function midTokens(model: Model, text: string): number[] {
  const base = model.tokenize('.', { addSpecial: false, parseSpecial: true });
  const all = model.tokenize(`.${text}`, { addSpecial: false, parseSpecial: true });
  if (!base.every((t, i) => all[i] === t)) throw new Error(`cannot isolate the tokens of "${text}"`);
  return Array.from(all.slice(base.length));
}

function indexOfSeq(hay: ArrayLike<number>, needle: number[], from = 0): number {
  outer: for (let i = from; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

/**
 * Builds the conversation on `model`'s own vocabulary and chat template, with the tool schemas
 * and results grown until they reach the requested token counts.
 */
export function buildAgentConversation(model: Model, size: ConversationSize): AgentConversation {
  const template = ChatTemplate.fromModel(model);
  const r = rng(42);
  const system: ChatMessage = { role: 'system', content: SYSTEM };
  const tools: ChatToolDefinition[] = [];
  const systemTokensWith = (t: ChatToolDefinition[]) => buildChatPrompt(model, [system], { template, tools: t, addGenerationPrompt: false }).tokens.length;
  let systemTokens = 0;
  let previous = 0;
  for (let i = 0; systemTokens < size.systemTokens; i++) {
    const name = i < TOOL_NAMES.length ? TOOL_NAMES[i]! : `${TOOL_NAMES[i % TOOL_NAMES.length]!}_${Math.floor(i / TOOL_NAMES.length)}`;
    previous = systemTokens;
    tools.push(toolDefinition(r, name));
    systemTokens = systemTokensWith(tools);
  }
  // The count closest to the target (never fewer than one tool).
  if (tools.length > 1 && size.systemTokens - previous < systemTokens - size.systemTokens) {
    tools.pop();
    systemTokens = previous;
  }
  const results: string[] = [];
  for (let k = 0; k < size.turns; k++) {
    const rr = rng(1000 + k);
    let n = 8;
    let text = '';
    for (;;) {
      text = JSON.stringify({ status: 'ok', output: words(rr, n) });
      if (model.tokenize(text, { addSpecial: false }).length >= size.resultTokens) break;
      n += 4;
      if (n > 10_000) break;
    }
    results.push(text);
  }
  const calls = Array.from({ length: size.turns + 1 }, (_, k) => ({ id: `call_bench_${k}`, ...CALLS[k % CALLS.length]! }));
  const messagesAt = (k: number): ChatMessage[] => {
    const msgs: ChatMessage[] = [system, { role: 'user', content: USER }];
    for (let j = 0; j < k; j++) {
      const c = calls[j]!;
      msgs.push({ role: 'assistant', content: c.content, toolCalls: [{ id: c.id, name: c.name, arguments: c.arguments }] });
      msgs.push({ role: 'tool', toolCallId: c.id, content: results[j]! });
    }
    return msgs;
  };
  // Request k+1's prompt without the tool result: the assistant turn k closed by <|im_end|>.
  const withTurn = (k: number): Int32Array => {
    const msgs = messagesAt(k);
    const c = calls[k]!;
    msgs.push({ role: 'assistant', content: c.content, toolCalls: [{ id: c.id, name: c.name, arguments: c.arguments }] });
    return buildChatPrompt(model, msgs, { template, tools, addGenerationPrompt: false }).tokens;
  };
  const eot = model.tokenize('<|im_end|>', { addSpecial: false, parseSpecial: true });
  if (eot.length !== 1) throw new Error('the replay suite needs a model whose vocabulary has <|im_end|> as one token (a ChatML template)');
  const prompts: Int32Array[] = [];
  const generated: Int32Array[] = [];
  const newTokens: number[] = [];
  for (let k = 0; k <= size.turns; k++) {
    const p = buildChatPrompt(model, messagesAt(k), { template, tools }).tokens;
    const next = withTurn(k);
    for (let i = 0; i < p.length; i++) {
      if (next[i] !== p[i]) throw new Error(`turn ${k}: the tokens of the next prompt do not extend this one (at ${i}); use a model with the synthetic benchmark vocabulary`);
    }
    const end = next.indexOf(eot[0]!, p.length);
    if (end < 0) throw new Error(`turn ${k}: no <|im_end|> after the assistant turn`);
    const prev = k === 0 ? 0 : prompts[k - 1]!.length + generated[k - 1]!.length;
    prompts.push(p);
    generated.push(next.slice(p.length, end));
    newTokens.push(p.length - prev);
  }
  const markers = { start: midTokens(model, '<tool_call>'), end: midTokens(model, '</tool_call>') };
  for (const g of generated) {
    if (indexOfSeq(g, markers.start) < 0 || indexOfSeq(g, markers.end) < 0) throw new Error('the tool-call markers do not appear in the scripted turns');
  }
  return {
    tools,
    openaiTools: tools.map((t) => ({
      type: 'function' as const,
      function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), ...(t.parameters !== undefined ? { parameters: t.parameters } : {}) },
    })),
    calls,
    results,
    prompts,
    generated,
    newTokens,
    systemTokens,
    markers,
  };
}

// ---------------------------------------------------------------------------------------------
// The systems

export interface TurnResult {
  /** Request start to the first generated token, on the client. */
  ttftMs: number;
  /** The engine's own figure (submit to first sampled token), where the system reports one. */
  engineTtftMs?: number;
  promptTokens: number;
  prefilledTokens: number;
  /** Request start to the end of the scripted turn. */
  totalMs: number;
  /** Server only: calls of this request's history that were replayed by id. */
  replayedCalls?: number;
  /** Library only: the turn's log-probabilities (top 5 of each token, from the raw logits), as JSON. */
  logprobs?: string;
}

export type SystemKey = 'session' | 'server' | 'nocache' | 'nlc' | 'llamaServer';

export const SYSTEM_LABELS: Record<SystemKey, string> = {
  session: 'llamux (library, session)',
  server: 'llamux server (openai client, id replay)',
  nocache: 'llamux (prefixCache: false)',
  nlc: 'node-llama-cpp 3.21.1',
  llamaServer: 'llama-server (same llama.cpp, openai client, token prompts)',
};

async function runLibrary(model: Model, conv: AgentConversation, reuse: boolean, threads: number, deterministic = false): Promise<TurnResult[]> {
  const last = conv.prompts.at(-1)!.length + conv.generated.at(-1)!.length;
  // One sequence, as node-llama-cpp and llama-server get: the warm-up's cells are replaced by
  // turn 0 instead of sitting in a second sequence and widening the attention window.
  const ctx = await model.createContext({ contextSize: last + 256, sequences: 1, threads, batchThreads: threads, prefixCache: reuse, toolCallMarkers: false, deterministic });
  const out: TurnResult[] = [];
  try {
    const bias = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
    await ctx.complete({ prompt: benchPrompt(16, model.vocab.size, 99), maxTokens: 4, temperature: 0, logitBias: bias });
    const agent = reuse ? ctx.createSession({ id: 'agent' }) : undefined;
    for (let k = 0; k < conv.prompts.length; k++) {
      progress(`replay: ${reuse ? 'llamux session' : 'llamux prefixCache: false'}${deterministic ? ' (deterministic)' : ''}, turn ${k}/${conv.prompts.length - 1}`);
      const forced = conv.generated[k]!;
      const t0 = performance.now();
      const gen = (agent ?? ctx).generate({
        prompt: conv.prompts[k]!,
        grammar: tokenGrammar(forced),
        temperature: 0,
        maxTokens: forced.length + 8,
        logprobs: 5,
      });
      let first = -1;
      let final: GenerateResult | undefined;
      for await (const ev of gen) {
        if (first < 0 && ev.type !== 'final') first = performance.now() - t0;
        if (ev.type === 'final') final = ev;
      }
      const totalMs = performance.now() - t0;
      if (!final) throw new Error('no final event');
      if (final.generatedTokens !== forced.length) throw new Error(`turn ${k}: generated ${final.generatedTokens} tokens, expected the ${forced.length} scripted ones`);
      out.push({ ttftMs: first, engineTtftMs: final.timings.ttftMs, promptTokens: final.promptTokens, prefilledTokens: final.prefilledTokens, totalMs, logprobs: JSON.stringify(final.logprobs) });
    }
  } finally {
    await ctx.dispose();
  }
  return out;
}

async function runServer(model: Model, conv: AgentConversation, threads: number): Promise<{ turns: TurnResult[]; promptMismatches: number[]; fallbacks: number }> {
  const last = conv.prompts.at(-1)!.length + conv.generated.at(-1)!.length;
  const bs = await startBenchServer(model, { ctx: last + 512, parallel: 2, threads, markers: conv.markers });
  const out: TurnResult[] = [];
  const promptMismatches: number[] = [];
  let fallbacks = 0;
  try {
    const eog = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -100]));
    await streamChat(bs.openai, { model: 'bench', messages: [{ role: 'user', content: 'warm up' }], max_tokens: 4, temperature: 0, logit_bias: eog }, { 'x-llamux-conversation': 'warmup' });
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: USER },
    ];
    let replayedBefore = (await bs.replayCounts()).replayed;
    for (let k = 0; k < conv.prompts.length; k++) {
      progress(`replay: llamux server, turn ${k}/${conv.prompts.length - 1}`);
      const forced = conv.generated[k]!;
      bs.force(forced);
      const r = await streamChat(
        bs.openai,
        { model: 'bench', messages, tools: conv.openaiTools, temperature: 0, max_tokens: forced.length + 8 },
        { 'x-llamux-conversation': 'bench-replay' },
      );
      const engine = await bs.lastResult();
      const replayed = (await bs.replayCounts()).replayed;
      out.push({
        ttftMs: r.ttftMs,
        ...(engine ? { engineTtftMs: engine.timings.ttftMs } : {}),
        promptTokens: r.promptTokens,
        prefilledTokens: r.promptTokens - r.cachedTokens,
        totalMs: r.totalMs,
        replayedCalls: replayed - replayedBefore,
      });
      replayedBefore = replayed;
      if (r.promptTokens !== conv.prompts[k]!.length) promptMismatches.push(k);
      if (k + 1 >= conv.prompts.length) break;
      const c = conv.calls[k]!;
      const call = r.toolCalls[0];
      let id: string;
      if (r.toolCalls.length === 1 && call && call.name === c.name) {
        id = call.id;
        messages.push({ role: 'assistant', content: r.text.length > 0 ? r.text : null, tool_calls: [{ id, type: 'function', function: { name: call.name, arguments: call.arguments } }] });
      } else {
        // The server did not return the call (it should): send the scripted one with an id it does not know.
        fallbacks++;
        id = c.id;
        messages.push({ role: 'assistant', content: c.content, tool_calls: [{ id, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } }] });
      }
      messages.push({ role: 'tool', tool_call_id: id, content: conv.results[k]! });
    }
  } finally {
    bs.force(undefined);
    await bs.close();
  }
  return { turns: out, promptMismatches, fallbacks };
}

async function runNodeLlamaCpp(path: string, conv: AgentConversation, eogTokens: readonly number[], nVocab: number, threads: number): Promise<TurnResult[]> {
  return withNodeLlamaCpp(path, async (model, m) => {
    const last = conv.prompts.at(-1)!.length + conv.generated.at(-1)!.length;
    const ctx = await model.createContext({ contextSize: last + 256, sequences: 1, threads, batchSize: 512 });
    const out: TurnResult[] = [];
    try {
      const seq = ctx.getSequence();
      const bias = new m.TokenBias(model.tokenizer);
      for (const t of eogTokens) bias.set(t as never, 'never');
      // warm-up (graph allocation), then an empty history
      {
        const it = seq.evaluate(benchPrompt(16, nVocab, 99) as never, { temperature: 0, tokenBias: bias });
        for (let i = 0; i < 4; i++) await it.next();
        await it.return(undefined);
        await seq.clearHistory();
      }
      for (let k = 0; k < conv.prompts.length; k++) {
        progress(`replay: node-llama-cpp, turn ${k}/${conv.prompts.length - 1}`);
        const prompt = Array.from(conv.prompts[k]!) as never as import('node-llama-cpp').Token[];
        const forced = conv.generated[k]!;
        const t0 = performance.now();
        // What LlamaChat does: keep the common prefix of the sequence's tokens, evaluate the rest.
        await seq.adaptStateToTokens(prompt, false);
        let start = seq.nextTokenIndex;
        if (start >= prompt.length) {
          await seq.eraseContextTokenRanges([{ start: prompt.length - 1, end: seq.nextTokenIndex }]);
          start = prompt.length - 1;
        }
        const it = seq.evaluate(prompt.slice(start), { temperature: 0, tokenBias: bias });
        let r = await it.next();
        const ttft = performance.now() - t0;
        // The scripted turn: each sampled token is replaced by the script's.
        for (let i = 0; i < forced.length && !r.done; i++) r = await it.next(forced[i] as never);
        await it.return(undefined);
        const totalMs = performance.now() - t0;
        if (seq.nextTokenIndex !== prompt.length + forced.length) throw new Error(`node-llama-cpp turn ${k}: ${seq.nextTokenIndex} tokens in the sequence, expected ${prompt.length + forced.length}`);
        out.push({ ttftMs: ttft, promptTokens: prompt.length, prefilledTokens: prompt.length - start, totalMs });
      }
    } finally {
      await ctx.dispose();
    }
    return out;
  });
}

interface PairedLastTurn {
  llamux: number[];
  nlc: number[];
  /** llamux's TTFT / node-llama-cpp's, pair by pair */
  ratios: number[];
  prefilled: Array<[number, number]>;
}

/** The last turn again `repeats` times, llamux (session) and node-llama-cpp taking turns, so a
 * slow moment of a shared machine lands on both: each starts from the state after the previous
 * turn and prefills the last turn's new tokens (alternately the scripted ones and a
 * same-length variant, so every repeat prefills them again). */
async function pairedLastTurn(model: Model, path: string, conv: AgentConversation, eogTokens: readonly number[], threads: number, repeats: number): Promise<PairedLastTurn> {
  const k = conv.prompts.length - 1;
  const full = Array.from(conv.prompts[k]!);
  const n = conv.newTokens[k]!;
  const base = full.slice(0, full.length - n);
  const variants = [full.slice(full.length - n), benchPrompt(n, model.vocab.size, 4242)];
  const forced = conv.generated[k]!;
  const contextSize = full.length + forced.length + 256;
  const ctx = await model.createContext({ contextSize, sequences: 1, threads, batchThreads: threads, toolCallMarkers: false });
  try {
    const agent = ctx.createSession({ id: 'agent' });
    await agent.generate({ prompt: base, maxTokens: 1, temperature: 0 }).result;
    return await withNodeLlamaCpp(path, async (nm, m) => {
      const nctx = await nm.createContext({ contextSize, sequences: 1, threads, batchSize: 512 });
      try {
        const seq = nctx.getSequence();
        const bias = new m.TokenBias(nm.tokenizer);
        for (const t of eogTokens) bias.set(t as never, 'never');
        {
          const it = seq.evaluate(base as never, { temperature: 0, tokenBias: bias });
          await it.next();
          await it.return(undefined);
        }
        const out: PairedLastTurn = { llamux: [], nlc: [], ratios: [], prefilled: [] };
        for (let r = 0; r < repeats; r++) {
          progress(`replay: turn ${k} again, llamux and node-llama-cpp (${r + 1}/${repeats})`);
          const prompt = [...base, ...variants[r % 2]!];
          let t0 = performance.now();
          let first = -1;
          let prefilled = -1;
          for await (const ev of agent.generate({ prompt, grammar: tokenGrammar(forced), temperature: 0, maxTokens: 1 })) {
            if (first < 0 && ev.type !== 'final') first = performance.now() - t0;
            if (ev.type === 'final') prefilled = ev.prefilledTokens;
          }
          t0 = performance.now();
          await seq.adaptStateToTokens(prompt as never, false);
          const start = seq.nextTokenIndex;
          const it = seq.evaluate(prompt.slice(start) as never, { temperature: 0, tokenBias: bias });
          await it.next();
          const nlcMs = performance.now() - t0;
          await it.return(undefined);
          out.llamux.push(first);
          out.nlc.push(nlcMs);
          out.ratios.push(first / nlcMs);
          out.prefilled.push([prefilled, prompt.length - start]);
        }
        return out;
      } finally {
        await nctx.dispose();
      }
    });
  } finally {
    await ctx.dispose();
  }
}

/** llama-server with one slot: each turn's token prompt through /v1/completions; its slot keeps the common prefix. */
async function runLlamaServer(bin: string, path: string, conv: AgentConversation, threads: number): Promise<TurnResult[]> {
  const last = conv.prompts.at(-1)!.length + conv.generated.at(-1)!.length;
  const srv = await startLlamaServer(bin, path, { ctx: last + 256, parallel: 1, threads });
  const out: TurnResult[] = [];
  try {
    await streamTokenCompletion(srv.openai, benchPrompt(16, 1000, 99), 4, { ignore_eos: true });
    for (let k = 0; k < conv.prompts.length; k++) {
      progress(`replay: llama-server, turn ${k}/${conv.prompts.length - 1}`);
      const forced = conv.generated[k]!;
      // The pinned llama-server does not apply token-id grammars (it samples outside them and
      // fails), so it writes its own turn of the scripted length: the next prompt then differs
      // after this one and llama-server prefills the scripted turn too (counted in `prefilled`).
      const r = await streamTokenCompletion(srv.openai, conv.prompts[k]!, forced.length, { ignore_eos: true });
      out.push({ ttftMs: r.ttftMs, promptTokens: conv.prompts[k]!.length, prefilledTokens: r.prefilledTokens, totalMs: r.totalMs });
    }
  } finally {
    await srv.close();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The suite

export interface ReplayBenchOptions {
  quick?: boolean;
  threads?: number;
  model?: BenchModelName;
}

const ratio = (a: number, b: number): string => (b > 0 ? `${(a / b).toFixed(3)}x` : '-');

export async function runReplayBench(opts: ReplayBenchOptions = {}): Promise<string> {
  setLogger('silent');
  // Quick runs use one thread: llama.cpp's spinning thread pool on a busy 2-core machine stalls for whole
  // scheduler slices per step (quick mode measures nothing, it only has to finish).
  const threads = opts.threads ?? (opts.quick ? 1 : 2);
  const name: BenchModelName = opts.model ?? (opts.quick ? 'tiny-random' : '250m-q8_0');
  const size: ConversationSize = opts.quick ? { systemTokens: 300, resultTokens: 60, turns: 3 } : { systemTokens: 1500, resultTokens: 200, turns: 8 };
  progress(`replay: preparing ${name}`);
  const bm = await ensureBenchModel(name);
  const model = await loadModel(bm.path);
  let conv!: AgentConversation;
  const results: Partial<Record<SystemKey, TurnResult[]>> = {};
  let serverInfo: { promptMismatches: number[]; fallbacks: number } | undefined;
  let paired: PairedLastTurn | undefined;
  let detSession: TurnResult[] = [];
  let detCold: TurnResult[] = [];
  const eogTokens = [...model.vocab.eogTokens];
  const nVocab = model.vocab.size;
  try {
    progress('replay: building the conversation');
    conv = buildAgentConversation(model, size);
    results.session = await runLibrary(model, conv, true, threads);
    const s = await runServer(model, conv, threads);
    results.server = s.turns;
    serverInfo = { promptMismatches: s.promptMismatches, fallbacks: s.fallbacks };
    results.nocache = await runLibrary(model, conv, false, threads);
    // The same two library runs in deterministic mode (issue 26): only whether each turn's
    // log-probabilities match the cold run's is reported from them.
    detSession = await runLibrary(model, conv, true, threads, true);
    detCold = await runLibrary(model, conv, false, threads, true);
    paired = await pairedLastTurn(model, bm.path, conv, eogTokens, threads, opts.quick ? 2 : 6);
  } finally {
    await model.dispose();
  }
  results.nlc = await runNodeLlamaCpp(bm.path, conv, eogTokens, nVocab, threads);
  const ls = opts.quick ? { why: 'quick mode' } : llamaServerBinary();
  if (ls.path) results.llamaServer = await runLlamaServer(ls.path, bm.path, conv, threads);
  progressDone();

  const keys: SystemKey[] = ls.path ? ['session', 'server', 'nocache', 'nlc', 'llamaServer'] : ['session', 'server', 'nocache', 'nlc'];
  const short: Record<SystemKey, string> = { session: 'session', server: 'server', nocache: 'no cache', nlc: 'node-llama-cpp', llamaServer: 'llama-server' };
  const turns = conv.prompts.length;
  const label = (k: number) => (k === 0 ? '0 (system + user)' : String(k));
  const ttftRows: Row[] = [];
  const prefillRows: Row[] = [];
  for (let k = 0; k < turns; k++) {
    const row: Row = { turn: label(k), 'prompt tokens': conv.prompts[k]!.length, 'new tokens': conv.newTokens[k]! };
    const prow: Row = { turn: label(k), 'new tokens': conv.newTokens[k]! };
    for (const key of keys) {
      const t = results[key]![k]!;
      row[`${short[key]} ms`] = fmt(t.ttftMs);
      prow[short[key]] = t.prefilledTokens;
    }
    prow['server calls replayed'] = results.server![k]!.replayedCalls ?? 0;
    // the session's turn against the cold run's (prefixCache: false): logprobs equal bit for bit
    prow['session identical to no cache'] = results.session![k]!.logprobs === results.nocache![k]!.logprobs ? 'yes' : 'no';
    prow['deterministic: identical'] = detSession[k]!.logprobs === detCold[k]!.logprobs ? 'yes' : 'no';
    ttftRows.push(row);
    prefillRows.push(prow);
  }
  const lastK = turns - 1;
  const nlcLast = results.nlc![lastK]!.ttftMs;
  const summary: Row[] = keys.map((key) => {
    const t = results[key]![lastK]!;
    return {
      system: SYSTEM_LABELS[key],
      [`turn ${lastK} TTFT ms`]: fmt(t.ttftMs),
      'vs node-llama-cpp': ratio(t.ttftMs, nlcLast),
      prefilled: t.prefilledTokens,
      'prefilled / new tokens': ratio(t.prefilledTokens, conv.newTokens[lastK]!),
    };
  });
  const out: string[] = [];
  const desc = `${bm.description}, ${threads} thread${threads > 1 ? 's' : ''}; system prompt ${conv.systemTokens} tokens (${conv.tools.length} tool schemas), tool results ~${size.resultTokens} tokens`;
  out.push(table(`replay: time to first token per turn, ms (${desc})`, ttftRows));
  out.push(table('replay: prompt tokens prefilled per turn', prefillRows));
  out.push(table(`replay: turn ${lastK}`, summary));
  if (paired) {
    const lSpread = spread(paired.llamux);
    const nSpread = spread(paired.nlc);
    const rSpread = spread(paired.ratios);
    out.push(table(`replay: turn ${lastK} again, ${paired.llamux.length} times, llamux and node-llama-cpp taking turns (median, min–max)`, [
      { system: SYSTEM_LABELS.session, 'TTFT ms': fmtSpread(lSpread), 'vs node-llama-cpp, pair by pair': `${fmtSpread(rSpread, 3)}x`, prefilled: [...new Set(paired.prefilled.map((p) => p[0]))].join('/') },
      { system: SYSTEM_LABELS.nlc, 'TTFT ms': fmtSpread(nSpread), 'vs node-llama-cpp, pair by pair': '1.000x', prefilled: [...new Set(paired.prefilled.map((p) => p[1]))].join('/') },
    ]));
  }
  if (!ls.path) out.push(`note: llama-server not measured (${ls.why})\n`);
  else out.push('note: llama-server writes its own assistant turns (the pinned llama-server rejects token-id grammars), so from turn 1 on it also prefills the previous scripted turn\n');
  if (serverInfo && (serverInfo.fallbacks > 0 || serverInfo.promptMismatches.length > 0)) {
    out.push(`note: the server returned no tool call on ${serverInfo.fallbacks} turn(s); its prompt differed from the script's on turns [${serverInfo.promptMismatches.join(', ')}]\n`);
  }

  const series: PlotSeries[] = keys.map((key) => ({ label: SYSTEM_LABELS[key], values: results[key]!.map((t) => t.ttftMs) }));
  const svg = writeReplayPlot(series, {
    title: replayPlotTitle(name, opts.quick ?? false),
    subtitle: replayPlotSubtitle(bm.description, threads),
    file: join(packageRoot, 'bench', 'results', 'replay-ttft.svg'),
  });
  out.push(`plot: ${svg}`);
  if (!opts.quick) {
    const docs = join(packageRoot, 'docs', 'replay-ttft.svg');
    mkdirSync(dirname(docs), { recursive: true });
    copyFileSync(svg, docs);
    out.push(`plot copied to ${docs}`);
  }
  const file = writeResult('replay', {
    mode: opts.quick ? 'quick' : 'full',
    model: { name, description: bm.description, sizeBytes: bm.sizeBytes },
    settings: { threads, ...size, systemPromptTokens: conv.systemTokens, tools: conv.tools.length },
    conversation: { promptTokens: conv.prompts.map((p) => p.length), newTokens: conv.newTokens, generatedTokens: conv.generated.map((g) => g.length) },
    systems: SYSTEM_LABELS,
    turns: results,
    deterministic: { session: detSession, nocache: detCold },
    server: serverInfo,
    pairedLastTurn: paired,
    ratiosAtLastTurn: Object.fromEntries(
      keys.map((key) => [key, { ttftVsNodeLlamaCpp: results[key]![lastK]!.ttftMs / nlcLast, prefilledVsNewTokens: results[key]![lastK]!.prefilledTokens / conv.newTokens[lastK]! }]),
    ),
  });
  out.push(`results: ${file}`);
  return out.join('\n');
}
