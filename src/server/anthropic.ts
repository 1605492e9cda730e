// POST /v1/messages: the Anthropic Messages API (stream and non-stream, tool_use / tool_result).
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import type { ChatContentPart, ChatMessage, ChatToolCall } from '../chat/types.js';
import { checkToolSchemas } from '../grammar/index.js';
import { FinishReason } from '../engine/events.js';
import { HttpError, SseWriter, errorBody, firstEventFirst, parseBody, readJson, sendJson, toHttpError, reportedError } from './http.js';
import type { HandlerOptions } from './openai.js';
import { conversationHeader, keepReasoningHeader, type ChatRequest, type ChatService, type ServiceEvent, type ToolChoice, type Usage } from './service.js';
import type { MarkVariant } from './prompt-marks.js';
import { collectBreakpoints, promptCacheOf, promptMarks, withAutomaticBreakpoint, type Breakpoint, type CacheableRequest, type RetentionPlan } from './cache-breakpoints.js';

const TOOL_NAME = z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'a tool name of 1 to 128 characters A-Z, a-z, 0-9, "_", ".", ":" or "-"');
// Checked (with Anthropic's errors) by collectBreakpoints (cache-breakpoints.ts).
const cacheControl = z.unknown().optional();

// Content blocks are read leniently (clients echo response blocks with extra fields); the
// request's top level is strict.
const TextBlock = z.object({ type: z.literal('text'), text: z.string(), cache_control: cacheControl, citations: z.unknown().optional() });
const ToolUseBlock = z
  .object({ type: z.literal('tool_use'), id: z.string().min(1).max(256), name: TOOL_NAME, input: z.record(z.string(), z.unknown()), cache_control: cacheControl })
  ;
const ToolResultBlock = z
  .object({
    type: z.literal('tool_result'),
    tool_use_id: z.string().min(1).max(256),
    content: z.union([z.string(), z.array(TextBlock)]).optional(),
    is_error: z.boolean().optional(),
    cache_control: cacheControl,
  })
  ;
