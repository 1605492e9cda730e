/**
 * The tool runner: `runToolCalls` (tool-role messages in input order) and `streamToolCalls`
 * (events in completion order). Both drive the same `executeBatch`.
 */
import { availableParallelism } from 'node:os';
import { encodeFailure, encodeSuccess, jsonEncoder, type ToolResultEncoder } from './encoder.js';
import { ToolError, UnknownToolError, describeValue, expectedArgument, invalidArgument, isToolError, toError } from './errors.js';
import { defaultExecutor, handlerRaised, type ToolExecutor } from './executor.js';
import { isolateExecutor, isolateTarget } from './isolate.js';
import { TOOL_RESULT_TAG, interpretHandlerReturn, toolError, type ToolResult } from './results.js';
import {
  TIMEOUT_MODES,
  assertTool,
  parseCallArguments,
  validateToolArguments,
  type AnyTool,
  type TimeoutMode,
  type ToolCall,
  type ToolContext,
} from './tool.js';

// ---------------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------------

/** What an `onToolError` function decides: replace the content and go on, or halt the batch. */
export type OnToolErrorDecision = { readonly continue: unknown; readonly isError?: boolean } | 'halt';
/** Called once per failed call with the call and the error (a `ToolError`, or what the handler reported). */
export type OnToolErrorFunction = (call: ToolCall, error: unknown) => OnToolErrorDecision | Promise<OnToolErrorDecision>;
export type OnToolError = 'continue' | 'halt' | OnToolErrorFunction;

export interface RunToolCallsOptions<TEngine = unknown, TContext = unknown> {
  /** Passed to handlers as `ctx.engine`; its `toolExecutor`, `toolResultEncoder` and `context` are fallbacks. */
  readonly engine?: TEngine;
  /** `ctx.context` of every handler. Default: `engine.context`, else `undefined`. */
  readonly context?: TContext;
  readonly sessionId?: string;
  readonly requestId?: string;
  /** Default: `engine.toolExecutor`, else `defaultExecutor`. Not used for isolated calls. */
  readonly toolExecutor?: ToolExecutor;
  /** Default: `engine.toolResultEncoder`, else `jsonEncoder`. */
  readonly toolResultEncoder?: ToolResultEncoder;
  /** Default `'continue'`. */
  readonly onToolError?: OnToolError;
  /** Per-call deadline in ms (a tool's `timeoutMs` wins). Default 30 000; `Infinity` disables it. */
  readonly toolTimeoutMs?: number;
  /** Default `'cooperative'` (a tool's `timeoutMode` wins). */
  readonly timeoutMode?: TimeoutMode;
  /** How long `cooperative` and `isolate` wait for an interrupted handler to settle. Default 1 000 ms. */
  readonly timeoutGraceMs?: number;
  /** Default `max(1, min(calls.length, availableParallelism() * 2))`. */
  readonly maxConcurrency?: number;
  /** `'error'` (default): that call gets an error result, the rest run. `'preflight'`: nothing runs. */
  readonly unknownTool?: 'error' | 'preflight';
  /** Cancels the batch: running handlers are interrupted and, like queued calls, reported as cancelled. */
  readonly signal?: AbortSignal;
}

/** A tool-role message. `isError` is true for failures and cancellations. */
export interface ToolMessage {
  readonly role: 'tool';
  readonly toolCallId: string;
  readonly name: string;
  readonly content: string;
  readonly isError: boolean;
}

export type ToolCallStatus = 'success' | 'error' | 'cancelled';

/** How one call ended. Exactly one per call. */
export type ToolCallOutcome =
  | {
      readonly kind: 'message';
      readonly index: number;
      readonly call: ToolCall;
      readonly status: ToolCallStatus;
      readonly message: ToolMessage;
      /** The failure, for `error` and `cancelled`. */
      readonly error?: unknown;
    }
  | {
      readonly kind: 'ask_user';
      readonly index: number;
      readonly call: ToolCall;
      readonly question: string;
      readonly options?: Readonly<Record<string, unknown>>;
    }
  | { readonly kind: 'halt'; readonly index: number; readonly call: ToolCall; readonly reason: string; readonly result: unknown };

