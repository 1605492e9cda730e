// Issue 25 [formats] item 3: an 8-turn agent replay on the Qwen3.5 template (the zoo's qwen35
// model: hybrid memory, the real qwen35 vocabulary and template, random weights) where every
// assistant turn is reasoning and then an XML tool call, with the client keeping the reasoning in
// the history it sends back (`reasoning_content`) or stripping it. Prefilled tokens per turn are
// exact counts, so this suite is not sensitive to machine load (its TTFTs are).
//
//   llamux server, official `openai` client: `tool_choice: 'required'` and a reasoning budget
//   make the random model write a known shape (budget tokens of reasoning, the forced
//   `</think>`, then a grammar-forced call); the assistant message goes back with the server's
//   call id, so the server splices the stored exact tokens where the template renders them.
//   llama-server built from the same source, its defaults (jinja, `--ctx-checkpoints`), one slot,
//   `/v1/chat/completions` with the very same messages llamux was sent, writing its own turn of
//   the same length (it cannot be forced to llamux's turn: the call grammar it builds is lazy and
//   the model's weights are random). Its prefilled tokens: `timings.prompt_n`.
import { join } from 'node:path';
import type OpenAI from 'openai';
import { packageRoot } from '../../src/native/binding.js';
import { ensureZooModels } from '../../src/gguf/index.js';
import { loadModel, setLogger, type Model } from '../../src/index.js';
import { createServer } from '../../src/server/index.js';
import { llamaServerBinary, startLlamaServer } from '../drivers/llama-server.js';
import { progress, progressDone, table, writeResult, type Row } from '../report.js';
import { buildFamilyConversation } from './families.js';
import { USER } from './replay.js';

type Mode = 'keep' | 'strip';
type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;

interface Turn {
  promptTokens: number;
  prefilled: number;
  generated: number;
  ms: number;
}

export interface ReasoningReplayOptions {
  quick?: boolean;
  threads?: number;
  turns?: number;
  /** Reasoning tokens per assistant turn before the forced `</think>` (default 12). */
  budget?: number;
}

const SYSTEM = 'You are a coding agent working in a TypeScript repository. Think briefly, then call one tool.';

type Schema = Record<string, unknown>;

/** The schema with every parameter closed to a few values: the random model's forced calls then
 * end after a known number of tokens (a free string would run to max_tokens). */
export function closed(schema: Schema): Schema {
  const properties: Record<string, unknown> = {};
  for (const [k, v] of Object.entries((schema.properties ?? {}) as Record<string, { type?: string }>)) {
    properties[k] = v.type === 'integer' ? { ...v, enum: [1, 5, 20] } : { ...v, type: 'string', enum: ['src/cache/prefix.ts', 'test/cache', 'longestPrefix'] };
  }
  return { ...schema, properties };
}

function result(k: number): string {
  return JSON.stringify({ status: 'ok', output: `step ${k}: ${'the file lists each test and its status '.repeat(12).trim()}` });
}

export async function replayLlamux(model: Model, tools: OpenAI.Chat.Completions.ChatCompletionTool[], mode: Mode, turns: number, budget: number, threads: number): Promise<{ turns: Turn[]; sent: Message[][] }> {
  const server = await createServer({ model, port: 0, ctx: 16384, parallel: 1, threads });
  const { default: OpenAIClient } = await import('openai');
  const openai = new OpenAIClient({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 600_000 });
  const out: Turn[] = [];
  const sent: Message[][] = [];
  const messages: Message[] = [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: USER },
  ];
  try {
    for (let k = 0; k <= turns; k++) {
      progress(`reasoning-replay: llamux (${mode}), turn ${k}/${turns}`);
      sent.push(structuredClone(messages));
      const t0 = performance.now();
      const r = await openai.chat.completions.create(
        { model: 'qwen35', messages, tools, tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: 400, reasoning_budget: budget } as never,
        { headers: { 'x-llamux-conversation': `reasoning-${mode}` } },
      ) as OpenAI.Chat.Completions.ChatCompletion;
      const ms = performance.now() - t0;
      const usage = r.usage!;
      out.push({ promptTokens: usage.prompt_tokens, prefilled: usage.prompt_tokens - (usage.prompt_tokens_details?.cached_tokens ?? 0), generated: usage.completion_tokens, ms });
      const msg = r.choices[0]!.message as OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string };
      if (!msg.tool_calls?.length) throw new Error(`turn ${k}: the server returned no tool call (finish_reason ${r.choices[0]!.finish_reason})`);
      messages.push({
        role: 'assistant',
        content: msg.content && msg.content.length > 0 ? msg.content : null,
        tool_calls: msg.tool_calls,
        ...(mode === 'keep' && msg.reasoning_content !== undefined ? { reasoning_content: msg.reasoning_content } : {}),
      } as Message);
      messages.push({ role: 'tool', tool_call_id: msg.tool_calls[0]!.id, content: result(k) });
    }
  } finally {
    await server.close();
  }
  return { turns: out, sent };
}

