// Issue 37 [multimodal] item 6: a screenshot agent, 8 turns, each turn a new generated screenshot
// (a user message: text and the image) with every earlier screenshot kept in the history, and a
// tool call per turn (forced: `tool_choice: "required"` on closed enum arguments, so the random
// model writes a short call). The zoo qwen3 text model (real Qwen3 vocabulary and template,
// random weights) with a generated gemma3-style projector (src/gguf/projector.ts).
//
// Each turn, on each server, the same chat-completions messages twice: a measured request that
// writes one token (its time to the first streamed chunk, its prefilled tokens), then the turn
// itself writing the tool call. llamux's calls are the history of the next turn; llama-server,
// built from the same llama.cpp source and started with `--mmproj`, gets exactly those messages
// (its own call is discarded). Per turn: prompt and new tokens (rendered on the client), prefilled
// tokens (llamux: usage; llama-server: `timings.prompt_n`), images encoded and the encode time
// (llama-server: its log's "image slice encoded in N ms"; llamux: the images its prefill spans,
// each at the projector's measured encode time, since the engine does not report one), and TTFT.
import { copyFileSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { ensureZooModels, buildProjectorSpec, writeGgufFile, type ProjectorOptions } from '../../src/gguf/index.js';
import { ChatTemplate, buildChatPromptWithMedia, loadModel, setLogger, type ChatContentPart, type ChatMessage, type Model } from '../../src/index.js';
import { native, packageRoot } from '../../src/native/binding.js';
import { createServer } from '../../src/server/index.js';
import { builtLlamaServer, llamaServerBinary, startLlamaServer } from '../drivers/llama-server.js';
import { postSse, type SseEvent } from '../drivers/sse.js';
import { fmt, progress, progressDone, table, writeResult, type Row } from '../report.js';
import { screenshotPng } from '../screenshots.js';
import { fmtSpread, pairedRatio, spread, type Spread } from '../stats.js';
import { tempDirFor } from '../util.js';

type Json = Record<string, unknown>;

const SYSTEM = 'You are a computer-use agent. Each user turn brings a screenshot of the screen. Look at it, then call exactly one tool to act on the screen.';
const TASK = 'Open the settings window and turn on dark mode. Here is the screen now.';
const TOOLS = [
  { type: 'function', function: { name: 'click', description: 'Click a named element of the screen.', parameters: { type: 'object', properties: { target: { type: 'string', enum: ['menu', 'settings', 'toggle', 'ok'] } }, required: ['target'] } } },
  { type: 'function', function: { name: 'key', description: 'Press a key.', parameters: { type: 'object', properties: { key: { type: 'string', enum: ['enter', 'escape', 'tab'] } }, required: ['key'] } } },
];
const TEMPLATE_KWARGS = { enable_thinking: false };

export interface MultimodalOptions {
  quick?: boolean;
  threads?: number;
  turns?: number;
  runs?: number;
}

interface TurnMeasure {
  promptTokens: number;
  prefilled: number;
  ttftMs: number;
  /** Images whose embeddings this turn computed. */
  imagesEncoded: number;
  /** Their encode time (llama-server: its log; llamux: images x the measured per-image time). */
  encodeMs: number;
}

/** The messages as sent (OpenAI chat shape), and the same as llamux chat messages for the client-side counts. */
interface Turn {
  sent: Json[];
  chat: ChatMessage[];
}

/** Time to the first streamed chunk that carries a choice (both servers send it once the first token exists). */
function firstChoiceMs(events: SseEvent[], totalMs: number): number {
  return events.find((e) => Array.isArray(e.data?.choices) && (e.data!.choices as unknown[]).length > 0)?.atMs ?? totalMs;
}

function usageOf(events: SseEvent[]): { prompt: number; cached: number; promptN?: number } {
  let prompt = -1;
  let cached = 0;
  let promptN: number | undefined;
  for (const e of events) {
    const u = e.data?.usage as Json | undefined;
    if (u) {
      prompt = (u.prompt_tokens as number | undefined) ?? prompt;
      cached = ((u.prompt_tokens_details as Json | undefined)?.cached_tokens as number | undefined) ?? cached;
    }
    const t = e.data?.timings as Json | undefined;
    if (typeof t?.prompt_n === 'number') promptN = t.prompt_n;
  }
  return promptN !== undefined ? { prompt, cached, promptN } : { prompt, cached };
}

const request = (messages: Json[], maxTokens: number, stream: boolean): Json => ({
  model: 'qwen3',
  messages,
  tools: TOOLS,
  tool_choice: 'required',
  parallel_tool_calls: false,
  temperature: 0,
  max_tokens: maxTokens,
  chat_template_kwargs: TEMPLATE_KWARGS,
  ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
});

async function postJson(url: string, body: Json): Promise<Json> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = (await r.json()) as Json;
  if (!r.ok) throw new Error(`${url}: ${r.status} ${JSON.stringify(json).slice(0, 300)}`);
  return json;
}

