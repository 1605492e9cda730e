/**
 * Tool definitions: `defineTool`, argument parsing and validation, JSON Schema export.
 */
import { z } from 'zod';
import { ToolError, describeReceived, expectedArgument, invalidArgument } from './errors.js';
import { checkJsonSchema, compileJsonSchema, type JsonSchema } from './json-schema.js';
import { isZodSchema, parametersJsonSchema } from '../tool-schema.js';
import { formatIssues } from '../issues.js';
import { parseJsonBounded } from '../json-limits.js';

/** One call the model asked for. `arguments` is an object, or a JSON string that the runner parses. */
export interface ToolCall {
  readonly id: string;
  readonly name: string;
  readonly arguments: unknown;
  /** Set by the accumulator and the OpenAI adapter when the raw arguments were not a JSON object. */
  readonly _invalid_arguments?: string;
}

/** The second argument of an arity-2 handler. */
export interface ToolContext<TEngine = unknown, TContext = unknown> {
  /** `options.context` of the batch (or the engine's `context`). */
  readonly context: TContext;
  readonly sessionId: string | undefined;
  readonly requestId: string | undefined;
  /** The call being answered, as the runner received it. */
  readonly call: ToolCall;
  /** Aborted on timeout, on batch cancellation, or when a stream consumer stops early. */
  readonly signal: AbortSignal;
  readonly engine: TEngine;
}

/**
 * A handler takes `(args)` or `(args, ctx)`; its arity (`handler.length`) picks the form, and any
 * other arity is refused. It returns a plain value (success) or a tagged result, possibly async.
 */
export type ToolHandler<A = unknown> = (args: A, ctx: ToolContext) => unknown;

/**
 * - `cooperative`: at the deadline `ctx.signal` aborts and the runner waits (up to `timeoutGraceMs`)
 *   for the handler to settle; the result is `timeout`.
 * - `abandon`: at the deadline the result is `timeout` at once; the handler is left running
 *   (its signal is aborted, its eventual result ignored).
 * - `isolate`: the handler, loaded from the tool's `isolate` module, runs in a worker thread that is
 *   terminated at the deadline.
 *
 * In every mode a timed-out handler keeps its `maxConcurrency` slot (and its `concurrencyKey`)
 * until it has really stopped: it settled, or its worker exited.
 */
export type TimeoutMode = 'cooperative' | 'abandon' | 'isolate';
export const TIMEOUT_MODES: readonly TimeoutMode[] = ['cooperative', 'abandon', 'isolate'];

/** Where an isolated tool's handler lives: a module the worker imports, and one of its exports. */
export interface IsolateSpec {
  /** A path (absolute, or relative to the working directory), a `file:` or `data:` URL string, or a `URL`. */
  readonly module: string | URL;
  /** The export that is the handler; `'default'` when left out. */
  readonly export?: string;
}

/** A zod schema (classic or mini) or a JSON Schema object. */
export type ToolParameters = z.core.$ZodType | JsonSchema;

/** The handler's argument type for a given `parameters`. */
export type InferToolArgs<S> = S extends z.core.$ZodType ? z.output<S> : Record<string, unknown>;

export interface ToolDefinition<S extends ToolParameters | undefined = ToolParameters | undefined> {
  readonly name: string;
  readonly description?: string;
  /** Arguments schema; no schema accepts any arguments. */
  readonly parameters?: S;
  /**
   * Omit for a manual-mode tool (the executor answers `not_found` and the caller runs it) and for a
   * tool with an `isolate` module.
   */
  readonly handler?: ToolHandler<InferToolArgs<S>>;
  /** Milliseconds; overrides the batch's `toolTimeoutMs`. `Infinity` disables the timeout. */
  readonly timeoutMs?: number;
  /** Overrides the batch's `timeoutMode` for this tool; `'isolate'` needs `isolate` (and is implied by it). */
  readonly timeoutMode?: TimeoutMode;
  /** Calls of tools sharing a key run one at a time. */
  readonly concurrencyKey?: string;
  /** Always run in an isolate worker, loading the handler from this module export (no `handler` then). */
  readonly isolate?: IsolateSpec;
}

/** A defined tool. Plain objects of this shape are accepted by the runner too. */
export interface Tool<A = unknown> {
  readonly name: string;
  readonly description: string;
  readonly parameters: ToolParameters | undefined;
  readonly handler: ToolHandler<A> | undefined;
  readonly timeoutMs: number | undefined;
  readonly timeoutMode: TimeoutMode | undefined;
  readonly concurrencyKey: string | undefined;
  readonly isolate: IsolateSpec | undefined;
}

/** A tool of any argument type, as the runner accepts them. */
export type AnyTool = Tool<any>;

const DEFINITION_KEYS = new Set([
  'name',
  'description',
  'parameters',
  'handler',
  'timeoutMs',
  'timeoutMode',
  'concurrencyKey',
  'isolate',
]);

export { isZodSchema };

