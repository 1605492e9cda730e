// The items of the Responses API: their schemas, the stored form every input item is normalised
// to (with an id, as `GET /v1/responses/{id}/input_items` lists them), and their conversion to
// llamux chat messages.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { ChatContentPart, ChatMessage, ChatToolCall } from '../chat/types.js';
import { MAX_JSON_DEPTH, jsonTextDepth } from '../json-limits.js';
import { HttpError } from './http.js';

export const TOOL_NAME = z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'a tool name of 1 to 128 characters A-Z, a-z, 0-9, "_", ".", ":" or "-"');
const ITEM_ID = z.string().min(1).max(256);
const CALL_ID = z.string().min(1).max(256);

// Items are read leniently (unknown keys dropped: clients echo output items with `status`,
// `annotations`, `logprobs` ...); the item types and part types are checked first (checkItems).
const TextPart = z.object({ type: z.enum(['input_text', 'output_text']), text: z.string() });
const RefusalPart = z.object({ type: z.literal('refusal'), refusal: z.string() });
/** An image of a user message (a model with a projector; checked by responses-media.ts). `detail`
 * is accepted and not used: the projector sets the resolution. */
export const ImagePart = z.object({
  type: z.literal('input_image'),
  image_url: z.string().min(1),
  detail: z.enum(['low', 'high', 'auto', 'original']).optional(),
});

const MessageItem = z.object({
  type: z.literal('message'),
  id: ITEM_ID.optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer']),
  content: z.union([z.string(), z.array(z.union([TextPart, RefusalPart, ImagePart]))]),
});
const FunctionCallItem = z.object({ type: z.literal('function_call'), id: ITEM_ID.optional(), call_id: CALL_ID, name: TOOL_NAME, arguments: z.string() });
const FunctionCallOutputItem = z.object({
  type: z.literal('function_call_output'),
  id: ITEM_ID.optional(),
  call_id: CALL_ID,
  output: z.union([z.string(), z.array(TextPart)]),
});
const ReasoningItem = z.object({
  type: z.literal('reasoning'),
  id: ITEM_ID.optional(),
  summary: z.array(z.object({ type: z.literal('summary_text'), text: z.string() })).default([]),
  content: z.array(z.object({ type: z.literal('reasoning_text'), text: z.string() })).optional(),
  encrypted_content: z.string().nullable().optional(),
});

const ItemReference = z.object({ type: z.literal('item_reference'), id: ITEM_ID });

/** One input item (a message without `type` is a message, as the API allows). */
export const InputItem = z.preprocess(
  (v) => (v !== null && typeof v === 'object' && !Array.isArray(v) && (v as { type?: unknown }).type === undefined ? { ...v, type: 'message' } : v),
  z.discriminatedUnion('type', [MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem, ItemReference]),
);
export type InputItemT = z.output<typeof InputItem>;

const ITEM_TYPES = new Set(['message', 'function_call', 'function_call_output', 'reasoning', 'item_reference']);
const PART_TYPES = new Set(['input_text', 'output_text', 'refusal', 'input_image']);

/**
 * Refuses, with a message naming the item, item and part types this server does not serve
 * (images, files, built-in tool calls, item references), before schema validation.
 */
export function checkItems(body: unknown): void {
  const input = (body as { input?: unknown })?.input;
  if (!Array.isArray(input)) return;
  input.forEach((item, i) => {
    if (item === null || typeof item !== 'object') return;
    const type = (item as { type?: unknown }).type ?? 'message';
    if (typeof type === 'string' && !ITEM_TYPES.has(type)) {
      throw new HttpError(400, 'invalid_request', `input[${i}]: items of type "${type}" are not supported by this server (message, function_call, function_call_output, reasoning and item_reference are)`, `input[${i}].type`);
    }
    const parts = type === 'function_call_output' ? (item as { output?: unknown }).output : (item as { content?: unknown }).content;
    if (!Array.isArray(parts) || type === 'reasoning') return;
    parts.forEach((p, j) => {
      const pt = (p as { type?: unknown })?.type;
      if (typeof pt === 'string' && !PART_TYPES.has(pt)) {
        throw new HttpError(400, 'invalid_request', `input[${i}]: content parts of type "${pt}" are not supported by this server (input_text, output_text, and input_image in user messages)`, `input[${i}].content[${j}].type`);
      }
      if (pt === 'input_image' && (type !== 'message' || (item as { role?: unknown }).role !== 'user')) {
        throw new HttpError(400, 'invalid_request', `input[${i}].content[${j}]: input_image parts belong in user messages (a tool's screenshot goes in the next user message)`, `input[${i}].content[${j}].type`);
      }
      if (pt === 'input_image' && typeof (p as { image_url?: unknown }).image_url !== 'string') {
        throw new HttpError(400, 'invalid_request', `input[${i}].content[${j}]: input_image needs an image_url (a data: URL); file_id is not served (this server has no Files API)`, `input[${i}].content[${j}].image_url`);
      }
    });
  });
}

