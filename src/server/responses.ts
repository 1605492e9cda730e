// The OpenAI Responses API: POST /v1/responses (streamed and not), GET and DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items. Stateful: a stored response keeps its
// conversation and every item, so `previous_response_id` continues the same Session, and the
// next prompt (rendered through the chat template with exact tool-call replay, as for
// /v1/chat/completions) extends the tokens that Session's KV already holds.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { checkToolSchemas } from '../grammar/index.js';
import { FinishReason } from '../engine/events.js';
import { HttpError, SseWriter, errorBody, firstEventFirst, parseBody, readJson, reportedError, sendJson } from './http.js';
import { responseFormatOption, type HandlerOptions } from './openai.js';
import type { ResponseStore, StoredResponse } from './response-store.js';
import { InputItem, TOOL_NAME, checkCallOutputs, checkItems, itemsToChatMessages, newId, normalizeInput, type StoredItem } from './responses-items.js';
import { prepareInputImages } from './responses-media.js';
import { nullable, samplingFields, samplingOptions } from './sampling-fields.js';
import { conversationHeader, keepReasoningHeader, type ChatRequest, type ChatService, type ServerLog, type ServiceEvent, type ToolChoice, type Usage } from './service.js';

const FunctionTool = z
  .object({
    type: z.literal('function'),
    name: TOOL_NAME,
    description: nullable(z.string()),
    parameters: nullable(z.record(z.string(), z.unknown())),
    strict: nullable(z.boolean()),
  })
  .strict();

const TextFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }).strict(),
  z.object({ type: z.literal('json_object') }).strict(),
  z
    .object({
      type: z.literal('json_schema'),
      name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a name of 1 to 64 characters A-Z, a-z, 0-9, "_" or "-"'),
      schema: z.record(z.string(), z.unknown()),
      description: z.string().optional(),
      strict: nullable(z.boolean()),
    })
    .strict(),
]);

export const ResponseCreateSchema = z
  .object({
    model: z.string().min(1).max(256),
    input: z.union([z.string(), z.array(InputItem)]).optional(),
    instructions: nullable(z.string()),
    previous_response_id: nullable(z.string().min(1).max(256)),
    tools: z.array(FunctionTool).optional(),
    tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), name: TOOL_NAME }).strict()]).optional(),
    parallel_tool_calls: nullable(z.boolean()),
    text: z.object({ format: TextFormat.optional(), verbosity: nullable(z.enum(['low', 'medium', 'high'])) }).strict().optional(),
    reasoning: nullable(
      z
        .object({
          effort: nullable(z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh'])),
          summary: nullable(z.enum(['auto', 'concise', 'detailed'])),
          generate_summary: nullable(z.enum(['auto', 'concise', 'detailed'])),
        })
        .strict(),
    ),
    max_output_tokens: nullable(z.number().int().positive()),
    ...samplingFields,
    metadata: nullable(z.record(z.string().max(64), z.string().max(512)).refine((m) => Object.keys(m).length <= 16, 'at most 16 keys')),
    store: nullable(z.boolean()),
    stream: nullable(z.boolean()),
    stream_options: nullable(z.object({ include_obfuscation: z.boolean().optional() }).strict()),
    /** Accepted, unused: llamux runs every request now (no background mode). */
    background: nullable(z.literal(false, { message: 'background responses are not supported by this server' })),
    /** Accepted, unused: reasoning comes back as text, never encrypted. */
    include: nullable(z.array(z.string().max(128)).max(16)),
    /** A conversation hint when nothing else names the conversation (as on /v1/chat/completions). */
    prompt_cache_key: nullable(z.string().min(1).max(1024)),
    /** Accepted, unused: retention follows the server's cache tiers. */
    prompt_cache_retention: nullable(z.enum(['in-memory', '24h'])),
    /** Accepted, unused. */
    safety_identifier: nullable(z.string().max(1024)),
    service_tier: nullable(z.string().max(64)),
    /** 'disabled' (a prompt longer than the context is a 400) unless the server runs --overflow truncate-middle. */
    truncation: nullable(z.enum(['auto', 'disabled'])),
    user: z.string().max(1024).optional(),
    /** Extra chat-template variables (llama-server's name), e.g. `{ enable_thinking: false }`. */
    chat_template_kwargs: z.record(z.string(), z.unknown()).optional(),
    /** llamux: reasoning tokens allowed before the reasoning span's end marker is forced. */
    reasoning_budget: z.number().int().min(0).optional(),
    /** llamux: keep this server's turns as generated after a new user message (--keep-reasoning). */
    keep_reasoning: z.boolean().optional(),
  })
  .strict();