const ThinkingBlock = z.object({ type: z.literal('thinking'), thinking: z.string(), signature: z.string().optional() });
const RedactedThinkingBlock = z.object({ type: z.literal('redacted_thinking'), data: z.string() });
// Images in user messages (a model with a projector): base64 only; the server fetches nothing.
const ImageBlock = z.object({
  type: z.literal('image'),
  source: z.object({ type: z.literal('base64'), media_type: z.string().min(1), data: z.string().min(1) }),
  cache_control: cacheControl,
});
const Block = z.discriminatedUnion('type', [TextBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock, ImageBlock]);
const SUPPORTED_BLOCKS = new Set(['text', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking', 'image']);

const disableParallel = z.boolean().optional();

export const MessagesRequestSchema = z
  .object({
    model: z.string().min(1).max(256),
    max_tokens: z.number().int().positive(),
    messages: z
      .array(z.object({ role: z.enum(['user', 'assistant']), content: z.union([z.string(), z.array(Block)]) }))
      .min(1),
    system: z.union([z.string(), z.array(TextBlock)]).optional(),
    stop_sequences: z.array(z.string().min(1)).max(16).optional(),
    stream: z.boolean().optional(),
    temperature: z.number().min(0).max(1).optional(),
    top_p: z.number().gt(0).max(1).optional(),
    top_k: z.number().int().min(0).optional(),
    /** llamux: false opts this request out of the server's speculative decoding (--spec). */
    speculative: z.boolean().optional(),
    tools: z
      .array(
        z
          .object({
            name: TOOL_NAME,
            description: z.string().optional(),
            input_schema: z.record(z.string(), z.unknown()),
            type: z.literal('custom').optional(),
            cache_control: cacheControl,
          })
          .strict(),
      )
      .optional(),
    tool_choice: z
      .discriminatedUnion('type', [
        z.object({ type: z.literal('auto'), disable_parallel_tool_use: disableParallel }).strict(),
        z.object({ type: z.literal('any'), disable_parallel_tool_use: disableParallel }).strict(),
        z.object({ type: z.literal('tool'), name: TOOL_NAME, disable_parallel_tool_use: disableParallel }).strict(),
        z.object({ type: z.literal('none') }).strict(),
      ])
      .optional(),
    metadata: z.object({ user_id: z.string().nullable().optional() }).strict().optional(),
    thinking: z
      .discriminatedUnion('type', [
        z.object({ type: z.literal('disabled') }).strict(),
        z.object({ type: z.literal('enabled'), budget_tokens: z.number().int().min(0) }).strict(),
      ])
      .optional(),
    service_tier: z.string().optional(),
    /** Automatic prompt caching: a breakpoint on the last block (cache-breakpoints.ts withAutomaticBreakpoint). */
    cache_control: cacheControl,
  })
  .strict();
type MessagesRequest = z.output<typeof MessagesRequestSchema>;
type BlockT = z.output<typeof Block>;

export const CountTokensRequestSchema = MessagesRequestSchema.omit({ max_tokens: true, stream: true, stop_sequences: true, temperature: true, top_p: true, top_k: true, metadata: true, service_tier: true });

function checkBlocks(body: unknown, vision: boolean): void {
  const msgs = (body as { messages?: unknown })?.messages;
  if (!Array.isArray(msgs)) return;
  msgs.forEach((m, i) => {
    const content = (m as { content?: unknown })?.content;
    if (!Array.isArray(content)) return;
    content.forEach((b, j) => {
      const type = (b as { type?: unknown })?.type;
      if (typeof type === 'string' && !SUPPORTED_BLOCKS.has(type)) {
        throw new HttpError(400, 'invalid_request', `messages.${i}.content.${j}: content blocks of type "${type}" are not supported by this server (text, image, tool_use, tool_result, thinking are)`);
      }
      if (type !== 'image') return;
      if (!vision) throw new HttpError(400, 'invalid_request', `messages.${i}.content.${j}: content blocks of type "image" are not supported by this model: it reads no images (start the server with --mmproj and a projector that does)`);
      if ((m as { role?: unknown }).role !== 'user') throw new HttpError(400, 'invalid_request', `messages.${i}.content.${j}: image blocks belong in user messages`);
      const source = (b as { source?: { type?: unknown } }).source?.type;
      if (source !== 'base64') throw new HttpError(400, 'invalid_request', `messages.${i}.content.${j}: image sources of type "${String(source)}" are not read by this server (only "base64"; it fetches nothing)`);
    });
  });
  const tools = (body as { tools?: unknown })?.tools;
  if (Array.isArray(tools)) {
    tools.forEach((t, i) => {
      const type = (t as { type?: unknown })?.type;
      if (typeof type === 'string' && type !== 'custom') {
        throw new HttpError(400, 'invalid_request', `tools.${i}: server tools ("${type}") are not supported; define the tool with "name" and "input_schema"`);
      }
    });
  }
}

function blocksText(content: string | ReadonlyArray<{ text: string }> | undefined): string {
  if (content === undefined) return '';
  return typeof content === 'string' ? content : content.map((b) => b.text).join('');
}

/** Anthropic messages → llamux chat messages: tool_result blocks become tool messages, in block order. */
export function anthropicToChatMessages(system: MessagesRequest['system'], messages: MessagesRequest['messages']): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (system !== undefined) {
    const text = blocksText(system);
    if (text.length > 0) out.push({ role: 'system', content: text });
  }
  for (const m of messages) {
    if (typeof m.content === 'string') {
      out.push(m.role === 'user' ? { role: 'user', content: m.content } : { role: 'assistant', content: m.content });
      continue;
    }
    const blocks = m.content as BlockT[];
    if (m.role === 'user') {
      let text: ChatContentPart[] = [];
      const flush = (): void => {
        if (text.length) {
          const media = text.some((p) => p.type !== 'text');
          out.push({ role: 'user', content: media ? text : text.map((p) => (p.type === 'text' ? p.text : '')).join('') });
        }
        text = [];
      };
      for (const b of blocks) {
        if (b.type === 'text') text.push({ type: 'text', text: b.text });
        else if (b.type === 'image') text.push({ type: 'image', image: `data:${b.source.media_type};base64,${b.source.data}` });
        else if (b.type === 'tool_result') {
          flush();
          out.push({ role: 'tool', toolCallId: b.tool_use_id, content: blocksText(b.content) });
        } else if (b.type === 'tool_use') {
          throw new HttpError(400, 'invalid_request', 'tool_use blocks belong in assistant messages');
        }
      }
      flush();
    } else {
      const text: string[] = [];
      const reasoning: string[] = [];
      const calls: ChatToolCall[] = [];
      for (const b of blocks) {
        if (b.type === 'text') text.push(b.text);
        else if (b.type === 'image') throw new HttpError(400, 'invalid_request', 'image blocks belong in user messages');
        else if (b.type === 'thinking') reasoning.push(b.thinking);
        else if (b.type === 'tool_use') calls.push({ id: b.id, name: b.name, arguments: b.input });
        else if (b.type === 'tool_result') throw new HttpError(400, 'invalid_request', 'tool_result blocks belong in user messages');
      }
      const content = text.join('');
      out.push({
        role: 'assistant',
        content: content.length > 0 ? content : null,
        ...(calls.length ? { toolCalls: calls } : {}),
        ...(reasoning.length ? { reasoningContent: reasoning.join('') } : {}),
      });
    }
  }
  return out;
}

function toolDefinitions(tools: MessagesRequest['tools']) {
  return (tools ?? []).map((t) => ({ name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.input_schema }));
}

/** The conversation as the prompt worker renders it (what cache breakpoints are located in). */
function toRendered(r: CacheableRequest): MarkVariant {
  return { messages: anthropicToChatMessages(r.system, r.messages as MessagesRequest['messages']), tools: toolDefinitions(r.tools as MessagesRequest['tools']) };
}

function toChatRequest(b: Omit<MessagesRequest, 'max_tokens'> & { max_tokens?: number }, conversation: string | undefined, tenant?: string): ChatRequest {
  let toolChoice: ToolChoice = 'auto';
  let parallel = true;
  const tc = b.tool_choice;
  if (tc) {
    if (tc.type === 'none') toolChoice = 'none';
    else {
      if (tc.type === 'any') toolChoice = 'required';
      else if (tc.type === 'tool') toolChoice = { name: tc.name };
      parallel = !tc.disable_parallel_tool_use;
    }
  }
  if (typeof toolChoice === 'object' && !(b.tools ?? []).some((t) => t.name === (toolChoice as { name: string }).name)) {
    throw new HttpError(400, 'invalid_request', `tool_choice names the tool "${toolChoice.name}", which is not in "tools"`);
  }
  const generate: ChatRequest['generate'] = { stop: b.stop_sequences ?? [] };
  if (b.max_tokens !== undefined) generate.maxTokens = b.max_tokens;
  if (b.temperature !== undefined) generate.temperature = b.temperature;
  if (b.top_p !== undefined) generate.topP = b.top_p;
  if (b.top_k !== undefined) generate.topK = b.top_k;
  if (b.speculative !== undefined) generate.speculative = b.speculative;
  // Extended thinking: the template's enable_thinking, and a budget on the reasoning span.
  const templateVariables: Record<string, unknown> = {};
  if (b.thinking?.type === 'enabled') {
    templateVariables.enable_thinking = true;
    generate.reasoningBudget = b.thinking.budget_tokens;
  } else if (b.thinking?.type === 'disabled') {
    templateVariables.enable_thinking = false;
  }
  const tools = toolDefinitions(b.tools);
  // A schema the grammar cannot serve (ambiguous, malformed $ref, unsatisfiable) is a 400 now,
  // before the prompt is built.
  if (toolChoice !== 'none') checkToolSchemas(tools);
  return {
    messages: anthropicToChatMessages(b.system, b.messages),
    tools,
    toolChoice,
    parallelToolCalls: parallel,
    generate,
    ...(conversation !== undefined ? { conversationHeader: conversation } : {}),
    ...(tenant !== undefined ? { tenant } : {}),
    idPrefix: 'toolu_',
    ...(Object.keys(templateVariables).length > 0 ? { templateVariables } : {}),
  };
}

function stopReason(reason: string): 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' {
  if (reason === 'tool_calls') return 'tool_use';
  if (reason === FinishReason.Length) return 'max_tokens';
  if (reason === FinishReason.Stop) return 'stop_sequence';
  return 'end_turn';
}

