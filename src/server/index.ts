/** The OpenAI- and Anthropic-compatible HTTP server. */
export { createServer, type ServerOptions, type LlamuxServer } from './server.js';
export { ToolCallStore, type StoredToolCall, type StoredTurn, type ToolCallStoreLimits } from './store.js';
export { ResponseStore, type StoredResponse, type ResponseStoreLimits } from './response-store.js';
export { ServerMetrics, type CacheOutcome } from './metrics.js';