type CreateBody = z.output<typeof ResponseCreateSchema>;

/** Ids as minted here and as clients may send them back. */
const ID_RE = /^[A-Za-z0-9_.:-]{1,256}$/;

function refuseOtherTools(body: unknown): void {
  const tools = (body as { tools?: unknown })?.tools;
  if (!Array.isArray(tools)) return;
  tools.forEach((t, i) => {
    const type = (t as { type?: unknown })?.type;
    if (typeof type === 'string' && type !== 'function') {
      throw new HttpError(400, 'invalid_request', `tools[${i}]: tools of type "${type}" are not supported by this server (function tools are)`, `tools[${i}].type`);
    }
  });
}

function toChatRequest(b: CreateBody, history: readonly StoredItem[], added: readonly StoredItem[], conversation: string | undefined, tenant: string | undefined): ChatRequest {
  let toolChoice: ToolChoice = 'auto';
  if (typeof b.tool_choice === 'string') toolChoice = b.tool_choice;
  else if (b.tool_choice) toolChoice = { name: b.tool_choice.name };
  const tools = (b.tools ?? []).map((t) => ({
    name: t.name,
    ...(t.description != null ? { description: t.description } : {}),
    ...(t.parameters != null ? { parameters: t.parameters } : {}),
  }));
  if (typeof toolChoice === 'object' && !tools.some((t) => t.name === (toolChoice as { name: string }).name)) {
    throw new HttpError(400, 'invalid_request', `tool_choice names the function "${toolChoice.name}", which is not in "tools"`, 'tool_choice');
  }
  if (toolChoice !== 'none') checkToolSchemas(tools);
  const generate: ChatRequest['generate'] = { stop: [] };
  if (b.max_output_tokens != null) generate.maxTokens = b.max_output_tokens;
  Object.assign(generate, samplingOptions(b));
  if (b.reasoning_budget !== undefined) generate.reasoningBudget = b.reasoning_budget;
  const format = b.text?.format;
  const rf = format === undefined ? undefined : format.type === 'json_schema' ? { type: 'json_schema' as const, json_schema: { name: format.name, schema: format.schema, ...(format.strict != null ? { strict: format.strict } : {}) } } : format;
  const responseFormat = responseFormatOption(rf, tools.length > 0 && toolChoice !== 'none');
  if (responseFormat) generate.responseFormat = responseFormat;
  const templateVariables: Record<string, unknown> = { ...(b.chat_template_kwargs ?? {}) };
  // effort "none" turns thinking off (templates with enable_thinking); other levels reach
  // templates that read reasoning_effort (gpt-oss).
  const effort = b.reasoning?.effort;
  if (effort === 'none') templateVariables.enable_thinking = false;
  else if (effort != null) templateVariables.reasoning_effort = effort;
  return {
    messages: itemsToChatMessages(b.instructions ?? undefined, [...history, ...added]),
    tools,
    toolChoice,
    parallelToolCalls: b.parallel_tool_calls ?? true,
    generate,
    ...(conversation !== undefined ? { conversationHeader: conversation } : {}),
    ...(b.prompt_cache_key != null ? { conversationHint: b.prompt_cache_key } : {}),
    ...(b.keep_reasoning !== undefined ? { keepReasoning: b.keep_reasoning } : {}),
    ...(tenant !== undefined ? { tenant } : {}),
    idPrefix: 'call_',
    ...(Object.keys(templateVariables).length > 0 ? { templateVariables } : {}),
  };
}