/** llamux runs the conversation: per turn the measured one-token request, then the turn's tool call. */
async function llamuxConversation(url: string, shots: Buffer[], label: string): Promise<{ turns: Turn[]; measured: Array<{ prompt: number; prefilled: number; ttftMs: number }>; calls: number }> {
  const sent: Json[] = [{ role: 'system', content: SYSTEM }];
  const chat: ChatMessage[] = [{ role: 'system', content: SYSTEM }];
  const turns: Turn[] = [];
  const measured: Array<{ prompt: number; prefilled: number; ttftMs: number }> = [];
  let calls = 0;
  for (let k = 0; k < shots.length; k++) {
    progress(`multimodal: ${label}, llamux turn ${k + 1}/${shots.length}`);
    const text = k === 0 ? TASK : `Step ${k} done. Here is the screen now.`;
    const dataUrl = `data:image/png;base64,${shots[k]!.toString('base64')}`;
    sent.push({ role: 'user', content: [{ type: 'text', text }, { type: 'image_url', image_url: { url: dataUrl } }] });
    chat.push({ role: 'user', content: [{ type: 'text', text }, { type: 'image', image: shots[k]! } satisfies ChatContentPart] });
    turns.push({ sent: structuredClone(sent), chat: chat.slice() });
    const r = await postSse(`${url}/v1/chat/completions`, request(sent, 1, true));
    if (r.status !== 200) throw new Error(`llamux turn ${k + 1}: ${r.status} ${r.errorBody?.slice(0, 300)}`);
    const u = usageOf(r.events);
    measured.push({ prompt: u.prompt, prefilled: u.prompt - u.cached, ttftMs: firstChoiceMs(r.events, r.totalMs) });
    const done = await postJson(`${url}/v1/chat/completions`, request(sent, 96, false));
    const message = ((done.choices as Json[])[0]!.message ?? {}) as Json;
    const call = ((message.tool_calls as Json[] | undefined) ?? [])[0];
    if (call) {
      calls++;
      const f = call.function as Json;
      sent.push({ role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: f.name, arguments: f.arguments } }] });
      sent.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ ok: true, step: k + 1 }) });
      chat.push({ role: 'assistant', content: null, toolCalls: [{ id: call.id as string, name: f.name as string, arguments: f.arguments as string }] });
      chat.push({ role: 'tool', toolCallId: call.id as string, content: JSON.stringify({ ok: true, step: k + 1 }) });
    } else {
      // the model wrote text: the agent goes on with it
      const content = (message.content as string | null) ?? '';
      sent.push({ role: 'assistant', content });
      chat.push({ role: 'assistant', content });
    }
  }
  return { turns, measured, calls };
}

