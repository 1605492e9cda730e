// The public surface of llamux ('llamux'). Nothing is exported by accident: every name is
// listed here (no `export *`). The whole tool layer is also at 'llamux/tools', the HTTP
// server at 'llamux/server', and the GGUF fixture generators at 'llamux/testing'.
// test/types/public.test-d.ts checks these types; test/api/exports.test.ts the values.

// ---- models, contexts, sessions --------------------------------------------------------
export { Model, TokenAttribute } from './model/model.js';
export { Adapter, type AdapterUse } from './model/adapter.js';
export { loadModel, planForFile } from './model/load.js';
export { ModelPool, ModelLoadError } from './model/pool.js';
export type { ModelLease, ModelPoolEntry, ModelPoolEvents, ModelPoolOptions, PooledModel, PooledModelState, PooledModelStatus, UnloadReason } from './model/pool.js';
export type { MediaLimits, ModelCapabilities, ModelMetadata, ProjectorReport, TokenInfo, VocabInfo, WeightPlacement } from './model/model.js';
export type { FimTokens } from './model/types.js';
export { Context, Generation } from './engine/context.js';
export type { ContextSettings } from './engine/context.js';
export type { EmbedOptions, EmbedResult, Pooling, RerankOptions, RerankResult } from './engine/embedding.js';
export { Session } from './engine/session.js';
export type { SessionContinueOptions, SessionGenerateOptions, SessionStats } from './engine/session.js';
export type {
  ContextOptions,
  DetokenizeOptions,
  GenerateOptions,
  GenerateTool,
  InfillOptions,
  LoadModelOptions,
  PrefillOptions,
  PromptPart,
  ResponseFormat,
  SessionOptions,
  SpeculativeOptions,
  TokenizeOptions,
  TokenizeAsyncOptions,
} from './options.js';
export type { NativeCacheStats as CacheStats } from './native/binding.js';

// ---- pulling models from a hub ----------------------------------------------------------
export { pull, listModels, removeModel, findModel, modelsDirectory, parseModelReference, HubError, DEFAULT_QUANTS, DEFAULT_HF_ENDPOINT } from './hub/index.js';
export type { PullOptions, PullProgress, ModelsDirOptions, PulledModel, PulledFile, ModelReference, HubErrorDetails } from './hub/index.js';

// ---- events ------------------------------------------------------------------------------
export { FinishReason } from './engine/events.js';
export type {
  CacheReport,
  FinalEvent,
  GenerateEvent,
  GenerateResult,
  GenerateTimings,
  ProgressEvent,
  ReasoningEvent,
  ReasoningResult,
  TextEvent,
  TokenLogprob,
  ToolCallDeltaEvent,
  ToolCallEndEvent,
  ToolCallSpan,
  ToolCallStartEvent,
  ToolCallTruncatedEvent,
} from './engine/events.js';

// ---- tool-call markers -------------------------------------------------------------------
export { MARKER_PRESETS, detectMarkerPreset, tokenizeMarker } from './engine/markers.js';
export type { MarkerOption, MarkerPresetName, ResolvedMarkers, ToolCallMarkers } from './engine/markers.js';

// ---- reasoning markers -------------------------------------------------------------------
export { REASONING_PRESETS, detectReasoningPreset, promptOpensReasoning } from './engine/reasoning.js';
export type { ReasoningMarkers, ReasoningOption, ReasoningPresetName, ResolvedReasoningMarkers } from './engine/reasoning.js';

// ---- tool grammars -----------------------------------------------------------------------
export { compileToolGrammar } from './grammar/index.js';
export type { ToolCallFamily, ToolChoice, ToolGrammar, ToolGrammarRequest } from './grammar/index.js';

// ---- errors and logging ------------------------------------------------------------------
export { ERROR_CODES, LlamuxError, isLlamuxError } from './errors.js';
export type { LlamuxErrorCode } from './errors.js';
export { setLogger } from './logger.js';
export { describeSystem, systemInfo } from './native/system-info.js';
export type { SystemInfo } from './native/system-info.js';
export { planFit, modelSizesFromGguf, describePlan } from './model/fit.js';
export type { FitPlan, FitDevice, FitDevicePlan, FitExpertPlan, FitModelSizes, FitRequest } from './model/fit.js';
export type { LogHandler, LogLevel } from './logger.js';