function usageOf(u: Usage) {
  return {
    input_tokens: u.promptTokens,
    input_tokens_details: { cached_tokens: u.cachedTokens },
    output_tokens: u.completionTokens,
    output_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
    total_tokens: u.promptTokens + u.completionTokens,
  };
}

type OutputItem =
  | { id: string; type: 'message'; role: 'assistant'; status: 'in_progress' | 'completed'; content: Array<{ type: 'output_text'; text: string; annotations: []; logprobs: [] }> }
  | { id: string; type: 'reasoning'; summary: []; content: Array<{ type: 'reasoning_text'; text: string }>; status?: 'in_progress' | 'completed' }
  | { id: string; type: 'function_call'; call_id: string; name: string; arguments: string; status: 'in_progress' | 'completed' };

type Emit = (event: { type: string } & Record<string, unknown>) => Promise<void>;

/**
 * Turns service events into output items, emitting the streaming events of each item in the
 * order the API defines (added, part added, deltas, done ...). Without a stream `emit` does nothing.
 */
class OutputAssembler {
  readonly items: OutputItem[] = [];
  #open: Extract<OutputItem, { type: 'message' | 'reasoning' }> | undefined;
  readonly #emit: Emit;
  constructor(emit: Emit) {
    this.#emit = emit;
  }

  async #start(item: OutputItem): Promise<number> {
    this.items.push(item);
    const output_index = this.items.length - 1;
    await this.#emit({ type: 'response.output_item.added', output_index, item: structuredClone(item) });
    return output_index;
  }

  async text(delta: string): Promise<void> {
    if (this.#open?.type !== 'message') {
      await this.close();
      const item: OutputItem = { id: newId('msg'), type: 'message', role: 'assistant', status: 'in_progress', content: [] };
      const output_index = await this.#start(item);
      this.#open = item;
      const part = { type: 'output_text' as const, text: '', annotations: [] as [], logprobs: [] as [] };
      item.content.push(part);
      await this.#emit({ type: 'response.content_part.added', item_id: item.id, output_index, content_index: 0, part: { ...part } });
    }
    const item = this.#open as Extract<OutputItem, { type: 'message' }>;
    item.content[0]!.text += delta;
    await this.#emit({ type: 'response.output_text.delta', item_id: item.id, output_index: this.items.length - 1, content_index: 0, delta, logprobs: [] });
  }

  async reasoning(delta: string): Promise<void> {
    if (this.#open?.type !== 'reasoning') {
      await this.close();
      const item: OutputItem = { id: newId('rs'), type: 'reasoning', summary: [], content: [] };
      const output_index = await this.#start(item);
      this.#open = item;
      const part = { type: 'reasoning_text' as const, text: '' };
      item.content.push(part);
      await this.#emit({ type: 'response.content_part.added', item_id: item.id, output_index, content_index: 0, part: { ...part } });
    }
    const item = this.#open as Extract<OutputItem, { type: 'reasoning' }>;
    item.content[0]!.text += delta;
    await this.#emit({ type: 'response.reasoning_text.delta', item_id: item.id, output_index: this.items.length - 1, content_index: 0, delta });
  }

  async call(c: { id: string; name: string; argumentsJson: string }): Promise<void> {
    await this.close();
    const item: OutputItem = { id: newId('fc'), type: 'function_call', call_id: c.id, name: c.name, arguments: '', status: 'in_progress' };
    const output_index = await this.#start(item);
    item.arguments = c.argumentsJson;
    item.status = 'completed';
    await this.#emit({ type: 'response.function_call_arguments.delta', item_id: item.id, output_index, delta: c.argumentsJson });
    await this.#emit({ type: 'response.function_call_arguments.done', item_id: item.id, output_index, name: c.name, arguments: c.argumentsJson });
    await this.#emit({ type: 'response.output_item.done', output_index, item: structuredClone(item) });
  }

  /** Ends the open message or reasoning item. */
  async close(): Promise<void> {
    const item = this.#open;
    if (!item) return;
    this.#open = undefined;
    const output_index = this.items.length - 1;
    const part = item.content[0]!;
    if (item.type === 'message') {
      item.status = 'completed';
      await this.#emit({ type: 'response.output_text.done', item_id: item.id, output_index, content_index: 0, text: part.text, logprobs: [] });
    } else {
      await this.#emit({ type: 'response.reasoning_text.done', item_id: item.id, output_index, content_index: 0, text: part.text });
    }
    await this.#emit({ type: 'response.content_part.done', item_id: item.id, output_index, content_index: 0, part: { ...part } });
    await this.#emit({ type: 'response.output_item.done', output_index, item: structuredClone(item) });
  }
}

