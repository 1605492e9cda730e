// POST /v1/chat/completions: the OpenAI Chat Completions API (stream and non-stream, tools).
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import type { ChatContentPart, ChatMessage, ChatToolCall } from '../chat/types.js';
import { checkToolSchemas, compileResponseFormat, SchemaGrammarError } from '../grammar/index.js';
import type { ResponseFormat } from '../options.js';
import type { TokenLogprob } from '../engine/events.js';
import { chatLogprobs } from './logprobs.js';
import { nullable, samplingFields, samplingOptions } from './sampling-fields.js';
import { FinishReason } from '../engine/events.js';
import { HttpError, SseWriter, firstEventFirst, parseBody, readJson, sendJson, toHttpError, errorBody, reportedError } from './http.js';
import { conversationHeader, keepReasoningHeader, type ChatRequest, type ChatService, type ServiceEvent, type ServiceToolCall, type ToolChoice, type Usage } from './service.js';
import { MAX_JSON_DEPTH, jsonTextDepth } from '../json-limits.js';
import { MAX_MEDIA_REDIRECTS, isRemoteUrl, resolveRemoteParts, type RemotePart } from './remote-media.js';

/** What the server hands each chat endpoint besides the request. */
export interface HandlerOptions {
  maxBodyBytes: number;
  signal: AbortSignal;
  /** Isolation mode: the request's tenant. */
  tenant?: string;
  /** A streaming client that reads nothing for this long is disconnected. */
  sendTimeoutMs: number;
  /** `--allow-remote-media`: http(s) image URLs are fetched within this time (absent: refused). */
  remoteMediaTimeoutMs?: number;
}

const TOOL_NAME = z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'a tool name of 1 to 128 characters A-Z, a-z, 0-9, "_", ".", ":" or "-"');

// Messages are read leniently (unknown keys are dropped: clients echo SDK objects with extra
// fields such as `parsed`); the request's top level is strict.
const TextPart = z.object({ type: z.literal('text'), text: z.string() });
const RefusalPart = z.object({ type: z.literal('refusal'), refusal: z.string() });
const TextContent = z.union([z.string(), z.array(TextPart)]);
// Media parts of user messages (a model with a projector): data: URLs; the server fetches nothing.
const ImageUrlPart = z.object({ type: z.literal('image_url'), image_url: z.object({ url: z.string().min(1), detail: z.string().optional() }) });
const InputAudioPart = z.object({ type: z.literal('input_audio'), input_audio: z.object({ data: z.string().min(1), format: z.enum(['wav', 'mp3', 'flac']) }) });
const UserContent = z.union([z.string(), z.array(z.union([TextPart, ImageUrlPart, InputAudioPart]))]);

const ToolCallSchema = z
  .object({
    id: z.string().min(1).max(256),
    type: z.literal('function'),
    function: z.object({ name: TOOL_NAME, arguments: z.string() }),
  })
  ;

const MessageSchema = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content: TextContent, name: z.string().optional() }),
  z.object({ role: z.literal('developer'), content: TextContent, name: z.string().optional() }),
  z.object({ role: z.literal('user'), content: UserContent, name: z.string().optional() }),
  z
    .object({
      role: z.literal('assistant'),
      content: z.union([z.string(), z.array(z.union([TextPart, RefusalPart])), z.null()]).optional(),
      tool_calls: z.array(ToolCallSchema).optional(),
      name: z.string().optional(),
      refusal: z.string().nullable().optional(),
      reasoning_content: z.string().optional(),
    })
    ,
  z.object({ role: z.literal('tool'), tool_call_id: z.string().min(1).max(256), content: TextContent }),
]);


/** Most choices (`n`) one request may ask for. */
export const MAX_CHOICES = 16;

/** `response_format`: free text, any JSON object, or one JSON value of a schema (always enforced: `strict` or not). */
export const ResponseFormatBody = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }).strict(),
  z.object({ type: z.literal('json_object') }).strict(),
  z
    .object({
      type: z.literal('json_schema'),
      json_schema: z
        .object({
          name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a name of 1 to 64 characters A-Z, a-z, 0-9, "_" or "-"'),
          description: z.string().optional(),
          schema: z.record(z.string(), z.unknown()).optional(),
          strict: nullable(z.boolean()),
        })
        .strict(),
    })
    .strict(),
]);