export interface ToolErrorHaltMetadata {
  readonly haltedReason: 'tool_error';
  readonly toolCallId: string;
  readonly toolName: string;
  /** The error that halted the batch (an `invalid_return` ToolError when the `onToolError` function misbehaved). */
  readonly error: unknown;
  /** What the `onToolError` function threw, when it threw. */
  readonly onToolErrorException?: unknown;
  /** The reserved reason a handler tried to halt with, when that is what failed. */
  readonly reservedHaltReason?: string;
}

/** Why a batch halted. Only the first halt observed (in time) is reported. */
export type HaltMetadata =
  | {
      readonly haltedReason: 'ask_user';
      readonly toolCallId: string;
      readonly toolName: string;
      readonly question: string;
      readonly options?: Readonly<Record<string, unknown>>;
    }
  | { readonly haltedReason: 'tool_halt'; readonly toolCallId: string; readonly toolName: string; readonly reason: string; readonly result: unknown }
  | ToolErrorHaltMetadata
  | { readonly haltedReason: 'cancelled'; readonly reason: unknown };

export interface RunToolCallsResult {
  /** One message per call that ended with content (not ask-user, not halt), in input order. */
  readonly messages: ToolMessage[];
  /** One outcome per call, in input order. */
  readonly outcomes: ToolCallOutcome[];
  /** Present when the batch halted. */
  readonly halt?: HaltMetadata;
}

interface EventBase {
  /** The call's position in the input. */
  readonly index: number;
  readonly toolCallId: string;
  readonly toolName: string;
}
export interface ToolExecutionStartedEvent extends EventBase {
  readonly type: 'tool_execution_started';
  readonly arguments: unknown;
}
export interface ToolExecutionCompletedEvent extends EventBase {
  readonly type: 'tool_execution_completed';
  readonly result: ToolResult;
}
export interface ToolResultEncodedEvent extends EventBase {
  readonly type: 'tool_result_encoded';
  readonly content: string;
  readonly isError: boolean;
  readonly status: ToolCallStatus;
  readonly message: ToolMessage;
  /** Present when this call's failure halted the batch (`onToolError` decided to halt). */
  readonly halt?: ToolErrorHaltMetadata;
}
export interface AskUserRequestedEvent extends EventBase {
  readonly type: 'ask_user_requested';
  readonly question: string;
  readonly options?: Readonly<Record<string, unknown>>;
}
export interface ToolHaltEvent extends EventBase {
  readonly type: 'tool_halt';
  readonly reason: string;
  readonly result: unknown;
}
/** The only event of a stream refused by the `'preflight'` unknown-tool check. */
export interface ToolBatchErrorEvent {
  readonly type: 'error';
  readonly error: UnknownToolError;
}
export type ToolEvent =
  | ToolExecutionStartedEvent
  | ToolExecutionCompletedEvent
  | ToolResultEncodedEvent
  | AskUserRequestedEvent
  | ToolHaltEvent
  | ToolBatchErrorEvent;

/** Default per-call deadline. */
export const DEFAULT_TOOL_TIMEOUT_MS = 30_000;
/** Default wait for an interrupted `cooperative` or `isolate` call to settle. */
export const DEFAULT_TIMEOUT_GRACE_MS = 1_000;

// ---------------------------------------------------------------------------------------------
// Entry validation
// ---------------------------------------------------------------------------------------------

