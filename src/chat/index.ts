/** Chat templates, chat prompts with exact tool-call replay, and tool-call span parsing. */
export {
  ChatTemplate,
  DEFAULT_CHAT_TEMPLATE,
  renderChat,
  alnum9,
  type ChatTemplateOptions,
  type RenderChatOptions,
} from './template.js';
export {
  buildChatPrompt,
  markerTexts,
  type BuildChatPromptOptions,
  type ChatPrompt,
  type MarkerTexts,
  type ReplaySpan,
} from './prompt.js';
export type { TurnReplay } from './turn-replay.js';
export { buildChatPromptWithMedia, hasChatMedia } from './media.js';
export { parseToolCallSpan, newToolCallId, canonicalJson, argumentsObject, type SpanToolCall } from './tool-calls.js';
export {
  ChatMessageSchema,
  ChatMessagesSchema,
  ChatToolCallSchema,
  ChatToolDefinitionSchema,
  type ChatMessage,
  type ChatSystemMessage,
  type ChatUserMessage,
  type ChatAssistantMessage,
  type ChatToolMessage,
  type ChatToolCall,
  type ChatToolDefinition,
} from './types.js';