/** `response_format` as the generate option (a schema that cannot be compiled is a 400 naming its JSON pointer). */
export function responseFormatOption(rf: z.output<typeof ResponseFormatBody> | undefined, hasTools: boolean): ResponseFormat | undefined {
  if (rf === undefined || rf.type === 'text') return undefined;
  if (hasTools) throw new HttpError(400, 'invalid_request', 'response_format json_object / json_schema cannot be combined with tools on this server: the whole answer is one JSON value', 'response_format');
  if (rf.type === 'json_object') return { type: 'json' };
  const schema = rf.json_schema.schema ?? {};
  try {
    compileResponseFormat(schema);
  } catch (e) {
    if (e instanceof SchemaGrammarError) {
      throw new HttpError(400, 'invalid_request', `response_format.json_schema.schema${e.path ? ` at ${e.path}` : ''} cannot be compiled to a grammar: ${e.message}`, 'response_format');
    }
    throw e;
  }
  return { jsonSchema: schema };
}

/** `logprobs` / `top_logprobs` as the generate option (top_logprobs needs logprobs: true, as OpenAI's API says). */
export function logprobsOption(logprobs: boolean | null | undefined, top: number | null | undefined): number | undefined {
  if (top != null && logprobs !== true) throw new HttpError(400, 'invalid_request', 'top_logprobs needs logprobs: true', 'top_logprobs');
  return logprobs === true ? (top ?? 0) : undefined;
}

export const ChatCompletionRequestSchema = z
  .object({
    model: z.string().min(1).max(256),
    messages: z.array(MessageSchema).min(1),
    stream: nullable(z.boolean()),
    stream_options: nullable(z.object({ include_usage: z.boolean().optional(), include_obfuscation: z.boolean().optional() }).strict()),
    max_tokens: nullable(z.number().int().positive()),
    max_completion_tokens: nullable(z.number().int().positive()),
    ...samplingFields,
    stop: nullable(z.union([z.string().min(1), z.array(z.string().min(1)).max(16)])),
    /** Choices, prefilled once (ctx.generateChoices); choice i samples with seed + i. */
    n: nullable(z.number().int().min(1).max(MAX_CHOICES)),
    tools: z
      .array(
        z
          .object({
            type: z.literal('function'),
            function: z
              .object({
                name: TOOL_NAME,
                description: z.string().optional(),
                parameters: z.record(z.string(), z.unknown()).optional(),
                strict: nullable(z.boolean()),
              })
              .strict(),
          })
          .strict(),
      )
      .optional(),
    tool_choice: z
      .union([
        z.enum(['none', 'auto', 'required']),
        z.object({ type: z.literal('function'), function: z.object({ name: TOOL_NAME }).strict() }).strict(),
      ])
      .optional(),
    parallel_tool_calls: z.boolean().optional(),
    logprobs: nullable(z.boolean()),
    top_logprobs: nullable(z.number().int().min(0).max(20)),
    response_format: ResponseFormatBody.optional(),
    user: z.string().optional(),
    metadata: nullable(z.record(z.string(), z.string())),
    store: nullable(z.boolean()),
    service_tier: nullable(z.string()),
    /** llama-server's field: streamed chunks carry `prompt_progress` while the prompt is prefilled. */
    return_progress: nullable(z.boolean()),
    /** A conversation hint (docs/server.md): requests with the same key share one session when they name no conversation. */
    prompt_cache_key: nullable(z.string().min(1).max(1024)),
    /** Accepted, unused: llamux runs no moderation. */
    safety_identifier: nullable(z.string().max(1024)),
    /** Accepted, unused: output length follows the prompt and max_tokens. */
    verbosity: nullable(z.enum(['low', 'medium', 'high'])),
    /** Accepted, unused (predicted outputs). */
    prediction: nullable(z.object({ type: z.literal('content'), content: z.union([z.string(), z.array(TextPart)]) }).strict()),
    /** Text only: 'audio' is refused. */
    modalities: nullable(z.array(z.enum(['text', 'audio']))),
    /** Extra chat-template variables (llama-server's name), e.g. `{ enable_thinking: false }`. */
    chat_template_kwargs: z.record(z.string(), z.unknown()).optional(),
    /** gpt-oss: the template's reasoning level (`low`, `medium`, `high`). */
    reasoning_effort: nullable(z.string().min(1).max(32)),
    /** llamux: reasoning tokens allowed before the reasoning span's end marker is forced. */
    reasoning_budget: z.number().int().min(0).optional(),
    /** llamux: keep this server's turns as generated after a new user message (--keep-reasoning). */
    keep_reasoning: z.boolean().optional(),
  })
  .strict();