interface Settings {
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

interface Batch {
  readonly calls: readonly ToolCall[];
  readonly tools: ReadonlyMap<string, AnyTool>;
  readonly settings: Settings;
  readonly unknown: UnknownToolError | undefined;
}

const OPTION_KEYS = new Set([
  'engine',
  'context',
  'sessionId',
  'requestId',
  'toolExecutor',
  'toolResultEncoder',
  'onToolError',
  'toolTimeoutMs',
  'timeoutMode',
  'timeoutGraceMs',
  'maxConcurrency',
  'unknownTool',
  'signal',
]);

function expected(option: string, what: string, value: unknown): Error {
  return expectedArgument(`the "${option}" option`, what, value);
}

function isExecutor(value: unknown): value is ToolExecutor {
  return typeof value === 'object' && value !== null && typeof (value as ToolExecutor).execute === 'function';
}
function isEncoder(value: unknown): value is ToolResultEncoder {
  return typeof value === 'object' && value !== null && typeof (value as ToolResultEncoder).encode === 'function';
}

function readSettings(options: RunToolCallsOptions, callCount: number): Settings {
  // 1. shape
  if (typeof options !== 'object' || options === null) {
    throw expectedArgument('the options', 'an object', options);
  }
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.has(key)) throw invalidArgument(`Unknown option ${JSON.stringify(key)}; expected one of ${[...OPTION_KEYS].join(', ')}`);
  }
  const o = options as Record<string, unknown>;
  // 2. engine fallbacks
  const engine = o.engine;
  const fromEngine = (key: string): unknown =>
    typeof engine === 'object' && engine !== null ? (engine as Record<string, unknown>)[key] : undefined;
  const executor = o.toolExecutor ?? fromEngine('toolExecutor') ?? defaultExecutor;
  const encoder = o.toolResultEncoder ?? fromEngine('toolResultEncoder') ?? jsonEncoder;
  const context = 'context' in o && o.context !== undefined ? o.context : fromEngine('context');
  // 3. each option
  if (!isExecutor(executor)) throw expected('toolExecutor', 'an object with an execute() method', executor);
  if (!isEncoder(encoder)) throw expected('toolResultEncoder', 'an object with an encode() method', encoder);
  for (const key of ['sessionId', 'requestId'] as const) {
    if (o[key] !== undefined && typeof o[key] !== 'string') throw expected(key, 'a string', o[key]);
  }
  const onToolError = o.onToolError ?? 'continue';
  if (typeof onToolError === 'function') {
    if (onToolError.length !== 2) {
      throw invalidArgument(
        `Expected the "onToolError" function to take (call, error) but received a function that declares ${onToolError.length} parameters`,
      );
    }
  } else if (onToolError !== 'continue' && onToolError !== 'halt') {
    throw expected('onToolError', "'continue', 'halt' or a function (call, error)", onToolError);
  }
  const toolTimeoutMs = o.toolTimeoutMs ?? DEFAULT_TOOL_TIMEOUT_MS;
  if (typeof toolTimeoutMs !== 'number' || !(toolTimeoutMs > 0)) {
    throw expected('toolTimeoutMs', 'a positive number or Infinity', toolTimeoutMs);
  }
  const timeoutMode = o.timeoutMode ?? 'cooperative';
  if (!TIMEOUT_MODES.includes(timeoutMode as TimeoutMode)) {
    throw expected('timeoutMode', TIMEOUT_MODES.map((m) => `'${m}'`).join(', '), timeoutMode);
  }
  const timeoutGraceMs = o.timeoutGraceMs ?? DEFAULT_TIMEOUT_GRACE_MS;
  if (typeof timeoutGraceMs !== 'number' || !(timeoutGraceMs >= 0)) {
    throw expected('timeoutGraceMs', 'a non-negative number', timeoutGraceMs);
  }
  const maxConcurrency = o.maxConcurrency ?? Math.max(1, Math.min(callCount, availableParallelism() * 2));
  if (typeof maxConcurrency !== 'number' || !(maxConcurrency >= 1) || !(Number.isInteger(maxConcurrency) || maxConcurrency === Infinity)) {
    throw expected('maxConcurrency', 'a positive integer or Infinity', maxConcurrency);
  }
  const unknownTool = o.unknownTool ?? 'error';
  if (unknownTool !== 'error' && unknownTool !== 'preflight') {
    throw expected('unknownTool', "'error' or 'preflight'", unknownTool);
  }
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) {
    throw expected('signal', 'an AbortSignal', o.signal);
  }
  return {
    engine,
    context,
    sessionId: o.sessionId as string | undefined,
    requestId: o.requestId as string | undefined,
    executor,
    encoder,
    onToolError: onToolError as OnToolError,
    toolTimeoutMs,
    timeoutMode: timeoutMode as TimeoutMode,
    timeoutGraceMs,
    maxConcurrency,
    unknownTool,
    signal: o.signal as AbortSignal | undefined,
  };
}

function effectiveMode(tool: AnyTool, settings: Settings): TimeoutMode {
  return tool.isolate !== undefined ? 'isolate' : (tool.timeoutMode ?? settings.timeoutMode);
}