/**
 * Throws `INVALID_ARGUMENT` unless `handler` is a function of arity 1 or 2.
 * @throws {LlamuxError} `INVALID_ARGUMENT`
 */
export function assertHandlerArity(handler: unknown, toolName: string): asserts handler is ToolHandler {
  if (typeof handler !== 'function') {
    throw expectedArgument(`the handler of tool ${JSON.stringify(toolName)}`, 'a function', handler);
  }
  if (handler.length !== 1 && handler.length !== 2) {
    throw invalidArgument(
      `Expected the handler of tool ${JSON.stringify(toolName)} to take (args) or (args, ctx) but received a function that declares ${handler.length} parameters ` +
        '(default values and rest parameters do not count; write (_args) => … for a tool without arguments)',
    );
  }
}

/**
 * Checks a tool object (from `defineTool` or hand-written) and returns it. A JSON Schema in
 * `parameters` is compiled here, so an unsupported schema fails before any call runs.
 * @throws {LlamuxError} `INVALID_ARGUMENT` on a missing name or a bad field.
 */
export function assertTool(value: unknown, where = 'tool'): AnyTool {
  if (typeof value !== 'object' || value === null) {
    throw expectedArgument(where, 'an object', value);
  }
  const t = value as Partial<Record<keyof Tool, unknown>>;
  if (typeof t.name !== 'string' || t.name === '') {
    throw expectedArgument(`${where}.name`, 'a non-empty string', t.name);
  }
  const label = `tool ${JSON.stringify(t.name)}`;
  if (t.description !== undefined && typeof t.description !== 'string') {
    throw expectedArgument(`the description of ${label}`, 'a string', t.description);
  }
  if (t.parameters !== undefined) {
    if (typeof t.parameters !== 'boolean' && (typeof t.parameters !== 'object' || t.parameters === null || Array.isArray(t.parameters))) {
      throw expectedArgument(`the parameters of ${label}`, 'a zod schema or a JSON Schema object', t.parameters);
    }
    if (!isZodSchema(t.parameters)) compileJsonSchema(t.parameters as JsonSchema, `the parameters of ${label}`);
  }
  if (t.handler !== undefined) assertHandlerArity(t.handler, t.name);
  if (t.timeoutMs !== undefined && (typeof t.timeoutMs !== 'number' || !(t.timeoutMs > 0))) {
    throw expectedArgument(`the timeoutMs of ${label}`, 'a positive number or Infinity', t.timeoutMs);
  }
  if (t.timeoutMode !== undefined && !TIMEOUT_MODES.includes(t.timeoutMode as TimeoutMode)) {
    throw expectedArgument(`the timeoutMode of ${label}`, `one of ${TIMEOUT_MODES.map((m) => `'${m}'`).join(', ')}`, t.timeoutMode);
  }
  if (t.concurrencyKey !== undefined && (typeof t.concurrencyKey !== 'string' || t.concurrencyKey === '')) {
    throw expectedArgument(`the concurrencyKey of ${label}`, 'a non-empty string', t.concurrencyKey);
  }
  if (t.isolate !== undefined) {
    const iso = t.isolate as Partial<IsolateSpec> | null;
    if (typeof iso !== 'object' || iso === null) {
      throw expectedArgument(`the isolate option of ${label}`, '{ module: string | URL, export?: string }', iso);
    }
    if (!((typeof iso.module === 'string' && iso.module !== '') || iso.module instanceof URL)) {
      throw expectedArgument(`isolate.module of ${label}`, 'a non-empty string (a path or a file: or data: URL) or a URL', iso.module);
    }
    if (iso.export !== undefined && (typeof iso.export !== 'string' || iso.export === '')) {
      throw expectedArgument(`isolate.export of ${label}`, 'a non-empty string', iso.export);
    }
    if (t.handler !== undefined) {
      throw invalidArgument(
        `Expected ${label} to have either a handler or an isolate module but received both; an isolated tool runs only its module export`,
      );
    }
    if (t.timeoutMode !== undefined && t.timeoutMode !== 'isolate') {
      throw expectedArgument(`the timeoutMode of ${label}, which has an isolate module and always runs isolated,`, "'isolate' or undefined", t.timeoutMode);
    }
  } else if (t.timeoutMode === 'isolate') {
    throw invalidArgument(isolateNeedsModule(t.name, t.handler));
  }
  return value as AnyTool;
}

/**
 * The message for a tool that would run in isolate mode without an isolate module. Isolate mode
 * loads the handler from a module in the worker; it never ships a function's source.
 */
export function isolateNeedsModule(toolName: string, handler: unknown): string {
  return (
    `Expected tool ${JSON.stringify(toolName)} to have an isolate module ({ module, export }) for timeoutMode 'isolate' but received ` +
    `${handler === undefined ? 'no handler and no module' : describeReceived(handler)}; isolate mode imports the handler from a module ` +
    'in a worker and cannot run a function defined in this thread'
  );
}

