// Issue 41 [agents] item 4: a cache-correctness suite for any OpenAI-compatible server.
//
// Many conversations at once, more than the server has sequences (slots), so that caches evict,
// spill and restore. Each conversation carries its own marker (a set of marker words in its first
// user turn, after a system prompt every conversation shares) and asks for it back every turn.
// A reply that spells another conversation's marker is a cross-conversation cache mix-up; a
// reply that differs from the cold answer to the same prompt at temperature 0 is a cache that
// changed the answer. The prompts never depend on the replies (the assistant turns sent back are
// canned), so every request's cold answer is known before the concurrent phase.
//
//   --url URL   checks that server (its first /v1/models id; cold answers with
//               `cache_prompt: false`, else the first answer it gives to each prompt).
//   no --url    starts llamux (default and deterministic mode) and llama-server built from the
//               same llama.cpp source, on the marker-echo model (bench/echo-model.ts), and runs
//               the same checks on both; for llamux also kill -9 while the disk tier is being
//               written and a restart on it (plus a tier file cut in half), a corrupted tier
//               folder, and tenant isolation (--isolate-tenants).
import { closeSync, openSync, readdirSync, readSync, rmSync, statSync, truncateSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { ChatTemplate, buildChatPrompt, loadModel, setLogger, type ChatMessage, type TokenLogprob } from '../../src/index.js';
import { createServer } from '../../src/server/index.js';
import { ensureEchoModel, fillerText, markerOf, markerWordsIn } from '../echo-model.js';
import { builtLlamaServer, llamaServerBinary, startLlamaServer } from '../drivers/llama-server.js';
import { startLlamuxProcess } from '../drivers/llamux-process.js';
import { progress, progressDone, table, writeResult, type Row } from '../report.js';
import { tempDirFor } from '../util.js';
import { Prng } from '../../src/gguf/prng.js';

type Msg = { role: 'system' | 'user' | 'assistant'; content: string };

export interface CorrectnessOptions {
  quick?: boolean;
  threads?: number;
  /** Check this OpenAI-compatible server instead of starting llamux and llama-server. */
  url?: string;
}

interface Size {
  conversations: number;
  sequences: number;
  turns: number;
  rounds: number;
  fillerRepeats: number;
}

/** The messages of conversation `c`'s request `t` (0-based): the same for every server and round. */
export function messagesAt(c: number, t: number, fillerRepeats: number): Msg[] {
  const marker = markerOf(c).join(' ');
  const msgs: Msg[] = [
    { role: 'system', content: fillerText(fillerRepeats) },
    { role: 'user', content: `Conversation marker: ${marker}. Reply with the marker.` },
  ];
  for (let j = 0; j < t; j++) {
    msgs.push({ role: 'assistant', content: marker });
    msgs.push({ role: 'user', content: `Turn ${j + 2}: the marker again.` });
  }
  return msgs;
}

interface Reply {
  status: number;
  text: string;
  /** JSON of each token's [logprob, top logprobs...] (empty when the server sent none). */
  logprobs: string;
  cached: number;
  error?: string;
}

interface Target {
  url: string;
  model: string;
  headers?: Record<string, string>;
}

async function chat(t: Target, messages: Msg[], headers: Record<string, string> = {}, extra: Record<string, unknown> = {}): Promise<Reply> {
  try {
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...t.headers, ...headers },
      body: JSON.stringify({ model: t.model, messages, temperature: 0, max_tokens: 32, logprobs: true, top_logprobs: 3, ...extra }),
    });
    const body = (await res.json()) as {
      choices?: Array<{ message?: { content?: string | null }; logprobs?: { content?: Array<{ logprob: number; top_logprobs?: Array<{ logprob: number }> }> | null } }>;
      usage?: { prompt_tokens_details?: { cached_tokens?: number } };
      error?: unknown;
    };
    if (!res.ok) return { status: res.status, text: '', logprobs: '', cached: 0, error: JSON.stringify(body.error ?? body).slice(0, 300) };
    const choice = body.choices?.[0];
    const lp = choice?.logprobs?.content ?? [];
    return {
      status: res.status,
      text: (choice?.message?.content ?? '').trim(),
      logprobs: JSON.stringify(lp.map((l) => [l.logprob, ...(l.top_logprobs ?? []).map((x) => x.logprob)])),
      cached: body.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    };
  } catch (e) {
    return { status: 0, text: '', logprobs: '', cached: 0, error: (e as Error).message };
  }
}