function prepareBatch(calls: readonly ToolCall[], tools: readonly AnyTool[], options: RunToolCallsOptions): Batch {
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

// ---------------------------------------------------------------------------------------------
// Execution
// ---------------------------------------------------------------------------------------------

/** Node clamps delays above 2^31-1 ms to 1 ms; such deadlines are treated as none. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function isContinueDecision(value: unknown): value is { continue: unknown; isError?: boolean } {
  if (typeof value !== 'object' || value === null || !Object.hasOwn(value, 'continue')) return false;
  const isError = (value as { isError?: unknown }).isError;
  return isError === undefined || typeof isError === 'boolean';
}

function reservedReasonOf(error: unknown): string | undefined {
  if (!isToolError(error)) return undefined;
  const r = error.metadata.reservedHaltReason;
  return typeof r === 'string' ? r : undefined;
}

/**
 * Runs a prepared, non-empty batch. `emit` sees every event as it happens. Resolves once every
 * call has exactly one outcome.
 */
async function executeBatch(batch: Batch, emit: (event: ToolEvent) => void, signal: AbortSignal | undefined): Promise<RunToolCallsResult> {
  const { calls, tools, settings } = batch;
  const n = calls.length;
  const outcomes: (ToolCallOutcome | undefined)[] = new Array<ToolCallOutcome | undefined>(n).fill(undefined);
  let halt: HaltMetadata | undefined;
  let internalFailure: unknown;
  const observeHalt = (h: HaltMetadata): void => {
    if (halt === undefined) halt = h; // the first halt observed in time wins
  };

  const base = (i: number): EventBase => ({ index: i, toolCallId: calls[i]!.id, toolName: calls[i]!.name });

  const settle = (i: number, outcome: ToolCallOutcome, event: ToolEvent): void => {
    if (outcomes[i] !== undefined) throw new Error(`internal error: tool call ${JSON.stringify(calls[i]!.id)} got a second result`);
    outcomes[i] = outcome;
    emit(event);
  };

  const settleMessage = (
    i: number,
    status: ToolCallStatus,
    content: string,
    isError: boolean,
    failure: { error: unknown } | undefined,
    haltMeta?: ToolErrorHaltMetadata,
  ): void => {
    const call = calls[i]!;
    const message: ToolMessage = { role: 'tool', toolCallId: call.id, name: call.name, content, isError };
    settle(
      i,
      { kind: 'message', index: i, call, status, message, ...(failure === undefined ? {} : { error: failure.error }) },
      { type: 'tool_result_encoded', ...base(i), content, isError, status, message, ...(haltMeta === undefined ? {} : { halt: haltMeta }) },
    );
  };

  // Cancellations this runner made; a handler-reported ToolError('cancelled') still goes to onToolError.
  const cancellations = new WeakSet<ToolError>();
  const cancelledError = (call: ToolCall): ToolError => {
    const error = new ToolError('cancelled', `tool call ${JSON.stringify(call.id)} was cancelled`, {
      toolCallId: call.id,
      toolName: call.name,
      ...(signal?.aborted ? { cause: signal.reason } : {}),
    });
    cancellations.add(error);
    return error;
  };

  const settleCancelled = (i: number, error: ToolError): void => {
    settleMessage(i, 'cancelled', encodeFailure(settings.encoder, error, calls[i]!), true, { error });
  };

  // -- one call ------------------------------------------------------------------------------

  /**
   * Runs one handler and resolves with its result, or with `timeout`/`cancelled` when it is
   * interrupted. `occupy` receives the handler's own promise: the call's concurrency slot (and
   * `concurrencyKey`) stays taken until that settles, even when the result was reported earlier.
   */
  const invoke = async (tool: AnyTool, call: ToolCall, args: unknown, occupy: (handler: Promise<unknown>) => void): Promise<ToolResult> => {
    if (signal?.aborted) return toolError(cancelledError(call));
    const mode = effectiveMode(tool, settings);
    const timeoutMs = tool.timeoutMs ?? settings.toolTimeoutMs;
    const controller = new AbortController();
    const ctx: ToolContext = Object.freeze({
      context: settings.context,
      sessionId: settings.sessionId,
      requestId: settings.requestId,
      call,
      signal: controller.signal,
      engine: settings.engine,
    });
    const executor = mode === 'isolate' ? isolateExecutor : settings.executor;
    const where = { toolCallId: call.id, toolName: tool.name };
    const work: Promise<ToolResult> = (async () => {
      try {
        return interpretHandlerReturn(await executor.execute(tool, args, ctx), where);
      } catch (err) {
        return handlerRaised(tool, ctx, err);
      }
    })();
    occupy(work);

    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    const interrupted = new Promise<'timeout' | 'cancelled'>((resolve) => {
      if (timeoutMs <= MAX_TIMER_MS) timer = setTimeout(() => resolve('timeout'), timeoutMs);
      if (signal !== undefined) {
        onAbort = () => resolve('cancelled');
        signal.addEventListener('abort', onAbort, { once: true });
      }
    });
    const first = await Promise.race([work.then((result) => ({ result })), interrupted.then((why) => ({ why }))]);
    if (timer !== undefined) clearTimeout(timer);
    if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort);
    if ('result' in first) return first.result;

    const error =
      first.why === 'timeout'
        ? new ToolError('timeout', `tool ${JSON.stringify(tool.name)} did not finish within ${timeoutMs} ms`, {
            ...where,
            metadata: { timeoutMs, timeoutMode: mode },
          })
        : cancelledError(call);
    controller.abort(error);
    if (mode !== 'abandon') {
      let graceTimer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => {
        graceTimer = setTimeout(resolve, Math.min(settings.timeoutGraceMs, MAX_TIMER_MS));
      });
      await Promise.race([work, grace]);
      clearTimeout(graceTimer);
    }
    return toolError(error);
  };

  const routeError = async (i: number, error: unknown): Promise<void> => {
    const call = calls[i]!;
    const content = (): string => encodeFailure(settings.encoder, error, call);
    const haltWith = (haltError: unknown, extra: { onToolErrorException?: unknown } = {}): void => {
      const reserved = reservedReasonOf(error);
      const meta: ToolErrorHaltMetadata = {
        haltedReason: 'tool_error',
        toolCallId: call.id,
        toolName: call.name,
        error: haltError,
        ...extra,
        ...(reserved === undefined ? {} : { reservedHaltReason: reserved }),
      };
      observeHalt(meta);
      settleMessage(i, 'error', content(), true, { error }, meta);
    };

    const policy = settings.onToolError;
    if (policy === 'continue') {
      settleMessage(i, 'error', content(), true, { error });
      return;
    }
    if (policy === 'halt') {
      haltWith(error);
      return;
    }
    // Function form: resolve it to a decision once; it is never called again for this call.
    let decision: unknown;
    try {
      decision = await policy(call, error);
    } catch (exception) {
      const invalid = new ToolError('invalid_return', `onToolError threw: ${toError(exception).message}`, {
        toolCallId: call.id,
        toolName: call.name,
        cause: toError(exception),
        metadata: { originalError: error },
      });
      haltWith(invalid, { onToolErrorException: exception });
      return;
    }
    if (decision === 'halt') {
      haltWith(error);
      return;
    }
    if (isContinueDecision(decision)) {
      const encoded = encodeSuccess(settings.encoder, decision.continue, call);
      if (encoded.ok) {
        settleMessage(i, 'error', encoded.content, decision.isError ?? true, { error });
      } else {
        haltWith(encoded.error);
      }
      return;
    }
    haltWith(
      new ToolError('invalid_return', `onToolError returned ${describeValue(decision)}; expected { continue: value } or 'halt'`, {
        toolCallId: call.id,
        toolName: call.name,
        cause: decision,
        metadata: { originalError: error },
      }),
    );
  };

  const route = async (i: number, result: ToolResult): Promise<void> => {
    const call = calls[i]!;
    switch (result[TOOL_RESULT_TAG]) {
      case 'ok': {
        const encoded = encodeSuccess(settings.encoder, result.value, call);
        if (encoded.ok) settleMessage(i, 'success', encoded.content, false, undefined);
        else await routeError(i, encoded.error);
        return;
      }
      case 'error':
        if (isToolError(result.error, 'cancelled') && cancellations.has(result.error)) settleCancelled(i, result.error);
        else await routeError(i, result.error);
        return;
      case 'ask_user': {
        const options = result.options === undefined ? {} : { options: result.options };
        observeHalt({ haltedReason: 'ask_user', toolCallId: call.id, toolName: call.name, question: result.question, ...options });
        settle(
          i,
          { kind: 'ask_user', index: i, call, question: result.question, ...options },
          { type: 'ask_user_requested', ...base(i), question: result.question, ...options },
        );
        return;
      }
      case 'halt':
        observeHalt({ haltedReason: 'tool_halt', toolCallId: call.id, toolName: call.name, reason: result.reason, result: result.result });
        settle(
          i,
          { kind: 'halt', index: i, call, reason: result.reason, result: result.result },
          { type: 'tool_halt', ...base(i), reason: result.reason, result: result.result },
        );
        return;
    }
  };

  const runCall = async (i: number, occupy: (handler: Promise<unknown>) => void): Promise<void> => {
    const call = calls[i]!;
    emit({ type: 'tool_execution_started', ...base(i), arguments: call.arguments });
    const tool = tools.get(call.name);
    let result: ToolResult;
    if (tool === undefined) {
      result = toolError(
        new ToolError('unknown_tool', `there is no tool named ${JSON.stringify(call.name)}`, { toolCallId: call.id, toolName: call.name }),
      );
    } else {
      const parsed = parseCallArguments(call);
      let checked = parsed;
      if (parsed.ok) {
        try {
          checked = await validateToolArguments(tool, call, parsed.value);
        } catch (err) {
          checked = {
            ok: false,
            error: new ToolError('invalid_arguments', `validating the arguments of tool ${JSON.stringify(call.name)} failed: ${toError(err).message}`, {
              toolCallId: call.id,
              toolName: call.name,
              cause: toError(err),
            }),
          };
        }
      }
      result = checked.ok ? await invoke(tool, call, checked.value, occupy) : toolError(checked.error);
    }
    emit({ type: 'tool_execution_completed', ...base(i), result });
    await route(i, result);
  };

  // -- scheduling ----------------------------------------------------------------------------

  // A call takes a slot when it starts and gives it back once both its outcome is settled and its
  // handler has stopped (settled, or its worker exited). A handler that outlives its timeout (it
  // ignores ctx.signal, or the mode is 'abandon') therefore keeps its slot: maxConcurrency bounds
  // the handlers really running, not just the calls still waiting for an outcome.
  const queue: number[] = Array.from({ length: n }, (_, i) => i); // -1 marks a taken entry
  let head = 0;
  let running = 0; // slots taken
  let unsettled = 0; // started calls without an outcome yet
  const busyKeys = new Set<string>();
  const keyOf = (i: number): string | undefined => tools.get(calls[i]!.name)?.concurrencyKey;

  let resolveAll: () => void = () => undefined;
  const allSettled = new Promise<void>((resolve) => {
    resolveAll = resolve;
  });
  let done = false;
  const checkDone = (): void => {
    if (!done && unsettled === 0 && head >= queue.length) {
      done = true;
      resolveAll();
    }
  };
  const cancelQueued = (): void => {
    for (let j = head; j < queue.length; j++) {
      const i = queue[j]!;
      if (i < 0) continue;
      queue[j] = -1;
      try {
        settleCancelled(i, cancelledError(calls[i]!));
      } catch (err) {
        internalFailure ??= err;
      }
    }
    head = queue.length;
  };
  const onBatchAbort = (): void => {
    observeHalt({ haltedReason: 'cancelled', reason: signal?.reason });
    cancelQueued(); // running calls are interrupted by their own listener in invoke()
    checkDone();
  };
  const pump = (): void => {
    while (running < settings.maxConcurrency && !signal?.aborted) {
      let found = -1;
      for (let j = head; j < queue.length; j++) {
        const i = queue[j]!;
        if (i < 0) {
          if (j === head) head++;
          continue;
        }
        const key = keyOf(i);
        if (key === undefined || !busyKeys.has(key)) {
          found = j;
          break;
        }
      }
      if (found < 0) break;
      const i = queue[found]!;
      queue[found] = -1;
      if (found === head) head++;
      const key = keyOf(i);
      if (key !== undefined) busyKeys.add(key);
      running++;
      unsettled++;
      const handlers: Promise<unknown>[] = [];
      runCall(i, (handler) => handlers.push(handler))
        .catch((err: unknown) => {
          internalFailure ??= err;
        })
        .then(() => {
          unsettled--;
          checkDone();
          return Promise.allSettled(handlers);
        })
        .finally(() => {
          running--;
          if (key !== undefined) busyKeys.delete(key);
          pump();
        });
    }
    while (head < queue.length && queue[head]! < 0) head++;
    checkDone();
  };

  if (signal?.aborted) onBatchAbort();
  else signal?.addEventListener('abort', onBatchAbort, { once: true });
  pump();
  await allSettled;
  signal?.removeEventListener('abort', onBatchAbort);

  if (internalFailure !== undefined) throw internalFailure;
  // Invariant: every call id has exactly one result before control returns.
  const finished: ToolCallOutcome[] = [];
  for (let i = 0; i < n; i++) {
    const outcome = outcomes[i];
    if (outcome === undefined) throw new Error(`internal error: tool call ${JSON.stringify(calls[i]!.id)} finished without a result`);
    finished.push(outcome);
  }
  const messages = finished.flatMap((o) => (o.kind === 'message' ? [o.message] : []));
  return halt === undefined ? { messages, outcomes: finished } : { messages, outcomes: finished, halt };
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