/**
 * Defines a tool.
 *
 * @throws {LlamuxError} `INVALID_ARGUMENT` on a bad field, an unknown key, a handler whose arity is
 *   not 1 or 2, `timeoutMode: 'isolate'` without an `isolate` module, or a JSON Schema that llamux
 *   cannot check (see `compileJsonSchema`).
 * @example
 * ```ts
 * const weather = defineTool({
 *   name: 'get_weather',
 *   description: 'Current weather for a city',
 *   parameters: z.object({ city: z.string() }),
 *   handler: async ({ city }) => ({ city, celsius: 21 }),
 * });
 * ```
 */
export function defineTool<const S extends ToolParameters | undefined = undefined>(
  definition: ToolDefinition<S>,
): Tool<InferToolArgs<S>> {
  if (typeof definition !== 'object' || definition === null) {
    throw expectedArgument('the tool definition', 'an object', definition);
  }
  for (const key of Object.keys(definition)) {
    if (!DEFINITION_KEYS.has(key)) {
      throw invalidArgument(`Unknown tool definition key ${JSON.stringify(key)}; expected one of ${[...DEFINITION_KEYS].join(', ')}`);
    }
  }
  assertTool(definition, 'the tool definition');
  return Object.freeze({
    name: definition.name,
    description: definition.description ?? '',
    parameters: definition.parameters,
    handler: definition.handler as ToolHandler<InferToolArgs<S>> | undefined,
    timeoutMs: definition.timeoutMs,
    timeoutMode: definition.isolate !== undefined ? 'isolate' : definition.timeoutMode,
    concurrencyKey: definition.concurrencyKey,
    isolate: definition.isolate === undefined ? undefined : Object.freeze({ ...definition.isolate }),
  });
}

/**
 * The JSON Schema of a tool's arguments, for prompts and provider requests. zod schemas are
 * converted with `z.toJSONSchema` (input side, so defaulted keys are optional; unrepresentable
 * parts become `{}`), without the `$schema` key. No schema gives an open object schema.
 */
export function toolParametersJsonSchema(tool: Pick<Tool, 'parameters'>): Record<string, unknown> {
  return parametersJsonSchema(tool.parameters);
}

/** A tool as a function declaration: `{ name, description, parameters }`. */
export interface ToolFunctionSchema {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

/** The function-declaration shape used by OpenAI (`function`), Hermes/Qwen prompts and Gemini. */
export function toolToJsonSchema(tool: Pick<Tool, 'name' | 'description' | 'parameters'>): ToolFunctionSchema {
  return { name: tool.name, description: tool.description ?? '', parameters: toolParametersJsonSchema(tool) };
}

export type ArgumentsCheck = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: ToolError };

function invalid(call: ToolCall, message: string, metadata: Record<string, unknown>, cause?: unknown): ArgumentsCheck {
  return {
    ok: false,
    error: new ToolError('invalid_arguments', `invalid arguments for tool ${JSON.stringify(call.name)}: ${message}`, {
      toolCallId: call.id,
      toolName: call.name,
      metadata,
      ...(cause === undefined ? {} : { cause }),
    }),
  };
}

/**
 * Reads a call's arguments: an object as is; a string parsed as JSON (empty string = `{}`); a call
 * tagged `_invalid_arguments` is refused.
 */
export function parseCallArguments(call: ToolCall): ArgumentsCheck {
  if (typeof call._invalid_arguments === 'string') {
    return invalid(call, 'the arguments are not a JSON object', { raw: call._invalid_arguments });
  }
  const args = call.arguments;
  if (typeof args !== 'string') return { ok: true, value: args === undefined ? {} : args };
  if (args.trim() === '') return { ok: true, value: {} };
  try {
    const parsed: unknown = parseJsonBounded(args);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      return invalid(call, 'the arguments are not a JSON object', { raw: args });
    }
    return { ok: true, value: parsed };
  } catch (err) {
    return invalid(call, `malformed JSON (${(err as Error).message})`, { raw: args }, err);
  }
}

/**
 * Validates parsed arguments against the tool's schema. zod schemas give their parsed output
 * (defaults and transforms applied); JSON Schemas are checked by `checkJsonSchema`
 * (@cfworker/json-schema) and the arguments pass through unchanged.
 */
export async function validateToolArguments(tool: AnyTool, call: ToolCall, args: unknown): Promise<ArgumentsCheck> {
  const params = tool.parameters;
  if (params === undefined) return { ok: true, value: args };
  if (isZodSchema(params)) {
    const parsed = await z.safeParseAsync(params, args);
    if (parsed.success) return { ok: true, value: parsed.data };
    const issues = parsed.error.issues.map((i) => ({ path: i.path.map((p) => (typeof p === 'symbol' ? String(p) : p)), message: i.message }));
    return invalid(call, formatIssues(issues, { kind: 'argument' }), { issues }, parsed.error);
  }
  const issues = checkJsonSchema(params, args);
  if (issues.length === 0) return { ok: true, value: args };
  return invalid(call, formatIssues(issues, { kind: 'argument' }), { issues });
}