const key = (c: number, t: number) => `${c}:${t}`;

interface PhaseResult {
  replies: number;
  errors: string[];
  /** Replies whose marker words are not their conversation's. */
  wrongMarker: string[];
  /** Replies that spell another conversation's marker. */
  crossConversation: string[];
  /** Replies whose text differs from the cold answer. */
  differsFromCold: string[];
  /** Replies whose log-probabilities differ from the cold answer's (bit for bit). */
  logprobsDiffer: string[];
  /** Replies with cached_tokens > 0. */
  cachedReplies: number;
}

function emptyPhase(): PhaseResult {
  return { replies: 0, errors: [], wrongMarker: [], crossConversation: [], differsFromCold: [], logprobsDiffer: [], cachedReplies: 0 };
}

function judge(r: PhaseResult, c: number, t: number, reply: Reply, cold: Map<string, Reply>, conversations: number): void {
  if (reply.status !== 200) {
    r.errors.push(`${key(c, t)}: ${reply.status} ${reply.error ?? ''}`);
    return;
  }
  r.replies++;
  if (reply.cached > 0) r.cachedReplies++;
  const own = markerOf(c).join(' ');
  const got = markerWordsIn(reply.text).join(' ');
  if (got !== own) {
    r.wrongMarker.push(`${key(c, t)}: "${reply.text}"`);
    const other = Array.from({ length: conversations }, (_, j) => j).find((j) => j !== c && markerOf(j).join(' ') === got);
    if (other !== undefined) r.crossConversation.push(`${key(c, t)} shows conversation ${other}'s marker`);
  }
  const ref = cold.get(key(c, t));
  if (ref) {
    if (ref.text !== reply.text) r.differsFromCold.push(`${key(c, t)}: "${reply.text}" vs cold "${ref.text}"`);
    if (ref.logprobs !== reply.logprobs) r.logprobsDiffer.push(key(c, t));
  }
}

/** Every conversation at once, each sending its turns in order, `rounds` times over; even
 * conversations name themselves (`x-llamux-conversation`), odd ones rely on the prefix cache. */
async function concurrentPhase(t: Target, s: Size, cold: Map<string, Reply>, label: string, runId: string, stopAfter?: { conversations: number; then: () => Promise<void> }): Promise<PhaseResult> {
  const r = emptyPhase();
  const rng = new Prng(7);
  const jitter = Array.from({ length: s.conversations * s.turns * s.rounds }, () => Math.floor(rng.next() * 20));
  let done = 0;
  let stopping: Promise<void> | undefined;
  await Promise.all(
    Array.from({ length: s.conversations }, async (_, c) => {
      const headers: Record<string, string> = c % 2 === 0 ? { 'x-llamux-conversation': `corr-${runId}-${c}` } : {};
      for (let round = 0; round < s.rounds; round++) {
        for (let turn = 0; turn < s.turns; turn++) {
          await new Promise((res) => setTimeout(res, jitter[(c * s.rounds + round) * s.turns + turn]!));
          if (stopping) return;
          const reply = await chat(t, messagesAt(c, turn, s.fillerRepeats), headers);
          if (stopping) return; // requests cut by the kill are not judged
          judge(r, c, turn, reply, cold, s.conversations);
          progress(`correctness: ${label}, ${r.replies + r.errors.length} replies`);
        }
      }
      done++;
      if (stopAfter && done === stopAfter.conversations) stopping = stopAfter.then();
    }),
  );
  await stopping;
  return r;
}

/** Cold answers from the server itself: one request at a time, `cache_prompt: false` where the
 * server takes it (llama-server), else the first answer to each prompt. */
async function serverCold(t: Target, s: Size): Promise<{ cold: Map<string, Reply>; how: string }> {
  const cold = new Map<string, Reply>();
  let field = true;
  for (let c = 0; c < s.conversations; c++) {
    for (let turn = 0; turn < s.turns; turn++) {
      progress(`correctness: cold answers ${c * s.turns + turn + 1}/${s.conversations * s.turns}`);
      let reply = await chat(t, messagesAt(c, turn, s.fillerRepeats), {}, field ? { cache_prompt: false } : {});
      if (field && reply.status === 400) {
        field = false;
        reply = await chat(t, messagesAt(c, turn, s.fillerRepeats));
      }
      if (reply.status !== 200) throw new Error(`cold answer ${key(c, turn)}: ${reply.status} ${reply.error ?? ''}`);
      cold.set(key(c, turn), reply);
    }
  }
  return { cold, how: field ? 'cache_prompt: false' : 'first answer to each prompt (the server refused cache_prompt)' };
}