/**
 * Runs a batch of tool calls and resolves with one tool-role message per call that ended with
 * content, in input order, plus every call's outcome and the halt metadata when the batch halted.
 *
 * Unknown tool names give that call an `unknown_tool` error (the others run), unless
 * `unknownTool: 'preflight'`, which rejects with `UnknownToolError` before anything runs.
 * An empty batch resolves at once with no messages.
 *
 * @throws {LlamuxError} `INVALID_ARGUMENT` (as a rejection) for malformed calls, tools or options, a
 *   handler of arity other than 1 or 2, an `onToolError` function of arity other than 2, or a call
 *   that would run a handler function in isolate mode.
 * @throws {UnknownToolError} (as a rejection) in `'preflight'` mode.
 * @example
 * ```ts
 * const { messages, halt } = await runToolCalls(
 *   [{ id: 'c0', name: 'echo', arguments: { x: 1 } }],
 *   [defineTool({ name: 'echo', handler: (args) => args })],
 * );
 * // messages: [{ role: 'tool', toolCallId: 'c0', name: 'echo', content: '{"x":1}', isError: false }]
 * ```
 */
export async function runToolCalls(
  calls: readonly ToolCall[],
  tools: readonly AnyTool[],
  options: RunToolCallsOptions = {},
): Promise<RunToolCallsResult> {
  const batch = prepareBatch(calls, tools, options);
  if (batch.unknown !== undefined) throw batch.unknown;
  if (batch.calls.length === 0) return { messages: [], outcomes: [] };
  return executeBatch(batch, () => undefined, batch.settings.signal);
}