type ChatCompletionRequest = z.output<typeof ChatCompletionRequestSchema>;

function textOf(content: string | ReadonlyArray<{ type: string; text?: string; refusal?: string }> | null | undefined): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content.map((p) => p.text ?? p.refusal ?? '').join('');
}

/** Rejects content parts this server cannot read with a clear message before schema validation:
 * media parts need a user message and a model with a projector, and a remote URL is never fetched. */
function checkParts(body: unknown, media: { vision: boolean; audio: boolean }, remote: boolean): void {
  const msgs = (body as { messages?: unknown })?.messages;
  if (!Array.isArray(msgs)) return;
  msgs.forEach((m, i) => {
    const content = (m as { content?: unknown })?.content;
    if (!Array.isArray(content)) return;
    const user = (m as { role?: unknown })?.role === 'user';
    content.forEach((p, j) => {
      const type = (p as { type?: unknown })?.type;
      if (typeof type !== 'string' || type === 'text' || type === 'refusal') return;
      const where = `messages.${i}.content.${j}`;
      const kind = type === 'image_url' ? 'vision' : type === 'input_audio' ? 'audio' : undefined;
      if (!kind || !user) {
        throw new HttpError(400, 'invalid_request', `${where}: content parts of type "${type}" are not supported ${kind ? 'outside user messages' : 'by this server (only "text", "image_url" and "input_audio")'}`, `${where}.type`);
      }
      if (!media[kind]) {
        throw new HttpError(400, 'invalid_request', `${where}: content parts of type "${type}" are not supported by this model: it reads no ${kind === 'vision' ? 'images' : 'audio'} (start the server with --mmproj and a projector that does)`, `${where}.type`);
      }
      const url = (p as { image_url?: { url?: unknown } }).image_url?.url;
      if (typeof url === 'string' && /^https?:/i.test(url) && !(remote && isRemoteUrl(url))) {
        throw new HttpError(400, 'invalid_request', `${where}: remote image URLs are not fetched by this server (unless it runs with --allow-remote-media); send the image as a data: URL (base64)`, `${where}.image_url.url`);
      }
    });
  });
}

/** `--allow-remote-media`: each http(s) image URL of the user messages replaced by the fetched image (a data: URL). */
async function fetchRemoteImages(body: ChatCompletionRequest, service: ChatService, timeoutMs: number, signal: AbortSignal): Promise<void> {
  const parts: RemotePart[] = [];
  body.messages.forEach((m, i) => {
    if (m.role !== 'user' || typeof m.content === 'string') return;
    m.content.forEach((p, j) => {
      if (p.type !== 'image_url' || !isRemoteUrl(p.image_url.url)) return;
      parts.push({ url: p.image_url.url, where: `messages.${i}.content.${j}`, param: `messages.${i}.content.${j}.image_url.url`, set: (url) => void (p.image_url.url = url) });
    });
  });
  await resolveRemoteParts(parts, { maxBytes: service.model.mediaLimits.maxBytes, timeoutMs, maxRedirects: MAX_MEDIA_REDIRECTS, signal });
}

type UserContentParts = Exclude<z.infer<typeof UserContent>, string>;

/** A user message's content: text, or parts when it holds media. */
function userContent(content: string | UserContentParts): string | ChatContentPart[] {
  if (typeof content === 'string') return content;
  if (!content.some((p) => p.type !== 'text')) return content.map((p) => (p.type === 'text' ? p.text : '')).join('');
  return content.map((p): ChatContentPart => {
    if (p.type === 'text') return { type: 'text', text: p.text };
    if (p.type === 'image_url') return { type: 'image', image: p.image_url.url };
    return { type: 'audio', audio: `data:audio/${p.input_audio.format};base64,${p.input_audio.data}` };
  });
}