/** llamux's cold answers: the library on a context without prefix cache, the same model and
 * template, greedy, with the server's logprob shape. */
async function libraryCold(modelPath: string, s: Size, deterministic: boolean, threads: number): Promise<Map<string, Reply>> {
  const model = await loadModel(modelPath);
  const cold = new Map<string, Reply>();
  try {
    const template = ChatTemplate.fromModel(model);
    const ctx = await model.createContext({ contextSize: 4096, sequences: 1, threads, batchThreads: threads, prefixCache: false, cacheRamMb: 0, deterministic });
    try {
      for (let c = 0; c < s.conversations; c++) {
        for (let turn = 0; turn < s.turns; turn++) {
          progress(`correctness: llamux cold answers${deterministic ? ' (deterministic)' : ''} ${c * s.turns + turn + 1}/${s.conversations * s.turns}`);
          const prompt = buildChatPrompt(model, messagesAt(c, turn, s.fillerRepeats) as ChatMessage[], { template });
          const res = await ctx.complete({ prompt: prompt.tokens, maxTokens: 32, temperature: 0, logprobs: 3 });
          // The server's entries stop before the end-of-generation token.
          const lp: TokenLogprob[] = (res.logprobs ?? []).slice(0, res.generatedTokens);
          cold.set(key(c, turn), { status: 200, text: res.text.trim(), logprobs: JSON.stringify(lp.map((l) => [l.logprob, ...l.top.map((x) => x.logprob)])), cached: 0 });
        }
      }
    } finally {
      await ctx.dispose();
    }
  } finally {
    await model.dispose();
  }
  return cold;
}

// ---------------------------------------------------------------------------------------------
// Verdicts

type Cell = string;
const pass = (detail: string): Cell => `pass (${detail})`;
const fail = (detail: string): Cell => `FAIL (${detail})`;

function phaseCells(p: PhaseResult, bitExact: boolean): { markers: Cell; cross: Cell; cold: Cell; exact?: Cell } {
  const n = p.replies;
  const err = p.errors.length ? `; ${p.errors.length} errors: ${p.errors[0]}` : '';
  return {
    markers: p.wrongMarker.length === 0 && p.errors.length === 0 ? pass(`${n}/${n}`) : fail(`${p.wrongMarker.length} of ${n} wrong${p.wrongMarker[0] ? `, e.g. ${p.wrongMarker[0]}` : ''}${err}`),
    cross: p.crossConversation.length === 0 ? pass(`0 of ${n}`) : fail(`${p.crossConversation.length}: ${p.crossConversation[0]}`),
    cold: p.differsFromCold.length === 0 ? pass(`${n}/${n}`) : fail(`${p.differsFromCold.length} differ, e.g. ${p.differsFromCold[0]}`),
    ...(bitExact ? { exact: p.logprobsDiffer.length === 0 && p.differsFromCold.length === 0 ? pass(`${n}/${n} text and log-probabilities`) : fail(`${p.logprobsDiffer.length} log-probability lists differ (${p.logprobsDiffer.slice(0, 3).join(', ')})`) } : {}),
  };
}

function merge(a: PhaseResult, b: PhaseResult): PhaseResult {
  return {
    replies: a.replies + b.replies,
    errors: [...a.errors, ...b.errors],
    wrongMarker: [...a.wrongMarker, ...b.wrongMarker],
    crossConversation: [...a.crossConversation, ...b.crossConversation],
    differsFromCold: [...a.differsFromCold, ...b.differsFromCold],
    logprobsDiffer: [...a.logprobsDiffer, ...b.logprobsDiffer],
    cachedReplies: a.cachedReplies + b.cachedReplies,
  };
}

const CHECKS = {
  markers: 'every reply carries its own marker',
  cross: "no reply shows another conversation's marker",
  cold: 'cached answer = cold answer (temperature 0)',
  exact: 'deterministic mode: cached = cold, bit-exact (text and log-probabilities)',
  kill: 'kill -9 while the disk tier is written, restart: answers correct',
  half: 'a tier file cut in half is not read as valid',
  corrupt: 'corrupted tier files: recomputed, same answer',
  tenants: 'tenant isolation: no cached_tokens across tenants',
} as const;
type CheckKey = keyof typeof CHECKS;

// ---------------------------------------------------------------------------------------------
// llamux's own checks

function tierFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) out.push(p);
    }
  };
  walk(dir);
  return out;
}