/** The tenant's key in the store ('' outside isolation mode). */
function tenantKey(o: HandlerOptions): string {
  return o.tenant ?? '';
}

function notFound(id: string, param?: string): HttpError {
  return new HttpError(404, 'not_found', `No response with id ${JSON.stringify(id.slice(0, 256))} is stored on this server (it was never stored, was deleted, expired, or belongs to another tenant)`, param);
}

/** The stored response, or a 404 (unknown, expired, deleted, another tenant's, or the store failed). */
function lookup(store: ResponseStore, id: string, o: ResponsesOptions, param?: string): StoredResponse {
  const hit = ID_RE.test(id) ? store.get(id, tenantKey(o)) : undefined;
  if (hit !== undefined && 'failed' in hit) {
    o.log('warn', `The response store cannot be read (${hit.failed}); response ${JSON.stringify(id.slice(0, 64))} is unavailable`);
    throw new HttpError(404, 'not_found', `The response ${JSON.stringify(id.slice(0, 256))} cannot be read: this server's response store failed; send the whole conversation as input instead`, param);
  }
  if (!hit) throw notFound(id, param);
  return hit;
}

export interface ResponsesOptions extends HandlerOptions {
  store: ResponseStore;
  log: ServerLog;
}

/** Whether a path is one of the Responses API's. */
export function isResponsesPath(path: string): boolean {
  return path === '/v1/responses' || path.startsWith('/v1/responses/');
}

/** The metrics label of a Responses API path. */
export function responsesEndpoint(path: string): string {
  if (path === '/v1/responses') return path;
  return path.endsWith('/input_items') ? '/v1/responses/{id}/input_items' : '/v1/responses/{id}';
}

/** Routes a Responses API request by path and method. */
/** `service`: the request's model (null for the GET and DELETE paths, which read the store only). */
export async function handleResponsesEndpoint(path: string, method: string, req: IncomingMessage, res: ServerResponse, service: ChatService | null, o: ResponsesOptions): Promise<void> {
  if (path === '/v1/responses') {
    if (method !== 'POST' || service === null) throw new HttpError(405, 'invalid_request', `${path} accepts POST requests only`);
    await handleCreate(req, res, service, o);
    return;
  }
  const rest = path.slice('/v1/responses/'.length).split('/');
  let id: string;
  try {
    id = decodeURIComponent(rest[0]!);
  } catch {
    throw new HttpError(400, 'invalid_request', 'The response id in the path is not valid percent-encoding');
  }
  req.resume();
  if (rest.length === 1) {
    if (method === 'GET') {
      sendJson(res, 200, JSON.parse(lookup(o.store, id, o).response) as unknown);
      return;
    }
    if (method === 'DELETE') {
      const done = ID_RE.test(id) ? o.store.delete(id, tenantKey(o)) : false;
      if (typeof done === 'object') {
        o.log('warn', `The response store cannot delete (${done.failed})`);
        throw new HttpError(503, 'overloaded', 'The response store failed; try again');
      }
      if (!done) throw notFound(id);
      sendJson(res, 200, { id, object: 'response', deleted: true });
      return;
    }
    throw new HttpError(405, 'invalid_request', `/v1/responses/{id} accepts GET and DELETE requests only`);
  }
  if (rest.length === 2 && rest[1] === 'input_items') {
    if (method !== 'GET') throw new HttpError(405, 'invalid_request', '/v1/responses/{id}/input_items accepts GET requests only');
    const stored = lookup(o.store, id, o);
    sendJson(res, 200, listItems(JSON.parse(stored.input) as StoredItem[], new URL(req.url ?? '/', 'http://x').searchParams));
    return;
  }
  throw new HttpError(404, 'not_found', `There is no endpoint ${method} ${path}`);
}