/** OpenAI messages → llamux chat messages (leading system/developer messages merged). */
export function openAIToChatMessages(messages: ChatCompletionRequest['messages']): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const [i, m] of messages.entries()) {
    switch (m.role) {
      case 'system':
      case 'developer': {
        const text = textOf(m.content);
        const prev = out[out.length - 1];
        if (out.length === 1 && prev?.role === 'system') prev.content = `${prev.content}\n\n${text}`;
        else out.push({ role: 'system', content: text });
        break;
      }
      case 'user':
        out.push({ role: 'user', content: userContent(m.content) });
        break;
      case 'assistant': {
        const text = textOf(m.content);
        const calls: ChatToolCall[] = (m.tool_calls ?? []).map((c, j) => {
          // arguments are JSON text that the templates and the replay parse: bounded like the body
          if (jsonTextDepth(c.function.arguments) > MAX_JSON_DEPTH) {
            const field = `messages[${i}].tool_calls[${j}].function.arguments`;
            throw new HttpError(400, 'invalid_request', `${field} nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`, field);
          }
          return { id: c.id, name: c.function.name, arguments: c.function.arguments };
        });
        out.push({
          role: 'assistant',
          content: text.length > 0 ? text : null,
          ...(calls.length ? { toolCalls: calls } : {}),
          ...(m.reasoning_content !== undefined ? { reasoningContent: m.reasoning_content } : {}),
        });
        break;
      }
      case 'tool':
        out.push({ role: 'tool', toolCallId: m.tool_call_id, content: textOf(m.content) });
        break;
    }
  }
  return out;
}

function toChatRequest(b: ChatCompletionRequest, conversation: string | undefined, tenant: string | undefined): ChatRequest {
  let toolChoice: ToolChoice = 'auto';
  if (typeof b.tool_choice === 'string') toolChoice = b.tool_choice;
  else if (b.tool_choice) toolChoice = { name: b.tool_choice.function.name };
  if (typeof toolChoice === 'object' && !(b.tools ?? []).some((t) => t.function.name === (toolChoice as { name: string }).name)) {
    throw new HttpError(400, 'invalid_request', `tool_choice names the function "${toolChoice.name}", which is not in "tools"`, 'tool_choice');
  }
  const stop = b.stop == null ? [] : typeof b.stop === 'string' ? [b.stop] : b.stop;
  const maxTokens = b.max_completion_tokens ?? b.max_tokens ?? undefined;
  const generate: ChatRequest['generate'] = { stop };
  if (maxTokens != null) generate.maxTokens = maxTokens;
  Object.assign(generate, samplingOptions(b));
  if (b.reasoning_budget !== undefined) generate.reasoningBudget = b.reasoning_budget;
  const responseFormat = responseFormatOption(b.response_format, (b.tools ?? []).length > 0 && b.tool_choice !== 'none');
  if (responseFormat) generate.responseFormat = responseFormat;
  const logprobs = logprobsOption(b.logprobs, b.top_logprobs);
  if (logprobs !== undefined) generate.logprobs = logprobs;
  const templateVariables: Record<string, unknown> = { ...(b.chat_template_kwargs ?? {}) };
  if (b.reasoning_effort != null) templateVariables.reasoning_effort = b.reasoning_effort;
  const tools = (b.tools ?? []).map((t) => ({
    name: t.function.name,
    ...(t.function.description !== undefined ? { description: t.function.description } : {}),
    ...(t.function.parameters !== undefined ? { parameters: t.function.parameters } : {}),
  }));
  // A schema the grammar cannot serve (ambiguous, malformed $ref, unsatisfiable) is a 400 now,
  // before the prompt is built.
  if (toolChoice !== 'none') checkToolSchemas(tools);
  if (b.modalities?.includes('audio')) throw new HttpError(400, 'invalid_request', 'modalities: this server answers with text only ("audio" is not supported)', 'modalities');
  return {
    messages: openAIToChatMessages(b.messages),
    tools,
    toolChoice,
    parallelToolCalls: b.parallel_tool_calls ?? true,
    generate,
    ...(conversation !== undefined ? { conversationHeader: conversation } : {}),
    ...(b.prompt_cache_key != null ? { conversationHint: b.prompt_cache_key } : {}),
    ...(b.keep_reasoning !== undefined ? { keepReasoning: b.keep_reasoning } : {}),
    ...(b.return_progress === true && b.stream === true ? { returnProgress: true } : {}),
    ...(tenant !== undefined ? { tenant } : {}),
    idPrefix: 'call_',
    ...(Object.keys(templateVariables).length > 0 ? { templateVariables } : {}),
  };
}