/** llama-server fed the same messages: the measured one-token request, then the turn (its own call discarded). */
async function llamaServerTurns(bin: string, modelPath: string, projectorPath: string, turns: Turn[], ctx: number, threads: number, label: string): Promise<TurnMeasure[]> {
  let log = '';
  const srv = await startLlamaServer(bin, modelPath, { ctx, parallel: 1, threads, extraArgs: ['--mmproj', projectorPath, '-lv', '4'], onStderr: (t) => (log += t) });
  const out: TurnMeasure[] = [];
  try {
    for (const [k, t] of turns.entries()) {
      progress(`multimodal: ${label}, llama-server turn ${k + 1}/${turns.length}`);
      const from = log.length;
      const r = await postSse(`${srv.url}/v1/chat/completions`, { ...request(t.sent, 1, true), cache_prompt: true });
      if (r.status !== 200) throw new Error(`llama-server turn ${k + 1}: ${r.status} ${r.errorBody?.slice(0, 300)}`);
      // its log lines arrive a moment after the response
      await new Promise((res) => setTimeout(res, 20));
      const enc = encodesInLog(log.slice(from));
      const u = usageOf(r.events);
      out.push({ promptTokens: u.prompt, prefilled: u.promptN ?? -1, ttftMs: firstChoiceMs(r.events, r.totalMs), imagesEncoded: enc.images, encodeMs: enc.ms });
      await postJson(`${srv.url}/v1/chat/completions`, { ...request(t.sent, 96, false), cache_prompt: true });
    }
  } finally {
    await srv.close();
  }
  return out;
}

/** A llama-server log line's time stamp (`M.SS.mmm.uuu`) in ms. */
function stampMs(line: string): number | undefined {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+) /.exec(line);
  return m ? Number(m[1]) * 60_000 + Number(m[2]) * 1000 + Number(m[3]) + Number(m[4]) / 1000 : undefined;
}

/**
 * Images llama-server encoded, and the time, from its trace log (-lv 4): "encoding mtmd batch
 * ... n_chunks = N" is written before the encode, "decoding image batch" right after it.
 */
function encodesInLog(log: string): { images: number; ms: number } {
  const lines = log.split('\n');
  let images = 0;
  let ms = 0;
  lines.forEach((line, i) => {
    const m = /encoding mtmd batch .*n_chunks = (\d+)/.exec(line);
    if (!m) return;
    images += Number(m[1]);
    const t0 = stampMs(line);
    const next = lines.slice(i + 1).find((l) => /decoding image batch/.test(l));
    const t1 = next !== undefined ? stampMs(next) : undefined;
    if (t0 !== undefined && t1 !== undefined) ms += t1 - t0;
  });
  return { images, ms };
}

/** Where each image's run of media ids (negative ids) starts and ends in a prompt. */
function imageRuns(tokens: Int32Array): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i]! >= 0) continue;
    const start = i;
    while (i + 1 < tokens.length && tokens[i + 1]! < 0) i++;
    runs.push([start, i + 1]);
  }
  return runs;
}

/** A generated projector for the model, written once under .cache/mmproj. */
async function benchProjector(options: ProjectorOptions): Promise<string> {
  const dir = join(packageRoot, '.cache', 'mmproj');
  const path = join(dir, `bench-gemma3-${createHash('sha256').update(JSON.stringify(options)).digest('hex').slice(0, 16)}.gguf`);
  if (!existsSync(path)) {
    mkdirSync(dir, { recursive: true });
    await writeGgufFile(path, buildProjectorSpec(options).spec);
  }
  return path;
}