// ---- tools (the full tool layer, helpers included, is 'llamux/tools') ------------------------
export {
  defineTool,
  toolToJsonSchema,
  toolParametersJsonSchema,
  validateToolArguments,
  parseCallArguments,
  TIMEOUT_MODES,
  checkJsonSchema,
  compileJsonSchema,
  JSON_SCHEMA_FORMATS,
  ok,
  toolError,
  askUser,
  halt,
  isToolResult,
  RESERVED_HALT_REASONS,
  ToolError,
  UnknownToolError,
  isToolError,
  EXECUTOR_ERROR_REASONS,
  RUNNER_ERROR_REASONS,
  defaultExecutor,
  isolateExecutor,
  jsonEncoder,
  describeToolError,
  runToolCalls,
  streamToolCalls,
  DEFAULT_TOOL_TIMEOUT_MS,
  DEFAULT_TIMEOUT_GRACE_MS,
  ToolCallAccumulator,
  createToolCallAccumulator,
  decodeToolArguments,
  parsePartialJson,
  runAnthropicToolUse,
  anthropicToolCalls,
  toAnthropicToolResults,
  toAnthropicTool,
  runOpenAIToolCalls,
  openAIToolCalls,
  toOpenAIToolMessages,
  toOpenAITool,
} from './tools/index.js';
export type {
  Tool,
  AnyTool,
  ToolCall,
  ToolContext,
  ToolDefinition,
  ToolHandler,
  ToolParameters,
  ToolFunctionSchema,
  InferToolArgs,
  IsolateSpec,
  TimeoutMode,
  ArgumentsCheck,
  CompiledJsonSchema,
  JsonSchema,
  JsonSchemaIssue,
  ToolResult,
  ToolResultKind,
  OkResult,
  ErrorResult,
  AskUserResult,
  HaltResult,
  ReservedHaltReason,
  ToolErrorReason,
  ExecutorErrorReason,
  RunnerErrorReason,
  ToolErrorOptions,
  ToolExecutor,
  ToolResultEncoder,
  RunToolCallsOptions,
  RunToolCallsResult,
  OnToolError,
  OnToolErrorFunction,
  OnToolErrorDecision,
  ToolMessage,
  ToolCallStatus,
  ToolCallOutcome,
  HaltMetadata,
  ToolErrorHaltMetadata,
  ToolEvent,
  ToolExecutionStartedEvent,
  ToolExecutionCompletedEvent,
  ToolResultEncodedEvent,
  AskUserRequestedEvent,
  ToolHaltEvent,
  ToolBatchErrorEvent,
  AccumulatedToolCall,
  ToolCallSnapshot,
  ToolCallSource,
  ToolCallAccumulatorOptions,
  AnthropicContentBlock,
  AnthropicToolUseBlock,
  AnthropicToolResultBlock,
  AnthropicToolResultMessage,
  AnthropicToolDefinition,
  AnthropicToolRun,
  OpenAIToolCall,
  OpenAIAssistantMessage,
  OpenAIToolMessage,
  OpenAIToolDefinition,
  OpenAIToolRun,
} from './tools/index.js';

// ---- chat templates and prompts ------------------------------------------------------------
export { ChatTemplate, DEFAULT_CHAT_TEMPLATE, renderChat } from './chat/template.js';
export type { ChatTemplateOptions, RenderChatOptions } from './chat/template.js';
export { buildChatPrompt, markerTexts } from './chat/prompt.js';
export { buildChatPromptWithMedia, hasChatMedia } from './chat/media.js';
export type { BuildChatPromptOptions, ChatPrompt, MarkerTexts, ReplaySpan } from './chat/prompt.js';
export type { TurnReplay } from './chat/turn-replay.js';
export { parseToolCallSpan, newToolCallId, argumentsObject } from './chat/tool-calls.js';
export type { SpanToolCall } from './chat/tool-calls.js';
export { ChatContentPartSchema, ChatMessageSchema, ChatMessagesSchema, ChatToolCallSchema, ChatToolDefinitionSchema } from './chat/types.js';
export type {
  ChatContentPart,
  ChatMessage,
  ChatSystemMessage,
  ChatUserMessage,
  ChatAssistantMessage,
  ChatToolMessage,
  ChatToolCall,
  ChatToolDefinition,
} from './chat/types.js';

// ---- the agent loop ------------------------------------------------------------------------
export { Agent } from './agent/agent.js';
export type { AgentOptions, AgentGenerateOptions, AgentRunOptions } from './agent/agent.js';
export type {
  AgentEvent,
  AgentHeldResult,
  AgentPendingCall,
  AgentResult,
  AgentResumeInput,
  AgentSpan,
  AgentState,
  AgentStatus,
  AgentToolCallInfo,
  AgentTurnInfo,
  AgentTurnReport,
} from './agent/types.js';