function finishReason(reason: string): 'stop' | 'length' | 'tool_calls' {
  return reason === 'tool_calls' ? 'tool_calls' : reason === FinishReason.Length ? 'length' : 'stop';
}

function usageOf(u: Usage) {
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: { cached_tokens: u.cachedTokens },
    // speculative decoding (--spec): OpenAI's predicted-output counters, draft tokens kept or not
    ...(u.draftedTokens > 0
      ? { completion_tokens_details: { accepted_prediction_tokens: u.acceptedTokens, rejected_prediction_tokens: u.draftedTokens - u.acceptedTokens } }
      : {}),
  };
}

function toolCallOf(c: ServiceToolCall) {
  return { id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.argumentsJson } };
}

/** The `usage` of n choices: one prompt, every choice's completion tokens. */
function usageOfAll(us: readonly Usage[], truncatedTokens: number) {
  const first = us[0]!;
  const sum = (k: 'completionTokens' | 'draftedTokens' | 'acceptedTokens') => us.reduce((a, b) => a + b[k], 0);
  const u = usageOf({ promptTokens: first.promptTokens, completionTokens: sum('completionTokens'), cachedTokens: first.cachedTokens, draftedTokens: sum('draftedTokens'), acceptedTokens: sum('acceptedTokens') });
  return truncatedTokens > 0 ? { ...u, truncated_tokens: truncatedTokens } : u;
}