function usageOf(service: ChatService, plan: RetentionPlan | undefined, u: Usage, outputTokens = u.completionTokens) {
  const cache = promptCacheOf(service).usage(plan, u.promptTokens, u.cachedTokens, u.retainedTokens ?? 0);
  return {
    input_tokens: cache.input_tokens,
    output_tokens: outputTokens,
    cache_creation_input_tokens: cache.cache_creation_input_tokens,
    cache_read_input_tokens: cache.cache_read_input_tokens,
    cache_creation: cache.cache_creation,
  };
}

/** The request's breakpoints, and the marks the prompt worker locates for them. */
function breakpointsOf(body: CacheableRequest & { cache_control?: unknown }, chatReq: ChatRequest): Breakpoint[] {
  const r = withAutomaticBreakpoint(body, body.cache_control);
  const breakpoints = collectBreakpoints(r, toRendered);
  if (breakpoints.length > 0) chatReq.marks = promptMarks(r, breakpoints, toRendered);
  return breakpoints;
}

export async function handleCountTokens(req: IncomingMessage, res: ServerResponse, service: ChatService, o: HandlerOptions): Promise<void> {
  const raw = await readJson(req, o.maxBodyBytes);
  checkBlocks(raw, service.model.capabilities.vision);
  const body = parseBody(CountTokensRequestSchema, raw);
  const chatReq = toChatRequest(body, undefined, o.tenant);
  // Breakpoints never change the prompt's tokens; they are checked as in /v1/messages.
  breakpointsOf(body, chatReq);
  const prepared = await service.prepare(chatReq, o.signal);
  sendJson(res, 200, { input_tokens: prepared.prompt.tokens.length + prepared.truncatedTokens });
}