/**
 * Runs a batch of tool calls lazily (on first iteration) and yields events: for each call
 * `tool_execution_started`, `tool_execution_completed`, then one of `tool_result_encoded`,
 * `ask_user_requested` or `tool_halt`. Calls interleave in completion order. Calls cancelled before
 * they started yield only their `tool_result_encoded` (status `cancelled`).
 *
 * Leaving the loop early (`break`, `return`, a throw) cancels the calls still running, like
 * `options.signal`, and waits for them before the iterator closes.
 *
 * @throws {LlamuxError} `INVALID_ARGUMENT`, synchronously, on the same entry checks as `runToolCalls`.
 * In `'preflight'` mode an unknown tool makes the stream yield one `{ type: 'error' }` event and end.
 */
export function streamToolCalls(
  calls: readonly ToolCall[],
  tools: readonly AnyTool[],
  options: RunToolCallsOptions = {},
): AsyncIterable<ToolEvent> {
  const batch = prepareBatch(calls, tools, options);
  return {
    [Symbol.asyncIterator]: () => streamBatch(batch),
  };
}

async function* streamBatch(batch: Batch): AsyncGenerator<ToolEvent, void, undefined> {
  if (batch.unknown !== undefined) {
    yield { type: 'error', error: batch.unknown };
    return;
  }
  if (batch.calls.length === 0) return;
  const closer = new AbortController();
  const outer = batch.settings.signal;
  const signal = outer === undefined ? closer.signal : AbortSignal.any([outer, closer.signal]);
  const pending: ToolEvent[] = [];
  let read = 0;
  let wake: (() => void) | undefined;
  let finished = false;
  let failure: { error: unknown } | undefined;
  const running = executeBatch(
    batch,
    (event) => {
      pending.push(event);
      wake?.();
    },
    signal,
  ).then(
    () => {
      finished = true;
      wake?.();
    },
    (error: unknown) => {
      failure = { error };
      finished = true;
      wake?.();
    },
  );
  try {
    for (;;) {
      while (read < pending.length) {
        const event = pending[read]!;
        pending[read++] = undefined as unknown as ToolEvent; // let delivered events be collected
        yield event;
      }
      if (finished) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    }
    if (failure !== undefined) throw failure.error;
  } finally {
    if (!finished) {
      closer.abort(new Error('the tool event stream was closed early'));
      await running;
    }
  }
}