/** XORs `n` bytes at three quarters of the file (inside the saved state, past any header). */
function flipBytes(path: string, n = 16): void {
  const size = statSync(path).size;
  if (size === 0) return;
  const at = Math.min(size - 1, Math.floor(size * 0.75));
  const len = Math.min(n, size - at);
  const fd = openSync(path, 'r+');
  try {
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, at);
    for (let i = 0; i < len; i++) buf[i] = buf[i]! ^ 0xff;
    writeSync(fd, buf, 0, len, at);
  } finally {
    closeSync(fd);
  }
}

/** The last turn of every conversation, one request at a time: the first request can only find
 * KV in the disk tier, so its cached_tokens says whether a file was trusted. */
async function verifyAfterRestart(t: Target, s: Size, cold: Map<string, Reply>, runId: string): Promise<{ phase: PhaseResult; firstCached: number }> {
  const r = emptyPhase();
  let firstCached = -1;
  for (let c = 0; c < s.conversations; c++) {
    const headers: Record<string, string> = c % 2 === 0 ? { 'x-llamux-conversation': `corr-${runId}-${c}` } : {};
    const reply = await chat(t, messagesAt(c, s.turns - 1, s.fillerRepeats), headers);
    if (firstCached < 0) firstCached = reply.cached;
    judge(r, c, s.turns - 1, reply, cold, s.conversations);
  }
  return { phase: r, firstCached };
}

async function diskChecks(modelPath: string, s: Size, cold: Map<string, Reply>, threads: number, detail: Record<string, unknown>): Promise<Partial<Record<CheckKey, Cell>>> {
  const dir = tempDirFor('correctness-tier');
  const options = { modelPath, ctx: s.sequences * 1024, parallel: s.sequences, threads, deterministic: true, cacheDir: dir, cacheRamMb: 4 };
  const out: Partial<Record<CheckKey, Cell>> = {};
  // 1. every conversation once, until the disk tier holds files; then again, and kill -9 once
  // half the conversations have finished (the others mid-turn, finished turns being written)
  const a = await startLlamuxProcess(options);
  const target: Target = { url: a.url, model: 'echo' };
  const warm = await concurrentPhase(target, { ...s, rounds: 1 }, cold, 'llamux (disk tier), first round', 'disk');
  const diskEntries = async (url: string): Promise<number> => (((await (await fetch(`${url}/health`)).json()) as { cache?: { diskEntries?: number } }).cache?.diskEntries ?? 0);
  for (let i = 0; i < 100 && (await diskEntries(a.url)) === 0; i++) await new Promise((r) => setTimeout(r, 100));
  let filesAtKill: string[] = [];
  const before = await concurrentPhase(target, { ...s, rounds: 1 }, cold, 'llamux (disk tier), until kill -9', 'disk', {
    conversations: Math.ceil(s.conversations / 2),
    then: async () => {
      await a.kill();
      filesAtKill = tierFiles(dir);
    },
  });
  // 2. a complete tier file cut in half: what a write cut short would leave if it were not
  // written beside the file and renamed, whatever the kill's timing was
  const complete = filesAtKill.filter((f) => f.endsWith('.lmxkv') && statSync(f).size > 0).sort((x, y) => statSync(y).size - statSync(x).size);
  const partial = filesAtKill.filter((f) => !f.endsWith('.lmxkv'));
  const halved = complete[0];
  if (halved) truncateSync(halved, Math.floor(statSync(halved).size / 2));
  const b = await startLlamuxProcess(options);
  const health = (await (await fetch(`${b.url}/health`)).json()) as Record<string, unknown>;
  progress('correctness: llamux (disk tier), after the restart');
  const afterKill = await verifyAfterRestart({ url: b.url, model: 'echo' }, s, cold, 'disk');
  detail.kill = { firstRound: warm, beforeKill: before, filesAtKill, halved, health: health.cache, afterRestart: afterKill };
  const beforeAll = merge(warm, before);
  const k = phaseCells(merge(beforeAll, afterKill.phase), true);
  out.kill = beforeAll.wrongMarker.length + beforeAll.differsFromCold.length + beforeAll.errors.length + afterKill.phase.wrongMarker.length + afterKill.phase.differsFromCold.length + afterKill.phase.errors.length === 0
    ? pass(`at the kill ${complete.length} tier files and ${partial.length} being written; after the restart ${afterKill.phase.replies}/${afterKill.phase.replies} answers equal the cold ones, the first restored ${afterKill.firstCached} tokens from disk`)
    : fail(`${k.markers}; ${k.cold}`);
  out.half = halved === undefined
    ? 'n/a (no tier file at the kill)'
    : afterKill.phase.differsFromCold.length === 0 && afterKill.phase.logprobsDiffer.length === 0 && afterKill.phase.errors.length === 0
      ? pass(`${(health.cache as { diskEntries?: number } | undefined)?.diskEntries ?? '?'} of ${complete.length} files loaded at the restart; every answer bit-exact`)
      : fail(`${afterKill.phase.logprobsDiffer.length} answers differ from cold after the cut`);
  // 3. corrupted files: a clean stop (every tier write finished), flip bytes in every file, restart
  await b.close();
  const all = tierFiles(dir);
  for (const f of all) flipBytes(f);
  const c = await startLlamuxProcess(options);
  progress('correctness: llamux (disk tier), after corrupting the files');
  const afterCorrupt = await verifyAfterRestart({ url: c.url, model: 'echo' }, s, cold, 'disk');
  await c.close();
  rmSync(dir, { recursive: true, force: true });
  detail.corrupt = { files: all.length, afterRestart: afterCorrupt };
  const p = afterCorrupt.phase;
  out.corrupt = all.length === 0
    ? 'n/a (no tier files)'
    : p.errors.length + p.wrongMarker.length + p.differsFromCold.length + p.logprobsDiffer.length === 0 && afterCorrupt.firstCached === 0
      ? pass(`${all.length} files flipped; first request recomputed (0 cached); ${p.replies}/${p.replies} bit-exact`)
      : fail(`first request ${afterCorrupt.firstCached} cached tokens; ${p.differsFromCold.length} differ; ${p.errors.length} errors`);
  return out;
}