const ListQuery = z
  .object({
    limit: z.coerce.number().int().min(1).max(100).default(20),
    order: z.enum(['asc', 'desc']).default('desc'),
    after: z.string().min(1).max(256).optional(),
    before: z.string().min(1).max(256).optional(),
  })
  .strip();

/** A cursor page of input items (`after`/`before` name item ids; newest first unless order=asc). */
function listItems(items: StoredItem[], params: URLSearchParams) {
  const q = parseBody(ListQuery, Object.fromEntries([...params].filter(([k]) => k !== 'include' && k !== 'include[]')));
  let list = q.order === 'desc' ? [...items].reverse() : items;
  if (q.after !== undefined) {
    const at = list.findIndex((it) => it.id === q.after);
    list = at < 0 ? [] : list.slice(at + 1);
  }
  if (q.before !== undefined) {
    const at = list.findIndex((it) => it.id === q.before);
    list = at < 0 ? [] : list.slice(0, at);
  }
  const data = list.slice(0, q.limit);
  return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: list.length > data.length };
}

async function handleCreate(req: IncomingMessage, res: ServerResponse, service: ChatService, o: ResponsesOptions): Promise<void> {
  const { signal } = o;
  const raw = await readJson(req, o.maxBodyBytes);
  checkItems(raw);
  refuseOtherTools(raw);
  const body = parseBody(ResponseCreateSchema, raw);
  await prepareInputImages(body.input, service.model, { signal, ...(o.remoteMediaTimeoutMs !== undefined ? { remoteMediaTimeoutMs: o.remoteMediaTimeoutMs } : {}) });
  const previousId = body.previous_response_id ?? undefined;
  const previous = previousId !== undefined ? lookup(o.store, previousId, o, 'previous_response_id') : undefined;
  const history = previous ? [...(JSON.parse(previous.input) as StoredItem[]), ...((JSON.parse(previous.response) as { output: StoredItem[] }).output)] : [];
  const added = normalizeInput(body.input, history);
  if (history.length + added.length === 0) throw new HttpError(400, 'invalid_request', 'input is empty: send input items, a string, or a previous_response_id', 'input');
  checkCallOutputs(history, added);
  // The conversation: the client's header, else the previous response's (its Session), else
  // what the items and prompt_cache_key say (as on /v1/chat/completions).
  const conversation = conversationHeader(req.headers['x-llamux-conversation']) ?? previous?.conversation;
  const chatReq = toChatRequest(body, history, added, conversation, o.tenant);
  chatReq.keepReasoning ??= keepReasoningHeader(req.headers['x-llamux-keep-reasoning']);
  const prepared = await service.prepare(chatReq, signal);
  const headers: Record<string, string> = { 'x-llamux-conversation': prepared.conversationId };
  if (prepared.truncatedTokens > 0) headers['x-llamux-truncated-tokens'] = String(prepared.truncatedTokens);

  const id = newId('resp');
  const createdAt = Math.floor(Date.now() / 1000);
  const store = body.store ?? true;
  const format = body.text?.format ?? { type: 'text' as const };
  const base = {
    id,
    object: 'response',
    created_at: createdAt,
    status: 'in_progress' as string,
    background: false,
    error: null as unknown,
    incomplete_details: null as unknown,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model: body.model,
    output: [] as unknown[],
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: previousId ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    store,
    temperature: body.temperature ?? null,
    text: { format, ...(body.text?.verbosity != null ? { verbosity: body.text.verbosity } : {}) },
    tool_choice: typeof body.tool_choice === 'object' ? body.tool_choice : (body.tool_choice ?? 'auto'),
    tools: (body.tools ?? []).map((t) => ({ type: 'function', name: t.name, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? null })),
    top_p: body.top_p ?? null,
    truncation: body.truncation ?? 'disabled',
    usage: null as unknown,
    metadata: body.metadata ?? {},
    ...(body.user !== undefined ? { user: body.user } : {}),
    ...(body.prompt_cache_key != null ? { prompt_cache_key: body.prompt_cache_key } : {}),
  };

  /** The finished response, stored (unless store: false) before anyone is told it exists. */
  const finish = (items: OutputItem[], ev: Extract<ServiceEvent, { type: 'final' }>) => {
    const incomplete = ev.reason === FinishReason.Length;
    const response = {
      ...base,
      status: incomplete ? 'incomplete' : 'completed',
      completed_at: Math.floor(Date.now() / 1000),
      incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
      output: items,
      usage: usageOf(ev.usage),
    };
    if (store) {
      const ok = o.store.put({ id, tenant: tenantKey(o), conversation: prepared.conversationId, response: JSON.stringify(response), input: JSON.stringify([...history, ...added]), createdAt: Date.now() });
      if (!ok) o.log('warn', `The response store cannot write; response ${id} is answered but cannot be retrieved or continued (previous_response_id)`);
    }
    return response;
  };

  // Errors known before the first byte (bad arguments, a full queue) keep their HTTP status.
  const events = await firstEventFirst(service.run(prepared, chatReq, signal));

  if (!body.stream) {
    const out = new OutputAssembler(async () => {});
    for await (const ev of events) {
      if (ev.type === 'text') await out.text(ev.text);
      else if (ev.type === 'reasoning') await out.reasoning(ev.text);
      else if (ev.type === 'toolCall') await out.call(ev.call);
      else if (ev.type === 'final') {
        await out.close();
        sendJson(res, 200, finish(out.items, ev), headers);
        return;
      }
    }
    throw new HttpError(500, 'server', 'The generation ended without a final event');
  }

  const sse = new SseWriter(res, headers, o.sendTimeoutMs, service.metrics);
  let sequence = 0;
  const emit: Emit = (event) => sse.send({ ...event, sequence_number: sequence++ }, event.type);
  const out = new OutputAssembler(emit);
  try {
    await emit({ type: 'response.created', response: base });
    await emit({ type: 'response.in_progress', response: base });
    for await (const ev of events) {
      if (ev.type === 'text') await out.text(ev.text);
      else if (ev.type === 'reasoning') await out.reasoning(ev.text);
      else if (ev.type === 'toolCall') await out.call(ev.call);
      else if (ev.type === 'final') {
        await out.close();
        const response = finish(out.items, ev);
        await emit({ type: response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', response });
      }
    }
  } catch (e) {
    const err = reportedError(e, signal);
    if (err) {
      const { body: errBody } = errorBody('openai', err);
      const detail = (errBody as { error: { message: string; code: string | null; param: string | null } }).error;
      const code = detail.code ?? (err.status >= 500 ? 'server_error' : 'invalid_request_error');
      await emit({ type: 'response.failed', response: { ...base, status: 'failed', output: out.items, error: { code, message: detail.message } } });
      await emit({ type: 'error', code, message: detail.message, param: detail.param });
    }
  } finally {
    sse.end();
  }
}
