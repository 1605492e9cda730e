// Entry validation of the tool runner: the options as a zod schema (each option's check and
// its "Expected the … option to be …" words), the engine fallbacks, and the prepared batch.
import { availableParallelism } from 'node:os';
import { z } from 'zod';
import { jsonEncoder, type ToolResultEncoder } from './encoder.js';
import { UnknownToolError, expectedArgument, invalidArgument } from './errors.js';
import { defaultExecutor, type ToolExecutor } from './executor.js';
import { isolateTarget } from './isolate.js';
import { DEFAULT_TIMEOUT_GRACE_MS, DEFAULT_TOOL_TIMEOUT_MS, type OnToolError, type RunToolCallsOptions } from './runner-types.js';
import { TIMEOUT_MODES, assertTool, type AnyTool, type TimeoutMode, type ToolCall } from './tool.js';

export interface Settings {
  readonly engine: unknown;
  readonly context: unknown;
  readonly sessionId: string | undefined;
  readonly requestId: string | undefined;
  readonly executor: ToolExecutor;
  readonly encoder: ToolResultEncoder;
  readonly onToolError: OnToolError;
  readonly toolTimeoutMs: number;
  readonly timeoutMode: TimeoutMode;
  readonly timeoutGraceMs: number;
  readonly maxConcurrency: number;
  readonly unknownTool: 'error' | 'preflight';
  readonly signal: AbortSignal | undefined;
}

export interface Batch {
  readonly calls: readonly ToolCall[];
  readonly tools: ReadonlyMap<string, AnyTool>;
  readonly settings: Settings;
  readonly unknown: UnknownToolError | undefined;
}

function isExecutor(value: unknown): value is ToolExecutor {
  return typeof value === 'object' && value !== null && typeof (value as ToolExecutor).execute === 'function';
}
function isEncoder(value: unknown): value is ToolResultEncoder {
  return typeof value === 'object' && value !== null && typeof (value as ToolResultEncoder).encode === 'function';
}

/** An option that passes `ok`; the issue's message is what it should have been. */
function option<T>(ok: (v: unknown) => boolean, expected: string) {
  return z.custom<T>(ok, { message: expected });
}

const EXECUTOR = 'an object with an execute() method';
const ENCODER = 'an object with an encode() method';

/** The options, checked in this order; the defaults that do not depend on the batch. */
const SettingsSchema = z
  .object({
    engine: z.unknown().optional(),
    context: z.unknown().optional(),
    toolExecutor: option<ToolExecutor>(isExecutor, EXECUTOR).optional(),
    toolResultEncoder: option<ToolResultEncoder>(isEncoder, ENCODER).optional(),
    sessionId: option<string>((v) => typeof v === 'string', 'a string').optional(),
    requestId: option<string>((v) => typeof v === 'string', 'a string').optional(),
    onToolError: option<OnToolError>((v) => v === 'continue' || v === 'halt' || typeof v === 'function', "'continue', 'halt' or a function (call, error)").default('continue'),
    toolTimeoutMs: option<number>((v) => typeof v === 'number' && v > 0, 'a positive number or Infinity').default(DEFAULT_TOOL_TIMEOUT_MS),
    timeoutMode: option<TimeoutMode>((v) => TIMEOUT_MODES.includes(v as TimeoutMode), TIMEOUT_MODES.map((m) => `'${m}'`).join(', ')).default('cooperative'),
    timeoutGraceMs: option<number>((v) => typeof v === 'number' && v >= 0, 'a non-negative number').default(DEFAULT_TIMEOUT_GRACE_MS),
    maxConcurrency: option<number>(
      (v) => typeof v === 'number' && v >= 1 && (Number.isInteger(v) || v === Infinity),
      'a positive integer or Infinity',
    ).optional(),
    unknownTool: option<'error' | 'preflight'>((v) => v === 'error' || v === 'preflight', "'error' or 'preflight'").default('error'),
    signal: option<AbortSignal>((v) => v instanceof AbortSignal, 'an AbortSignal').optional(),
  })
  .strict();

const OPTION_KEYS = Object.keys(SettingsSchema.shape);