/** An item as stored and listed: always with an id and the API's output shape. */
export type StoredItem =
  | { id: string; type: 'message'; role: 'user' | 'assistant' | 'system' | 'developer'; status: 'completed'; content: Array<StoredTextPart | StoredImagePart> }
  | { id: string; type: 'function_call'; call_id: string; name: string; arguments: string; status: 'completed' }
  | { id: string; type: 'function_call_output'; call_id: string; output: string; status: 'completed' }
  | { id: string; type: 'reasoning'; summary: Array<{ type: 'summary_text'; text: string }>; content?: Array<{ type: 'reasoning_text'; text: string }> };

type StoredTextPart = { type: 'input_text' | 'output_text'; text: string; annotations?: [] };
/** An image as stored: always its bytes (a data: URL; a remote one was fetched first), so a chain replays it exactly. */
type StoredImagePart = { type: 'input_image'; image_url: string; detail: 'low' | 'high' | 'auto' | 'original' };

/** The text of a message's parts (images left out). */
function textOfParts(content: ReadonlyArray<StoredTextPart | StoredImagePart>): string {
  return content.map((p) => (p.type === 'input_image' ? '' : p.text)).join('');
}

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(24).toString('hex')}`;
}

function partText(p: { type: string; text?: string; refusal?: string }): string {
  return p.text ?? p.refusal ?? '';
}

/**
 * The request's `input` as stored items (a string is one user message). An `item_reference` names
 * an item the previous responses already hold (`history`): it is there once, so it is dropped.
 */
export function normalizeInput(input: string | InputItemT[] | undefined, history: readonly StoredItem[]): StoredItem[] {
  if (input === undefined) return [];
  if (typeof input === 'string') return [{ id: newId('msg'), type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_text', text: input }] }];
  const known = new Set(history.map((it) => it.id));
  return input.flatMap((item, i): StoredItem[] => (item.type === 'item_reference' ? (known.has(item.id) ? [] : unknownReference(item.id, i)) : [toStored(item, i)]));
}

function unknownReference(id: string, i: number): never {
  throw new HttpError(400, 'invalid_request', `input[${i}]: the item_reference ${JSON.stringify(id.slice(0, 64))} names no item of the previous responses (send the item itself)`, `input[${i}].id`);
}

function toStored(item: Exclude<InputItemT, { type: 'item_reference' }>, i: number): StoredItem {
  switch (item.type) {
    case 'message': {
      const parts = typeof item.content === 'string' ? [item.content] : item.content;
      const content = parts.map((p): StoredTextPart | StoredImagePart => {
        if (typeof p !== 'string' && p.type === 'input_image') return { type: 'input_image', image_url: p.image_url, detail: p.detail ?? 'auto' };
        const text = typeof p === 'string' ? p : partText(p);
        return item.role === 'assistant' ? { type: 'output_text' as const, text, annotations: [] as [] } : { type: 'input_text' as const, text };
      });
      return { id: item.id ?? newId('msg'), type: 'message', role: item.role, status: 'completed', content };
    }
    case 'function_call':
      // arguments are JSON text that the templates and the replay parse: bounded like the body
      if (jsonTextDepth(item.arguments) > MAX_JSON_DEPTH) {
        throw new HttpError(400, 'invalid_request', `input[${i}].arguments nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`, `input[${i}].arguments`);
      }
      return { id: item.id ?? newId('fc'), type: 'function_call', call_id: item.call_id, name: item.name, arguments: item.arguments, status: 'completed' };
    case 'function_call_output':
      return { id: item.id ?? newId('fco'), type: 'function_call_output', call_id: item.call_id, output: typeof item.output === 'string' ? item.output : item.output.map(partText).join(''), status: 'completed' };
    case 'reasoning':
      return { id: item.id ?? newId('rs'), type: 'reasoning', summary: item.summary, ...(item.content ? { content: item.content } : {}) };
  }
}

/**
 * Every function_call_output answers a function_call of the conversation (earlier items
 * included): a 400 naming the first that does not.
 */
export function checkCallOutputs(history: readonly StoredItem[], added: readonly StoredItem[]): void {
  const calls = new Set<string>();
  for (const it of history) if (it.type === 'function_call') calls.add(it.call_id);
  added.forEach((it, i) => {
    if (it.type === 'function_call') calls.add(it.call_id);
    else if (it.type === 'function_call_output' && !calls.has(it.call_id)) {
      throw new HttpError(400, 'invalid_request', `input[${i}]: the function_call_output's call_id ${JSON.stringify(it.call_id.slice(0, 64))} matches no function_call of this conversation`, `input[${i}].call_id`);
    }
  });
}

