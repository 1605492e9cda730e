// llamux's HTTP server driven by the official `openai` client, for the replay suite.
//
// The benchmark models have random weights: they never write a tool call on their own. So that
// the server still mints ids, stores spans and replays them, the harness constrains each
// generation to the token ids of the tool call the conversation script says comes next (a GBNF
// grammar of token ids, added to the options the server passes to its context). Nothing else
// about the request path changes: the client sends ordinary OpenAI requests, the server renders
// the template, replays stored calls by id, reuses the conversation's KV and streams SSE.
import OpenAI from 'openai';
import { Session, type GenerateResult, type Generation, type Model, type SessionGenerateOptions } from '../../src/index.js';
import { createServer, type LlamuxServer } from '../../src/server/index.js';

/** A GBNF grammar that admits exactly `tokens`, in order (llama.cpp's `<[id]>` token syntax). */
export function tokenGrammar(tokens: ArrayLike<number>): string {
  if (tokens.length === 0) throw new RangeError('tokenGrammar needs at least one token');
  return `root ::= ${Array.from(tokens, (t) => `<[${t}]>`).join(' ')}`;
}

export interface BenchServerOptions {
  /** Context size in tokens. */
  ctx: number;
  parallel: number;
  threads: number;
  /** Tool-call markers as token ids (the random models' vocabularies have no marker tokens, so 'auto' finds none). */
  markers?: { start: number[]; end: number[] };
}

export interface BenchServer {
  readonly server: LlamuxServer;
  readonly openai: OpenAI;
  /** Constrains the next generations to these tokens (then end of generation); undefined: free sampling. */
  force(tokens: ArrayLike<number> | undefined): void;
  /** The engine's result of the latest generation the server started (undefined before any). */
  lastResult(): Promise<GenerateResult | undefined>;
  /** `replayed`, `unknown` and `unlocated` counts of `llamux_tool_call_replay_total`. */
  replayCounts(): Promise<Record<'replayed' | 'unknown' | 'unlocated', number>>;
  close(): Promise<void>;
}

/** Starts `createServer` on a loaded model (the caller keeps ownership of the model). */
export async function startBenchServer(model: Model, o: BenchServerOptions): Promise<BenchServer> {
  const server = await createServer({
    model,
    port: 0,
    ctx: o.ctx,
    parallel: o.parallel,
    threads: o.threads,
    markers: o.markers ?? false,
  });
  const ctx = server.context;
  const generate = ctx.generate.bind(ctx);
  let grammar: string | undefined;
  let last: Promise<GenerateResult> | undefined;
  // The only harness hook: add the grammar to what the server asks its context for, and keep
  // the engine's result (timings, reuse) of each generation. The forced grammar replaces the
  // tool grammar the server asks for (the two cannot be combined).
  const withGrammar = <O extends { toolChoice?: unknown }>(options: O): O =>
    grammar === undefined ? options : { ...options, grammar, tools: undefined, ...(options.toolChoice === 'none' ? {} : { toolChoice: 'auto' as const }) };
  (ctx as { generate: typeof ctx.generate }).generate = (options) => {
    const gen = generate(withGrammar(options));
    last = gen.result;
    return gen;
  };
  // The server's conversations run through Sessions (session.generate does not call
  // ctx.generate): hook that path too, for this server's context only.
  const sessionGenerate = Session.prototype.generate;
  Session.prototype.generate = function (this: Session, options: SessionGenerateOptions): Generation {
    if (this.context !== ctx) return sessionGenerate.call(this, options);
    const gen = sessionGenerate.call(this, withGrammar(options));
    last = gen.result;
    return gen;
  };
  const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 600_000 });
  return {
    server,
    openai,
    force(tokens) {
      grammar = tokens === undefined ? undefined : tokenGrammar(tokens);
    },
    async lastResult() {
      return last === undefined ? undefined : await last.catch(() => undefined);
    },
    async replayCounts() {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const count = (outcome: string): number => {
        const m = new RegExp(`^llamux_tool_call_replay_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text);
        return m ? Number(m[1]) : 0;
      };
      return { replayed: count('replayed'), unknown: count('unknown'), unlocated: count('unlocated') };
    },
    close: async () => {
      Session.prototype.generate = sessionGenerate;
      await server.close();
    },
  };
}

export interface StreamedToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface StreamedChat {
  /** Request start to the first SSE chunk that carries generated content (text or a tool call). */
  ttftMs: number;
  /** Request start to the end of the stream. */
  totalMs: number;
  text: string;
  toolCalls: StreamedToolCall[];
  finishReason: string | null;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  /** The `x-llamux-conversation` response header. */
  conversation: string | null;
}

/** One streamed chat completion (with usage), timed on the client. */
export async function streamChat(
  openai: OpenAI,
  body: Omit<OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming, 'stream' | 'stream_options'>,
  headers: Record<string, string> = {},
): Promise<StreamedChat> {
  const t0 = performance.now();
  const { data: stream, response } = await openai.chat.completions
    .create({ ...body, stream: true, stream_options: { include_usage: true } }, { headers })
    .withResponse();
  let ttft = -1;
  let text = '';
  const calls = new Map<number, StreamedToolCall>();
  let finishReason: string | null = null;
  let usage: OpenAI.Completions.CompletionUsage | undefined;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice) {
      const d = choice.delta;
      if (ttft < 0 && ((d.content ?? '') !== '' || (d.tool_calls?.length ?? 0) > 0)) ttft = performance.now() - t0;
      if (d.content) text += d.content;
      for (const tc of d.tool_calls ?? []) {
        const prev = calls.get(tc.index) ?? { id: '', name: '', arguments: '' };
        calls.set(tc.index, {
          id: tc.id ?? prev.id,
          name: tc.function?.name ?? prev.name,
          arguments: prev.arguments + (tc.function?.arguments ?? ''),
        });
      }
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  const totalMs = performance.now() - t0;
  return {
    ttftMs: ttft < 0 ? totalMs : ttft,
    totalMs,
    text,
    toolCalls: [...calls.entries()].sort((a, b) => a[0] - b[0]).map(([, c]) => c),
    finishReason,
    promptTokens: usage?.prompt_tokens ?? -1,
    cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? -1,
    completionTokens: usage?.completion_tokens ?? -1,
    conversation: response.headers.get('x-llamux-conversation'),
  };
}
