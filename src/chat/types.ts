// Chat messages in llamux's own provider-neutral shape, and their zod schemas. The server
// converts OpenAI and Anthropic requests into this shape; templates receive the
// OpenAI-style variables most Jinja chat templates expect (see template.ts).
import { z } from 'zod';

/** A tool call of an assistant message. */
export interface ChatToolCall {
  /** Unique within the conversation; the key under which llamux stores the call's exact tokens. */
  id: string;
  name: string;
  /** Decoded arguments, or the JSON text the client sent (decoded for the template when it is an object). */
  arguments: Record<string, unknown> | string;
}

export interface ChatSystemMessage {
  role: 'system';
  content: string;
}
/** A part of a user message: text, or media (a model loaded with a projector; src/chat/media.ts). */
export type ChatContentPart =
  | { type: 'text'; text: string }
  | { type: 'image'; image: Uint8Array | string }
  | { type: 'audio'; audio: Uint8Array | string };

export interface ChatUserMessage {
  role: 'user';
  /** Text, or parts: text and media (images as bytes or data: URLs). */
  content: string | ChatContentPart[];
}
export interface ChatAssistantMessage {
  role: 'assistant';
  /** Text outside tool-call spans; null or absent when the turn was only tool calls. */
  content?: string | null;
  toolCalls?: ChatToolCall[];
  /** Reasoning text for templates that render it (`reasoning_content`). */
  reasoningContent?: string;
}
export interface ChatToolMessage {
  role: 'tool';
  toolCallId: string;
  /** The tool's name; looked up from the matching call when absent. */
  name?: string;
  content: string;
}

export type ChatMessage = ChatSystemMessage | ChatUserMessage | ChatAssistantMessage | ChatToolMessage;

/** A tool as the template sees it (a function declaration with a JSON Schema). */
export interface ChatToolDefinition {
  name: string;
  description?: string;
  /** JSON Schema of the arguments (default: an object with no declared properties). */
  parameters?: Record<string, unknown>;
}

export const ChatToolCallSchema = z
  .object({
    id: z.string().min(1),
    name: z.string().min(1),
    arguments: z.union([z.record(z.string(), z.unknown()), z.string()]),
  })
  .strict();

const mediaSource = z.union([z.custom<Uint8Array>((v) => v instanceof Uint8Array, { message: 'expected a Uint8Array (or Buffer)' }), z.string().min(1)]);
export const ChatContentPartSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text'), text: z.string() }).strict(),
  z.object({ type: z.literal('image'), image: mediaSource }).strict(),
  z.object({ type: z.literal('audio'), audio: mediaSource }).strict(),
]);

export const ChatMessageSchema = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content: z.string() }).strict(),
  z.object({ role: z.literal('user'), content: z.union([z.string(), z.array(ChatContentPartSchema)]) }).strict(),
  z
    .object({
      role: z.literal('assistant'),
      content: z.string().nullable().optional(),
      toolCalls: z.array(ChatToolCallSchema).optional(),
      reasoningContent: z.string().optional(),
    })
    .strict(),
  z
    .object({ role: z.literal('tool'), toolCallId: z.string().min(1), name: z.string().min(1).optional(), content: z.string() })
    .strict(),
]);

export const ChatToolDefinitionSchema = z
  .object({
    name: z.string().min(1),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();

export const ChatMessagesSchema = z.array(ChatMessageSchema);