export async function runMultimodalBench(opts: MultimodalOptions = {}): Promise<string> {
  const quick = opts.quick ?? false;
  const nTurns = opts.turns ?? 8;
  const nRuns = opts.runs ?? (quick ? 1 : 3);
  const threads = opts.threads ?? 2;
  const [width, height] = quick ? [128, 80] : [640, 400];
  setLogger('silent');
  const loadBefore = loadavg()[0]!;
  progress('multimodal: preparing the zoo qwen3 model and a projector');
  const zoo = await ensureZooModels(join(packageRoot, '.cache', 'zoo'), { vocabDir: join(packageRoot, '.cache', 'llama.cpp-models'), architectures: ['qwen3'] });
  const projectorOptions: ProjectorOptions = quick
    ? { projectionDim: zoo.qwen3.nEmbd, imageSize: 32, patchSize: 4, scaleFactor: 2 }
    : { projectionDim: zoo.qwen3.nEmbd, imageSize: 224, patchSize: 14, scaleFactor: 2, visionEmbd: 128, blocks: 4, heads: 4, feedForward: 256 };
  const tokensPerImage = buildProjectorSpec(projectorOptions).description.tokensPerImage;
  const dir = tempDirFor('multimodal');
  // private copies: the shared folders may change while llama-server still has to open them
  const modelPath = join(dir, 'qwen3.gguf');
  const projectorPath = join(dir, 'mmproj.gguf');
  copyFileSync(zoo.qwen3.path, modelPath);
  copyFileSync(await benchProjector(projectorOptions), projectorPath);
  const shots = Array.from({ length: nTurns }, (_, k) => screenshotPng(width, height, k));
  const ctx = 8192;
  const lsBin = quick ? builtLlamaServer() : llamaServerBinary();
  const model: Model = await loadModel(modelPath, { projector: projectorPath });
  const llamux: TurnMeasure[][] = [];
  const ls: TurnMeasure[][] = [];
  let turns: Turn[] = [];
  let calls = 0;
  const newTokens: number[] = [];
  /** Tokens no cache can hold: past the longest prefix shared with the previous turn's prompt (the template may render that turn's end differently now). */
  const mustPrefill: number[] = [];
  const prompts: Int32Array[] = [];
  let encodeOne: Spread;
  try {
    // The projector's encode time for one screenshot (decode, resize, ViT, projection), as the
    // engine runs it: what each image llamux's prefill spans costs.
    progress('multimodal: timing the projector on one screenshot');
    await native.mediaEmbeddings(model.nativeHandle(), shots[0]!);
    const times: number[] = [];
    for (const s of shots.slice(0, 5)) {
      const t0 = performance.now();
      await native.mediaEmbeddings(model.nativeHandle(), s);
      times.push(performance.now() - t0);
    }
    encodeOne = spread(times);
    for (let run = 0; run < nRuns; run++) {
      const label = `run ${run + 1}/${nRuns}`;
      // fresh servers each run: nothing of a run's KV helps the next
      const server = await createServer({ model, port: 0, ctx, parallel: 1, threads, log: () => {} });
      let conv: Awaited<ReturnType<typeof llamuxConversation>>;
      try {
        conv = await llamuxConversation(server.url, shots, label);
      } finally {
        await server.close();
      }
      if (run === 0) {
        turns = conv.turns;
        calls = conv.calls;
        const template = ChatTemplate.fromModel(model);
        const tools = TOOLS.map((t) => ({ name: t.function.name, description: t.function.description, parameters: t.function.parameters }));
        for (const t of turns) {
          const full = await buildChatPromptWithMedia(model, t.chat, { template, tools, variables: TEMPLATE_KWARGS });
          prompts.push(full.tokens);
          // new: what follows the last assistant turn (the tool result, the new user turn and
          // its screenshot, the generation prompt): what no cache can hold
          const lastAssistant = t.chat.map((m) => m.role).lastIndexOf('assistant');
          const before = lastAssistant < 0 ? 0 : (await buildChatPromptWithMedia(model, t.chat.slice(0, lastAssistant + 1), { template, tools, variables: TEMPLATE_KWARGS, addGenerationPrompt: false })).tokens.length;
          newTokens.push(full.tokens.length - before);
          const prev = prompts[prompts.length - 2];
          mustPrefill.push(full.tokens.length - (prev ? commonPrefix(prev, full.tokens) : 0));
        }
      }
      llamux.push(
        conv.measured.map((m, k) => {
          // the images whose run lies in the prefilled tail of the prompt
          const tail = prompts[k]!.length - m.prefilled;
          const images = imageRuns(prompts[k]!).filter(([, end]) => end > tail).length;
          return { promptTokens: m.prompt, prefilled: m.prefilled, ttftMs: m.ttftMs, imagesEncoded: images, encodeMs: images * encodeOne.median };
        }),
      );
      if (lsBin.path) ls.push(await llamaServerTurns(lsBin.path, modelPath, projectorPath, turns, ctx, threads, label));
    }
  } finally {
    progressDone();
    await model.dispose();
    rmSync(dir, { recursive: true, force: true });
  }

  const per = (runs: TurnMeasure[][], k: number, f: (t: TurnMeasure) => number): Spread => spread(runs.map((r) => f(r[k]!)));
  const rows: Row[] = turns.map((_, k) => {
    const l = llamux[0]![k]!;
    const s = ls[0]?.[k];
    return {
      turn: k + 1,
      'prompt tokens': fmt(l.promptTokens, 0),
      'new tokens': fmt(newTokens[k]!, 0),
      'must prefill': fmt(mustPrefill[k]!, 0),
      'llamux prefilled': fmt(l.prefilled, 0),
      'llama-server prefilled': s ? fmt(s.prefilled, 0) : '-',
      'images encoded (llamux / llama-server)': `${l.imagesEncoded} / ${s ? s.imagesEncoded : '-'}`,
      'llamux encode ms': fmt(l.encodeMs),
      'llama-server encode ms': s ? fmtSpread(per(ls, k, (t) => t.encodeMs)) : '-',
      'llamux TTFT ms': fmtSpread(per(llamux, k, (t) => t.ttftMs)),
      'llama-server TTFT ms': s ? fmtSpread(per(ls, k, (t) => t.ttftMs)) : '-',
      'TTFT llamux / llama-server': s ? pairedRatio(per(llamux, k, (t) => t.ttftMs), per(ls, k, (t) => t.ttftMs)) : '-',
    };
  });
  const last = nTurns - 1;
  // only what no cache can hold (the new turn, and what the template renders anew), one image a turn
  const onlyNew = llamux[0]!.every((t, k) => t.prefilled <= mustPrefill[k]! && t.imagesEncoded === 1);
  const ratio = ls.length ? spread(llamux.map((r, i) => r[last]!.ttftMs / ls[i]![last]!.ttftMs)).median : NaN;
  const summary: Row[] = [
    {
      [`llamux turn ${nTurns} TTFT ms`]: fmtSpread(per(llamux, last, (t) => t.ttftMs)),
      [`llama-server turn ${nTurns} TTFT ms`]: ls.length ? fmtSpread(per(ls, last, (t) => t.ttftMs)) : '-',
      'llamux / llama-server': ls.length ? `${ratio.toFixed(2)}x` : '-',
      'target ≤ 0.5x': ls.length ? (ratio <= 0.5 ? 'met' : 'missed') : '-',
      'llamux encoded 1 image and prefilled only what no cache holds': onlyNew ? 'yes' : 'no',
      [`prefilled turns 2-${nTurns} (llamux / llama-server)`]: `${fmt(sum(llamux[0]!.slice(1).map((t) => t.prefilled)), 0)} / ${ls.length ? fmt(sum(ls[0]!.slice(1).map((t) => t.prefilled)), 0) : '-'}`,
    },
  ];
  const out = [
    table(`multimodal: screenshot agent, turn ${nTurns} (zoo qwen3 + generated gemma3 projector, ${tokensPerImage} tokens an image, ${width}x${height} screenshots; ${nRuns} run${nRuns > 1 ? 's' : ''}, median (min–max); ${threads} threads)`, summary),
    table('multimodal: per turn (prefilled and new tokens, images encoded, encode time and TTFT)', rows),
    `tool calls written by llamux: ${calls} of ${nTurns} turns; one image encode on llamux's projector: ${fmtSpread(encodeOne!)} ms (llamux encode ms = images its prefill spans x this median; llama-server's from the time stamps of its trace log)`,
    'new tokens: what follows the last assistant turn (tool result, user text, screenshot, generation prompt); must prefill: past the longest prefix shared with the previous turn\'s prompt, where the template renders the previous turn differently once it is history (Qwen3 drops its empty <think></think> block), so no cache can hold it',
  ];
  // the times are only as good as the machine was quiet: say how busy it was
  out.push(`load average (1 min) at the start and the end: ${loadBefore.toFixed(1)} → ${loadavg()[0]!.toFixed(1)}`);
  if (lsBin.why) out.push(`note: llama-server not measured (${lsBin.why})`);
  const file = writeResult('multimodal', { mode: quick ? 'quick' : 'full', turns: nTurns, runs: nRuns, threads, tokensPerImage, width, height, newTokens, encodeOneMs: encodeOne!, llamux, llamaServer: lsBin.path ? ls : { notMeasured: lsBin.why } });
  out.push(`results: ${file}`);
  return out.join('\n');
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

function commonPrefix(a: Int32Array, b: Int32Array): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}