async function tenantCheck(modelPath: string, s: Size, threads: number, detail: Record<string, unknown>): Promise<Cell> {
  const server = await createServer({ modelPath, port: 0, ctx: s.sequences * 1024, parallel: s.sequences, threads, isolateTenants: true, log: () => {} });
  try {
    const t: Target = { url: server.url, model: 'echo' };
    const msgs = messagesAt(0, 1, s.fillerRepeats);
    const a1 = await chat(t, msgs, { 'x-llamux-tenant': 'alice', 'x-llamux-conversation': 'shared-id' });
    const a2 = await chat(t, msgs, { 'x-llamux-tenant': 'alice', 'x-llamux-conversation': 'shared-id' });
    const b1 = await chat(t, msgs, { 'x-llamux-tenant': 'bob', 'x-llamux-conversation': 'shared-id' });
    const b2 = await chat(t, msgs, { 'x-llamux-tenant': 'carol' });
    detail.tenants = { a1, a2, b1, b2 };
    const bad = [a1, a2, b1, b2].find((r) => r.status !== 200);
    if (bad) return fail(`${bad.status} ${bad.error ?? ''}`);
    if (a2.cached === 0) return fail('the same tenant saw no cached tokens either: the check cannot tell');
    return b1.cached === 0 && b2.cached === 0
      ? pass(`same tenant again: ${a2.cached} cached; other tenants (same conversation id, and none): 0`)
      : fail(`another tenant saw ${Math.max(b1.cached, b2.cached)} cached tokens`);
  } finally {
    await server.close();
  }
}

// ---------------------------------------------------------------------------------------------
// The suite

export interface CorrectnessResult {
  text: string;
  /** A check of the server under test failed: llamux's, or with --url that server's (the suite then exits non-zero). */
  failed: boolean;
}

async function firstModelId(url: string): Promise<string> {
  try {
    const body = (await (await fetch(`${url}/v1/models`)).json()) as { data?: Array<{ id?: string }> };
    return body.data?.[0]?.id ?? 'default';
  } catch {
    return 'default';
  }
}

