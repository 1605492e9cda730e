export { checkToolSchemas, compileToolGrammar, clearToolGrammarCache, TOOL_GRAMMAR_ROOT } from './tool-grammar.js';
export type { ToolChoice, ToolCallFamily, ToolDefinition, ToolGrammar, ToolGrammarRequest } from './tool-grammar.js';
export { MAX_EXACT_ITEMS, MAX_EXACT_LENGTH } from './json-schema.js';
export { compileResponseFormat, RESPONSE_FORMAT_ROOT } from './response-format.js';
export type { ResponseFormatGrammar } from './response-format.js';
export { SchemaGrammarError } from './json-schema.js';
