/**
 * The public surface of llamux's tool layer. Nothing is public unless it is listed here.
 */
export {
  defineTool,
  toolToJsonSchema,
  toolParametersJsonSchema,
  validateToolArguments,
  parseCallArguments,
  isZodSchema,
  TIMEOUT_MODES,
  type Tool,
  type AnyTool,
  type ToolCall,
  type ToolContext,
  type ToolDefinition,
  type ToolHandler,
  type ToolParameters,
  type ToolFunctionSchema,
  type InferToolArgs,
  type IsolateSpec,
  type TimeoutMode,
  type ArgumentsCheck,
} from './tool.js';
export {
  checkJsonSchema,
  compileJsonSchema,
  JSON_SCHEMA_FORMATS,
  type CompiledJsonSchema,
  type JsonSchema,
  type JsonSchemaIssue,
} from './json-schema.js';
export {
  ok,
  toolError,
  askUser,
  halt,
  isToolResult,
  interpretHandlerReturn,
  TOOL_RESULT_TAG,
  RESERVED_HALT_REASONS,
  type ToolResult,
  type ToolResultKind,
  type OkResult,
  type ErrorResult,
  type AskUserResult,
  type HaltResult,
  type ReservedHaltReason,
} from './results.js';
export {
  ToolError,
  UnknownToolError,
  isToolError,
  EXECUTOR_ERROR_REASONS,
  RUNNER_ERROR_REASONS,
  type ToolErrorReason,
  type ExecutorErrorReason,
  type RunnerErrorReason,
  type ToolErrorOptions,
} from './errors.js';
export { defaultExecutor, type ToolExecutor } from './executor.js';
export { isolateExecutor } from './isolate.js';
export { jsonEncoder, describeToolError, type ToolResultEncoder } from './encoder.js';
export {
  runToolCalls,
  streamToolCalls,
  DEFAULT_TOOL_TIMEOUT_MS,
  DEFAULT_TIMEOUT_GRACE_MS,
  type RunToolCallsOptions,
  type RunToolCallsResult,
  type OnToolError,
  type OnToolErrorFunction,
  type OnToolErrorDecision,
  type ToolMessage,
  type ToolCallStatus,
  type ToolCallOutcome,
  type HaltMetadata,
  type ToolErrorHaltMetadata,
  type ToolEvent,
  type ToolExecutionStartedEvent,
  type ToolExecutionCompletedEvent,
  type ToolResultEncodedEvent,
  type AskUserRequestedEvent,
  type ToolHaltEvent,
  type ToolBatchErrorEvent,
} from './runner.js';
export {
  ToolCallAccumulator,
  createToolCallAccumulator,
  decodeToolArguments,
  type AccumulatedToolCall,
  type ToolCallSnapshot,
  type ToolCallSource,
  type ToolCallAccumulatorOptions,
} from '../chat/accumulator.js';
export { parsePartialJson } from '../chat/partial-json.js';
export {
  runAnthropicToolUse,
  anthropicToolCalls,
  toAnthropicToolResults,
  toAnthropicTool,
  type AnthropicContentBlock,
  type AnthropicToolUseBlock,
  type AnthropicToolResultBlock,
  type AnthropicToolResultMessage,
  type AnthropicToolDefinition,
  type AnthropicToolRun,
} from './anthropic.js';
export {
  runOpenAIToolCalls,
  openAIToolCalls,
  toOpenAIToolMessages,
  toOpenAITool,
  type OpenAIToolCall,
  type OpenAIAssistantMessage,
  type OpenAIToolMessage,
  type OpenAIToolDefinition,
  type OpenAIToolRun,
} from './openai.js';