/** @throws LlamuxError INVALID_ARGUMENT naming the first bad option (unknown keys first). */
export function readSettings(options: RunToolCallsOptions, callCount: number): Settings {
  if (typeof options !== 'object' || options === null) throw expectedArgument('the options', 'an object', options);
  const r = SettingsSchema.safeParse(options);
  if (!r.success) {
    const issues = r.error.issues;
    const unknown = issues.find((i) => i.code === 'unrecognized_keys');
    if (unknown) throw invalidArgument(`Unknown option ${JSON.stringify(unknown.keys[0])}; expected one of ${OPTION_KEYS.join(', ')}`);
    const key = String(issues[0]!.path[0]);
    throw expectedArgument(`the "${key}" option`, issues[0]!.message, (options as Record<string, unknown>)[key]);
  }
  const o = r.data;
  if (typeof o.onToolError === 'function' && o.onToolError.length !== 2) {
    throw invalidArgument(`Expected the "onToolError" function to take (call, error) but received a function that declares ${o.onToolError.length} parameters`);
  }
  // The engine's fallbacks, checked like the options themselves.
  const engine = o.engine;
  const fromEngine = (key: string): unknown => (typeof engine === 'object' && engine !== null ? (engine as Record<string, unknown>)[key] : undefined);
  const executor = o.toolExecutor ?? fromEngine('toolExecutor') ?? defaultExecutor;
  const encoder = o.toolResultEncoder ?? fromEngine('toolResultEncoder') ?? jsonEncoder;
  if (!isExecutor(executor)) throw expectedArgument('the "toolExecutor" option', EXECUTOR, executor);
  if (!isEncoder(encoder)) throw expectedArgument('the "toolResultEncoder" option', ENCODER, encoder);
  return {
    engine,
    context: o.context !== undefined ? o.context : fromEngine('context'),
    sessionId: o.sessionId,
    requestId: o.requestId,
    executor,
    encoder,
    onToolError: o.onToolError,
    toolTimeoutMs: o.toolTimeoutMs,
    timeoutMode: o.timeoutMode,
    timeoutGraceMs: o.timeoutGraceMs,
    maxConcurrency: o.maxConcurrency ?? Math.max(1, Math.min(callCount, availableParallelism() * 2)),
    unknownTool: o.unknownTool,
    signal: o.signal,
  };
}

export function effectiveMode(tool: AnyTool, settings: Settings): TimeoutMode {
  return tool.isolate !== undefined ? 'isolate' : (tool.timeoutMode ?? settings.timeoutMode);
}

export function prepareBatch(calls: readonly ToolCall[], tools: readonly AnyTool[], options: RunToolCallsOptions): Batch {
  if (!Array.isArray(calls)) throw expectedArgument('the tool calls', 'an array', calls);
  if (!Array.isArray(tools)) throw expectedArgument('the tools', 'an array', tools);
  const settings = readSettings(options, calls.length);

  const toolMap = new Map<string, AnyTool>();
  tools.forEach((t, i) => {
    const tool = assertTool(t, `tools[${i}]`);
    if (toolMap.has(tool.name)) throw invalidArgument(`Expected the tools to have distinct names but received two named ${JSON.stringify(tool.name)}`);
    toolMap.set(tool.name, tool);
  });

  const ids = new Set<string>();
  const unknownNames: string[] = [];
  const unknownIds: string[] = [];
  const isolated = new Set<AnyTool>();
  calls.forEach((call, i) => {
    if (typeof call !== 'object' || call === null) {
      throw expectedArgument(`tool call ${i}`, 'an object', call);
    }
    if (typeof call.id !== 'string' || call.id === '') {
      throw expectedArgument(`the id of tool call ${i}`, 'a non-empty string', call.id);
    }
    if (typeof call.name !== 'string') {
      throw expectedArgument(`the name of tool call ${JSON.stringify(call.id)}`, 'a string', call.name);
    }
    if (ids.has(call.id)) throw invalidArgument(`Expected the tool calls to have distinct ids but received two with the id ${JSON.stringify(call.id)}`);
    ids.add(call.id);
    const tool = toolMap.get(call.name);
    if (tool === undefined) {
      if (!unknownNames.includes(call.name)) unknownNames.push(call.name);
      unknownIds.push(call.id);
    } else if (effectiveMode(tool, settings) === 'isolate') {
      isolated.add(tool);
    }
  });
  for (const tool of isolated) isolateTarget(tool); // INVALID_ARGUMENT for a handler function without an isolate module

  const unknown =
    settings.unknownTool === 'preflight' && unknownNames.length > 0 ? new UnknownToolError(unknownNames, unknownIds) : undefined;
  return { calls, tools: toolMap, settings, unknown };
}