export async function runCorrectnessBench(opts: CorrectnessOptions = {}): Promise<CorrectnessResult> {
  setLogger('silent');
  const s: Size = opts.quick
    ? { conversations: 8, sequences: 2, turns: 2, rounds: 1, fillerRepeats: 6 }
    : { conversations: 24, sequences: 4, turns: 3, rounds: 2, fillerRepeats: 12 };
  const threads = opts.threads ?? 1;
  const detail: Record<string, unknown> = {};
  const setting = `${s.conversations} conversations × ${s.turns} turns × ${s.rounds} round${s.rounds > 1 ? 's' : ''}, all at once`;

  if (opts.url) {
    const url = opts.url.replace(/\/+$/, '').replace(/\/v1$/, '');
    const t: Target = { url, model: await firstModelId(url) };
    const { cold, how } = await serverCold(t, s);
    const p = await concurrentPhase(t, s, cold, url, `${Date.now()}`);
    progressDone();
    const cells = phaseCells(p, false);
    const rows: Row[] = (['markers', 'cross', 'cold'] as const).map((k) => ({ check: CHECKS[k], [url]: cells[k] }));
    const file = writeResult('correctness', { mode: opts.quick ? 'quick' : 'full', url, model: t.model, size: s, coldFrom: how, phase: p });
    return {
      text: [table(`correctness: ${url} (model "${t.model}"; ${setting}; cold answers: ${how})`, rows), `note: cached replies (cached_tokens > 0): ${p.cachedReplies} of ${p.replies}`, `results: ${file}`].join('\n'),
      failed: rows.some((r) => String(r[url]).startsWith('FAIL')),
    };
  }

  progress('correctness: preparing the marker-echo model');
  const modelPath = await ensureEchoModel();
  const results: Record<'llamux' | 'llamaServer', Partial<Record<CheckKey, Cell>>> = { llamux: {}, llamaServer: {} };
  // llamux, default mode then deterministic mode: the concurrent phase against library cold answers
  const phases: PhaseResult[] = [];
  for (const deterministic of [false, true]) {
    const cold = await libraryCold(modelPath, s, deterministic, threads);
    const server = await createServer({ modelPath, port: 0, ctx: s.sequences * 1024, parallel: s.sequences, threads, cacheRamMb: 4, log: () => {}, ...(deterministic ? { deterministic: true } : {}) });
    try {
      phases.push(await concurrentPhase({ url: server.url, model: 'echo' }, s, cold, `llamux${deterministic ? ' (deterministic)' : ''}`, deterministic ? 'det' : 'def'));
    } finally {
      await server.close();
    }
    if (deterministic) {
      Object.assign(results.llamux, await diskChecks(modelPath, s, cold, threads, detail));
    }
  }
  detail.llamux = { default: phases[0], deterministic: phases[1] };
  const det = phaseCells(phases[1]!, true);
  const both = phaseCells(merge(phases[0]!, phases[1]!), false);
  results.llamux.markers = both.markers;
  results.llamux.cross = both.cross;
  results.llamux.cold = both.cold;
  results.llamux.exact = det.exact!;
  results.llamux.tenants = await tenantCheck(modelPath, s, threads, detail);

  // llama-server: the same conversations, its cold answers with cache_prompt: false
  const ls = opts.quick ? builtLlamaServer() : llamaServerBinary();
  if (ls.path) {
    const srv = await startLlamaServer(ls.path, modelPath, { ctx: s.sequences * 1024, parallel: s.sequences, threads });
    try {
      const t: Target = { url: srv.url, model: 'echo' };
      const { cold } = await serverCold(t, s);
      const p = await concurrentPhase(t, s, cold, 'llama-server', 'ls');
      detail.llamaServer = p;
      const cells = phaseCells(p, false);
      results.llamaServer = { markers: cells.markers, cross: cells.cross, cold: cells.cold };
    } finally {
      await srv.close();
    }
  }
  progressDone();
  const rows: Row[] = (Object.keys(CHECKS) as CheckKey[]).map((k) => ({
    check: CHECKS[k],
    llamux: results.llamux[k] ?? 'n/a',
    'llama-server': ls.path ? (results.llamaServer[k] ?? 'n/a (no such mode or tier)') : `not measured (${ls.why})`,
  }));
  const llamuxFailed = Object.values(results.llamux).some((c) => c.startsWith('FAIL'));
  const file = writeResult('correctness', { mode: opts.quick ? 'quick' : 'full', size: s, threads, results, detail });
  const text = [
    table(`correctness: llamux vs llama-server (marker-echo model; ${setting}, on ${s.sequences} sequences / slots; llamux RAM tier 4 MiB)`, rows),
    `note: llamux's cold answers come from the library on a context without prefix cache (deterministic mode for the bit-exact row); llama-server's from itself with cache_prompt: false. Cached replies (cached_tokens > 0): llamux ${phases[0]!.cachedReplies + phases[1]!.cachedReplies} of ${phases[0]!.replies + phases[1]!.replies}.`,
    llamuxFailed ? 'llamux: FAILED' : 'llamux: every check passed',
    `results: ${file}`,
  ].join('\n');
  return { text, failed: llamuxFailed };
}