async function replayLlamaServer(bin: string, path: string, tools: OpenAI.Chat.Completions.ChatCompletionTool[], sent: Message[][], lengths: number[], mode: Mode, threads: number): Promise<Turn[]> {
  const srv = await startLlamaServer(bin, path, { ctx: 16384, parallel: 1, threads });
  const out: Turn[] = [];
  try {
    for (let k = 0; k < sent.length; k++) {
      progress(`reasoning-replay: llama-server (${mode}), turn ${k}/${sent.length - 1}`);
      const t0 = performance.now();
      const res = await fetch(`${srv.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'qwen35', messages: sent[k], tools, temperature: 0, max_tokens: lengths[k], cache_prompt: true }),
      });
      const body = (await res.json()) as { usage?: { prompt_tokens: number; completion_tokens: number }; timings?: { prompt_n: number }; error?: unknown };
      if (!res.ok || !body.timings || !body.usage) throw new Error(`llama-server turn ${k}: ${res.status} ${JSON.stringify(body.error ?? body).slice(0, 300)}`);
      out.push({ promptTokens: body.usage.prompt_tokens, prefilled: body.timings.prompt_n, generated: body.usage.completion_tokens, ms: performance.now() - t0 });
    }
  } finally {
    await srv.close();
  }
  return out;
}

export async function runReasoningReplayBench(opts: ReasoningReplayOptions = {}): Promise<string> {
  const turns = opts.turns ?? (opts.quick ? 2 : 8);
  const budget = opts.budget ?? 12;
  const threads = opts.threads ?? 1;
  setLogger('silent');
  progress('reasoning-replay: preparing the zoo qwen35 model');
  const zoo = await ensureZooModels(join(packageRoot, '.cache', 'zoo'), { vocabDir: join(packageRoot, '.cache', 'llama.cpp-models'), architectures: ['qwen35'] });
  const path = zoo.qwen35.path;
  const model = await loadModel(path);
  const runs: Partial<Record<`${'llamux' | 'llamaServer'}-${Mode}`, Turn[]>> = {};
  let why: string | undefined;
  try {
    const conv = buildFamilyConversation(model, { systemTokens: opts.quick ? 300 : 1000, resultTokens: 16, turns: 0 });
    const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = conv.tools.map((t) => ({
      type: 'function',
      function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: closed(t.parameters as Schema) },
    }));
    const ls = opts.quick ? { why: 'quick mode' } : llamaServerBinary();
    why = ls.why;
    for (const mode of ['keep', 'strip'] as const) {
      const lx = await replayLlamux(model, tools, mode, turns, budget, threads);
      runs[`llamux-${mode}`] = lx.turns;
      if (ls.path) runs[`llamaServer-${mode}`] = await replayLlamaServer(ls.path, path, tools, lx.sent, lx.turns.map((t) => t.generated), mode, threads);
    }
  } finally {
    progressDone();
    await model.dispose();
  }
  const fmt = (n: number) => n.toLocaleString('en-US');
  const rows: Row[] = [];
  const keep = runs['llamux-keep']!;
  for (let k = 0; k <= turns; k++) {
    const prev = k === 0 ? 0 : keep[k - 1]!.promptTokens + keep[k - 1]!.generated;
    const row: Row = {
      turn: String(k),
      'prompt tokens (keep / strip)': `${fmt(keep[k]!.promptTokens)} / ${fmt(runs['llamux-strip']![k]!.promptTokens)}`,
      'new since last turn (keep)': fmt(keep[k]!.promptTokens - prev),
      'llamux prefilled, keep': fmt(keep[k]!.prefilled),
      'llamux prefilled, strip': fmt(runs['llamux-strip']![k]!.prefilled),
    };
    if (runs['llamaServer-keep']) {
      row['llama-server prefilled, keep'] = fmt(runs['llamaServer-keep'][k]!.prefilled);
      row['llama-server prefilled, strip'] = fmt(runs['llamaServer-strip']![k]!.prefilled);
    }
    rows.push(row);
  }
  const total = (t: Turn[] | undefined) => (t ? fmt(t.slice(1).reduce((a, b) => a + b.prefilled, 0)) : '—');
  rows.push({
    turn: `turns 1-${turns}`,
    'prompt tokens (keep / strip)': '',
    'new since last turn (keep)': '',
    'llamux prefilled, keep': total(runs['llamux-keep']),
    'llamux prefilled, strip': total(runs['llamux-strip']),
    ...(runs['llamaServer-keep'] ? { 'llama-server prefilled, keep': total(runs['llamaServer-keep']), 'llama-server prefilled, strip': total(runs['llamaServer-strip']) } : {}),
  });
  const file = writeResult('reasoning-replay', { turns, budget, threads, runs, llamaServer: why ?? 'measured' });
  return [
    table('reasoning-replay: prefilled tokens per turn, Qwen3.5 template (zoo qwen35, hybrid), reasoning kept vs stripped by the client', rows),
    ...(why ? [`note: llama-server not measured (${why})`, ''] : []),
    `results: ${file}`,
  ].join('\n');
}