export async function handleMessages(
  req: IncomingMessage,
  res: ServerResponse,
  service: ChatService,
  o: HandlerOptions,
): Promise<void> {
  const { signal } = o;
  const raw = await readJson(req, o.maxBodyBytes);
  checkBlocks(raw, service.model.capabilities.vision);
  const body = parseBody(MessagesRequestSchema, raw);
  const chatReq = toChatRequest(body, conversationHeader(req.headers['x-llamux-conversation']), o.tenant);
  chatReq.keepReasoning = keepReasoningHeader(req.headers['x-llamux-keep-reasoning']);
  const breakpoints = breakpointsOf(body, chatReq);
  // A stream's message_start carries the cache numbers, known once the prompt is prefilled.
  if (body.stream) chatReq.returnProgress = true;
  const prepared = await service.prepare(chatReq, signal);
  const cache = promptCacheOf(service);
  let plan: RetentionPlan | undefined;
  if (breakpoints.length > 0) {
    plan = cache.plan(breakpoints, prepared.prompt.markTokens, prepared.prompt.tokens.length, prepared.truncatedTokens > 0, o.tenant);
    if (plan.retainPrefixes.length > 0) chatReq.generate.retainPrefixes = plan.retainPrefixes;
  }
  const headers: Record<string, string> = { 'x-llamux-conversation': prepared.conversationId };
  if (prepared.truncatedTokens > 0) headers['x-llamux-truncated-tokens'] = String(prepared.truncatedTokens);
  const retention = (refused: number | undefined): void => {
    const value = cache.report(plan, refused ?? 0);
    if (value !== undefined) headers['x-llamux-cache-retention'] = value;
  };
  const id = `msg_${randomBytes(12).toString('hex')}`;
  // Errors known before the first byte (bad arguments, a full queue) keep their HTTP status,
  // streaming or not.
  const events = await firstEventFirst(service.run(prepared, chatReq, signal));

  if (!body.stream) {
    const content: Array<Record<string, unknown>> = [];
    for await (const ev of events) {
      if (ev.type === 'started' || ev.type === 'progress') continue;
      if (ev.type === 'text') {
        const last = content[content.length - 1];
        if (last?.type === 'text') last.text = `${last.text as string}${ev.text}`;
        else content.push({ type: 'text', text: ev.text });
      } else if (ev.type === 'reasoning') {
        const last = content[content.length - 1];
        if (last?.type === 'thinking') last.thinking = `${last.thinking as string}${ev.text}`;
        else content.push({ type: 'thinking', thinking: ev.text, signature: '' });
      } else if (ev.type === 'toolCall') {
        content.push({ type: 'tool_use', id: ev.call.id, name: ev.call.name, input: ev.call.arguments });
      } else {
        retention(ev.usage.retainRefused);
        sendJson(
          res,
          200,
          {
            id,
            type: 'message',
            role: 'assistant',
            model: body.model,
            content,
            stop_reason: stopReason(ev.reason),
            stop_sequence: ev.reason === FinishReason.Stop ? (ev.stop ?? null) : null,
            usage: usageOf(service, plan, ev.usage),
          },
          headers,
        );
      }
    }
    return;
  }

  // Until the prompt is prefilled (the last progress event) nothing is sent: an error there
  // keeps its HTTP status, and message_start gets the exact cache numbers and header.
  const it = events[Symbol.asyncIterator]();
  let pending: ServiceEvent | undefined;
  let prefilled: Usage = { promptTokens: prepared.prompt.tokens.length, completionTokens: 0, cachedTokens: 0, draftedTokens: 0, acceptedTokens: 0 };
  for (;;) {
    const next = await it.next();
    if (next.done) break;
    const ev = next.value;
    if (ev.type === 'started') continue;
    if (ev.type === 'progress') {
      prefilled = { ...prefilled, promptTokens: ev.total, cachedTokens: ev.cached, retainedTokens: ev.retainedTokens, retainRefused: ev.retainRefused };
      if (ev.processed < ev.total) continue;
    } else {
      pending = ev;
      if (ev.type === 'final') prefilled = ev.usage;
    }
    break;
  }
  retention(prefilled.retainRefused);
  const sse = new SseWriter(res, headers, o.sendTimeoutMs, service.metrics);
  const send = (data: { type: string } & Record<string, unknown>): Promise<void> => sse.send(data, data.type);
  let index = -1;
  let openText = false;
  let openThinking = false;
  const closeText = async (): Promise<void> => {
    if (openText) await send({ type: 'content_block_stop', index });
    openText = false;
    if (openThinking) {
      // llamux signs nothing: an empty signature keeps the SDK's block shape.
      await send({ type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: '' } });
      await send({ type: 'content_block_stop', index });
    }
    openThinking = false;
  };
  try {
    await send({
      type: 'message_start',
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model: body.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // The prompt is prefilled: these are final (message_delta repeats them with the output).
        usage: usageOf(service, plan, prefilled, 0),
      },
    });
    await send({ type: 'ping' });
    const rest = (async function* () {
      try {
        if (pending) yield pending;
        for (;;) {
          const next = await it.next();
          if (next.done) return;
          yield next.value;
        }
      } finally {
        await it.return?.(undefined); // leaving early cancels the generation
      }
    })();
    for await (const ev of rest) {
      if (ev.type === 'started' || ev.type === 'progress') continue;
      if (ev.type === 'reasoning') {
        if (!openThinking) {
          await closeText();
          index++;
          openThinking = true;
          await send({ type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } });
        }
        await send({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: ev.text } });
      } else if (ev.type === 'text') {
        if (!openText) {
          await closeText();
          index++;
          openText = true;
          await send({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
        }
        await send({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: ev.text } });
      } else if (ev.type === 'toolCall') {
        await closeText();
        index++;
        await send({ type: 'content_block_start', index, content_block: { type: 'tool_use', id: ev.call.id, name: ev.call.name, input: {} } });
        await send({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: ev.call.argumentsJson } });
        await send({ type: 'content_block_stop', index });
      } else {
        await closeText();
        await send({
          type: 'message_delta',
          delta: { stop_reason: stopReason(ev.reason), stop_sequence: ev.reason === FinishReason.Stop ? (ev.stop ?? null) : null },
          usage: usageOf(service, plan, ev.usage),
        });
        await send({ type: 'message_stop' });
      }
    }
  } catch (e) {
    const err = reportedError(e, signal);
    if (err) await sse.send(errorBody('anthropic', err).body, 'error');
  } finally {
    sse.end();
  }
}
