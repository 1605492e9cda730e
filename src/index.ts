// The public surface of llamux. Nothing is exported by accident: add exports here.
export { loadModel, Model, TokenAttribute } from './model.js';
export type { ModelMetadata, TokenInfo, VocabInfo } from './model.js';
export { Context, Generation } from './context.js';
export type { ContextSettings } from './context.js';
export { Session } from './session.js';
export type { SessionContinueOptions, SessionGenerateOptions, SessionStats } from './session.js';
export type {
  CacheReport,
  FinalEvent,
  FinishReason,
  GenerateEvent,
  GenerateResult,
  GenerateTimings,
  TextEvent,
  ToolCallDeltaEvent,
  ToolCallEndEvent,
  ToolCallSpan,
  ToolCallStartEvent,
  ToolCallTruncatedEvent,
} from './events.js';
export { MARKER_PRESETS, detectMarkerPreset, tokenizeMarker } from './markers.js';
export type { MarkerOption, MarkerPresetName, ResolvedMarkers, ToolCallMarkers } from './markers.js';
export { ERROR_CODES, LlamuxError, isLlamuxError } from './errors.js';
export type { LlamuxErrorCode } from './errors.js';
export { setLogger } from './logger.js';
export type { LogHandler, LogLevel } from './logger.js';
export type { ContextOptions, GenerateOptions, LoadModelOptions, PrefillOptions, SessionOptions, TokenizeOptions, DetokenizeOptions } from './options.js';
export type { NativeCacheStats as CacheStats } from './binding.js';
// Tool calling (also importable as 'llamux/tools').
export * from './tools/index.js';
// Chat templates and the agent loop (the HTTP server is at 'llamux/server').
export * from './chat/index.js';
export * from './agent/index.js';