function reasoningText(it: Extract<StoredItem, { type: 'reasoning' }>): string {
  const parts = it.content?.length ? it.content : it.summary;
  return parts.map((p) => p.text).join('');
}

/** A user message's content: its text, or parts when it holds images. */
function userContent(content: ReadonlyArray<StoredTextPart | StoredImagePart>): string | ChatContentPart[] {
  if (!content.some((p) => p.type === 'input_image')) return textOfParts(content);
  return content.map((p): ChatContentPart => (p.type === 'input_image' ? { type: 'image', image: p.image_url } : { type: 'text', text: p.text }));
}

/**
 * Items → llamux chat messages. `instructions` and leading system/developer messages form one
 * system message; a run of reasoning, assistant messages and function calls is one assistant
 * turn (reasoning as its reasoning content, so a template that renders it reproduces what the
 * model generated); a call's `call_id` is its tool-call id (the key of its exact tokens).
 */
export function itemsToChatMessages(instructions: string | undefined, items: readonly StoredItem[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (instructions !== undefined && instructions.length > 0) out.push({ role: 'system', content: instructions });
  let turn: { content: string[]; reasoning: string[]; calls: ChatToolCall[] } | undefined;
  const flush = (): void => {
    if (!turn) return;
    const content = turn.content.join('');
    out.push({
      role: 'assistant',
      content: content.length > 0 ? content : null,
      ...(turn.calls.length ? { toolCalls: turn.calls } : {}),
      ...(turn.reasoning.length ? { reasoningContent: turn.reasoning.join('') } : {}),
    });
    turn = undefined;
  };
  for (const it of items) {
    if (it.type === 'reasoning') {
      // reasoning after text or calls starts the next generation
      if (turn && (turn.content.length || turn.calls.length)) flush();
      turn ??= { content: [], reasoning: [], calls: [] };
      turn.reasoning.push(reasoningText(it));
    } else if (it.type === 'function_call') {
      turn ??= { content: [], reasoning: [], calls: [] };
      turn.calls.push({ id: it.call_id, name: it.name, arguments: it.arguments });
    } else if (it.type === 'message' && it.role === 'assistant') {
      if (turn && turn.calls.length) flush();
      turn ??= { content: [], reasoning: [], calls: [] };
      turn.content.push(textOfParts(it.content));
    } else {
      flush();
      if (it.type === 'function_call_output') out.push({ role: 'tool', toolCallId: it.call_id, content: it.output });
      else {
        const text = textOfParts(it.content);
        if (it.role === 'user') out.push({ role: 'user', content: userContent(it.content) });
        else {
          const prev = out[out.length - 1];
          if (out.length === 1 && prev?.role === 'system') prev.content = `${prev.content}\n\n${text}`;
          else out.push({ role: 'system', content: text });
        }
      }
    }
  }
  flush();
  return out;
}