export async function handleChatCompletions(
  req: IncomingMessage,
  res: ServerResponse,
  service: ChatService,
  o: HandlerOptions,
): Promise<void> {
  const { signal } = o;
  const raw = await readJson(req, o.maxBodyBytes);
  checkParts(raw, service.model.capabilities, o.remoteMediaTimeoutMs !== undefined);
  const body = parseBody(ChatCompletionRequestSchema, raw);
  if (o.remoteMediaTimeoutMs !== undefined) await fetchRemoteImages(body, service, o.remoteMediaTimeoutMs, signal);
  const chatReq = toChatRequest(body, conversationHeader(req.headers['x-llamux-conversation']), o.tenant);
  chatReq.keepReasoning ??= keepReasoningHeader(req.headers['x-llamux-keep-reasoning']);
  Object.assign(chatReq.generate, service.adapters.options(body.lora));
  const prepared = await service.prepare(chatReq, signal);
  const headers: Record<string, string> = { 'x-llamux-conversation': prepared.conversationId };
  if (prepared.truncatedTokens > 0) headers['x-llamux-truncated-tokens'] = String(prepared.truncatedTokens);
  const id = `chatcmpl-${randomBytes(12).toString('hex')}`;
  const created = Math.floor(Date.now() / 1000);
  const fingerprint = `llamux-${service.fingerprint.slice(0, 12)}`;
  const n = body.n ?? 1;
  const wantLogprobs = chatReq.generate.logprobs !== undefined;
  // Errors known before the first byte (bad arguments, a full queue) keep their HTTP status,
  // streaming or not.
  const runs = n > 1 ? await service.runChoices(prepared, chatReq, signal, n) : [service.run(prepared, chatReq, signal)];
  // One choice failing ends the others (their generations are cancelled, not left running).
  const stopAll = () => {
    for (const r of runs) void r.return(undefined).catch(() => {});
  };
  let streams: AsyncGenerator<ServiceEvent, void, undefined>[];
  try {
    streams = await Promise.all(runs.map((r) => firstEventFirst(r)));
  } catch (e) {
    stopAll();
    throw e;
  }

  if (!body.stream) {
    const choices = await Promise.all(
      streams.map(async (events, index) => {
        let text = '';
        let reasoning: string | undefined;
        const calls: ServiceToolCall[] = [];
        const lps: TokenLogprob[] = [];
        for await (const ev of events) {
          if (ev.type === 'started' || ev.type === 'progress') continue;
          if (ev.type === 'text') {
            text += ev.text;
            if (ev.logprobs) lps.push(...ev.logprobs);
          } else if (ev.type === 'reasoning') reasoning = (reasoning ?? '') + ev.text;
          else if (ev.type === 'toolCall') calls.push(ev.call);
          else {
            if (ev.logprobs) lps.push(...ev.logprobs);
            const message: Record<string, unknown> = { role: 'assistant', content: text.length > 0 || calls.length === 0 ? text : null, refusal: null };
            if (reasoning !== undefined) message.reasoning_content = reasoning;
            if (calls.length) message.tool_calls = calls.map(toolCallOf);
            const logprobs = wantLogprobs ? { content: chatLogprobs(service.model, lps), refusal: null } : null;
            return { choice: { index, message, logprobs, finish_reason: finishReason(ev.reason) }, usage: ev.usage };
          }
        }
        throw new HttpError(500, 'server', 'The generation ended without a final event');
      }),
    ).catch((e: unknown) => {
      stopAll();
      throw e;
    });
    sendJson(
      res,
      200,
      {
        id,
        object: 'chat.completion',
        created,
        model: body.model,
        system_fingerprint: fingerprint,
        choices: choices.map((c) => c.choice),
        usage: usageOfAll(choices.map((c) => c.usage), prepared.truncatedTokens),
      },
      headers,
    );
    return;
  }

  const sse = new SseWriter(res, headers, o.sendTimeoutMs, service.metrics);
  const chunk = (index: number, delta: Record<string, unknown>, finish: string | null = null, lps?: TokenLogprob[]) => ({
    id,
    object: 'chat.completion.chunk',
    created,
    model: body.model,
    system_fingerprint: fingerprint,
    choices: [{ index, delta, logprobs: wantLogprobs && lps ? { content: chatLogprobs(service.model, lps), refusal: null } : null, finish_reason: finish }],
  });
  // Choices stream side by side; their chunks go out one at a time, in the order they come.
  let sending: Promise<void> = Promise.resolve();
  const send = (v: unknown) => (sending = sending.then(() => sse.send(v)));
  try {
    const usages = await Promise.all(
      streams.map(async (events, index) => {
        await send(chunk(index, { role: 'assistant', content: '', refusal: null }));
        let usage: Usage | undefined;
        for await (const ev of events) {
          if (ev.type === 'started') continue;
          if (ev.type === 'progress') {
            // llama-server's shape: a chunk without choices that carries the prompt's progress
            const prompt_progress = { total: ev.total, cache: ev.cached, processed: ev.processed, time_ms: ev.ms };
            await send({ id, object: 'chat.completion.chunk', created, model: body.model, system_fingerprint: fingerprint, choices: [], prompt_progress });
          } else if (ev.type === 'text') await send(chunk(index, { content: ev.text }, null, ev.logprobs));
          else if (ev.type === 'reasoning') await send(chunk(index, { reasoning_content: ev.text }));
          else if (ev.type === 'toolCall') await send(chunk(index, { tool_calls: [{ index: ev.call.index, ...toolCallOf(ev.call) }] }));
          else {
            if (ev.logprobs?.length) await send(chunk(index, { content: '' }, null, ev.logprobs));
            await send(chunk(index, {}, finishReason(ev.reason)));
            usage = ev.usage;
          }
        }
        return usage;
      }),
    );
    if (body.stream_options?.include_usage && usages.every((u) => u !== undefined)) {
      await send({ id, object: 'chat.completion.chunk', created, model: body.model, system_fingerprint: fingerprint, choices: [], usage: usageOfAll(usages as Usage[], prepared.truncatedTokens) });
    }
    await send('[DONE]');
  } catch (e) {
    stopAll();
    const err = reportedError(e, signal);
    if (err) {
      await sending.catch(() => {});
      await sse.send(errorBody('openai', err).body);
    }
  } finally {
    sse.end();
  }
}
