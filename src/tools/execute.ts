// Running a prepared batch of tool calls: deadlines, cancellation, onToolError routing, the
// concurrency pump, and exactly one outcome per call.
import { encodeFailure, encodeSuccess } from './encoder.js';
import { ToolError, describeValue, isToolError, toError } from './errors.js';
import { handlerRaised } from './executor.js';
import { isolateExecutor } from './isolate.js';
import { TOOL_RESULT_TAG, interpretHandlerReturn, toolError, type ToolResult } from './results.js';
import { effectiveMode, type Batch } from './runner-settings.js';
import type { EventBase, HaltMetadata, RunToolCallsResult, ToolCallOutcome, ToolCallStatus, ToolErrorHaltMetadata, ToolEvent, ToolMessage } from './runner-types.js';
import { parseCallArguments, validateToolArguments, type AnyTool, type ToolCall, type ToolContext } from './tool.js';


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
export function executeBatch(batch: Batch, emit: (event: ToolEvent) => void, signal: AbortSignal | undefined): Promise<RunToolCallsResult> {
  return new BatchRun(batch, emit, signal).run();
}

/** One batch in flight: its outcomes, the first halt, and the concurrency pump. */
class BatchRun {
  readonly #calls: readonly ToolCall[];
  readonly #tools: Batch['tools'];
  readonly #settings: Batch['settings'];
  readonly #emit: (event: ToolEvent) => void;
  readonly #signal: AbortSignal | undefined;
  readonly #outcomes: (ToolCallOutcome | undefined)[];
  #halt: HaltMetadata | undefined;
  #internalFailure: unknown;
  /** Cancellations this runner made; a handler-reported ToolError('cancelled') still goes to onToolError. */
  readonly #cancellations = new WeakSet<ToolError>();

  // A call takes a slot when it starts and gives it back once both its outcome is settled and its
  // handler has stopped (settled, or its worker exited). A handler that outlives its timeout (it
  // ignores ctx.signal, or the mode is 'abandon') therefore keeps its slot: maxConcurrency bounds
  // the handlers really running, not just the calls still waiting for an outcome.
  readonly #queue: number[]; // -1 marks a taken entry
  #head = 0;
  #running = 0; // slots taken
  #unsettled = 0; // started calls without an outcome yet
  readonly #busyKeys = new Set<string>();
  #done = false;
  #resolveAll: () => void = () => undefined;

  constructor(batch: Batch, emit: (event: ToolEvent) => void, signal: AbortSignal | undefined) {
    this.#calls = batch.calls;
    this.#tools = batch.tools;
    this.#settings = batch.settings;
    this.#emit = emit;
    this.#signal = signal;
    const n = batch.calls.length;
    this.#outcomes = new Array<ToolCallOutcome | undefined>(n).fill(undefined);
    this.#queue = Array.from({ length: n }, (_, i) => i);
  }

  async run(): Promise<RunToolCallsResult> {
    const allSettled = new Promise<void>((resolve) => {
      this.#resolveAll = resolve;
    });
    const onBatchAbort = (): void => {
      this.#observeHalt({ haltedReason: 'cancelled', reason: this.#signal?.reason });
      this.#cancelQueued(); // running calls are interrupted by their own listener in #invoke()
      this.#checkDone();
    };
    const signal = this.#signal;
    if (signal?.aborted) onBatchAbort();
    else signal?.addEventListener('abort', onBatchAbort, { once: true });
    this.#pump();
    await allSettled;
    signal?.removeEventListener('abort', onBatchAbort);

    if (this.#internalFailure !== undefined) throw this.#internalFailure;
    // Invariant: every call id has exactly one result before control returns.
    const finished: ToolCallOutcome[] = [];
    for (let i = 0; i < this.#calls.length; i++) {
      const outcome = this.#outcomes[i];
      if (outcome === undefined) throw new Error(`internal error: tool call ${JSON.stringify(this.#calls[i]!.id)} finished without a result`);
      finished.push(outcome);
    }
    const messages = finished.flatMap((o) => (o.kind === 'message' ? [o.message] : []));
    return this.#halt === undefined ? { messages, outcomes: finished } : { messages, outcomes: finished, halt: this.#halt };
  }

  // -- outcomes --------------------------------------------------------------------------------

  #observeHalt(h: HaltMetadata): void {
    if (this.#halt === undefined) this.#halt = h; // the first halt observed in time wins
  }

  #base(i: number): EventBase {
    return { index: i, toolCallId: this.#calls[i]!.id, toolName: this.#calls[i]!.name };
  }

  #settle(i: number, outcome: ToolCallOutcome, event: ToolEvent): void {
    if (this.#outcomes[i] !== undefined) throw new Error(`internal error: tool call ${JSON.stringify(this.#calls[i]!.id)} got a second result`);
    this.#outcomes[i] = outcome;
    this.#emit(event);
  }

  #settleMessage(
    i: number,
    status: ToolCallStatus,
    content: string,
    isError: boolean,
    failure: { error: unknown } | undefined,
    haltMeta?: ToolErrorHaltMetadata,
  ): void {
    const call = this.#calls[i]!;
    const message: ToolMessage = { role: 'tool', toolCallId: call.id, name: call.name, content, isError };
    this.#settle(
      i,
      { kind: 'message', index: i, call, status, message, ...(failure === undefined ? {} : { error: failure.error }) },
      { type: 'tool_result_encoded', ...this.#base(i), content, isError, status, message, ...(haltMeta === undefined ? {} : { halt: haltMeta }) },
    );
  }

  #cancelledError(call: ToolCall): ToolError {
    const error = new ToolError('cancelled', `tool call ${JSON.stringify(call.id)} was cancelled`, {
      toolCallId: call.id,
      toolName: call.name,
      ...(this.#signal?.aborted ? { cause: this.#signal.reason } : {}),
    });
    this.#cancellations.add(error);
    return error;
  }

  #settleCancelled(i: number, error: ToolError): void {
    this.#settleMessage(i, 'cancelled', encodeFailure(this.#settings.encoder, error, this.#calls[i]!), true, { error });
  }

  // -- one call --------------------------------------------------------------------------------

  /**
   * Runs one handler and resolves with its result, or with `timeout`/`cancelled` when it is
   * interrupted. `occupy` receives the handler's own promise: the call's concurrency slot (and
   * `concurrencyKey`) stays taken until that settles, even when the result was reported earlier.
   */
  async #invoke(tool: AnyTool, call: ToolCall, args: unknown, occupy: (handler: Promise<unknown>) => void): Promise<ToolResult> {
    const signal = this.#signal;
    const settings = this.#settings;
    if (signal?.aborted) return toolError(this.#cancelledError(call));
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
        : this.#cancelledError(call);
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
  }

  async #routeError(i: number, error: unknown): Promise<void> {
    const call = this.#calls[i]!;
    const content = (): string => encodeFailure(this.#settings.encoder, error, call);
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
      this.#observeHalt(meta);
      this.#settleMessage(i, 'error', content(), true, { error }, meta);
    };

    const policy = this.#settings.onToolError;
    if (policy === 'continue') {
      this.#settleMessage(i, 'error', content(), true, { error });
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
      const encoded = encodeSuccess(this.#settings.encoder, decision.continue, call);
      if (encoded.ok) {
        this.#settleMessage(i, 'error', encoded.content, decision.isError ?? true, { error });
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
  }

  async #route(i: number, result: ToolResult): Promise<void> {
    const call = this.#calls[i]!;
    switch (result[TOOL_RESULT_TAG]) {
      case 'ok': {
        const encoded = encodeSuccess(this.#settings.encoder, result.value, call);
        if (encoded.ok) this.#settleMessage(i, 'success', encoded.content, false, undefined);
        else await this.#routeError(i, encoded.error);
        return;
      }
      case 'error':
        if (isToolError(result.error, 'cancelled') && this.#cancellations.has(result.error)) this.#settleCancelled(i, result.error);
        else await this.#routeError(i, result.error);
        return;
      case 'ask_user': {
        const options = result.options === undefined ? {} : { options: result.options };
        this.#observeHalt({ haltedReason: 'ask_user', toolCallId: call.id, toolName: call.name, question: result.question, ...options });
        this.#settle(
          i,
          { kind: 'ask_user', index: i, call, question: result.question, ...options },
          { type: 'ask_user_requested', ...this.#base(i), question: result.question, ...options },
        );
        return;
      }
      case 'halt':
        this.#observeHalt({ haltedReason: 'tool_halt', toolCallId: call.id, toolName: call.name, reason: result.reason, result: result.result });
        this.#settle(
          i,
          { kind: 'halt', index: i, call, reason: result.reason, result: result.result },
          { type: 'tool_halt', ...this.#base(i), reason: result.reason, result: result.result },
        );
        return;
    }
  }

  async #runCall(i: number, occupy: (handler: Promise<unknown>) => void): Promise<void> {
    const call = this.#calls[i]!;
    this.#emit({ type: 'tool_execution_started', ...this.#base(i), arguments: call.arguments });
    const tool = this.#tools.get(call.name);
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
      result = checked.ok ? await this.#invoke(tool, call, checked.value, occupy) : toolError(checked.error);
    }
    this.#emit({ type: 'tool_execution_completed', ...this.#base(i), result });
    await this.#route(i, result);
  }

  // -- scheduling ------------------------------------------------------------------------------

  #keyOf(i: number): string | undefined {
    return this.#tools.get(this.#calls[i]!.name)?.concurrencyKey;
  }

  #checkDone(): void {
    if (!this.#done && this.#unsettled === 0 && this.#head >= this.#queue.length) {
      this.#done = true;
      this.#resolveAll();
    }
  }

  #cancelQueued(): void {
    for (let j = this.#head; j < this.#queue.length; j++) {
      const i = this.#queue[j]!;
      if (i < 0) continue;
      this.#queue[j] = -1;
      try {
        this.#settleCancelled(i, this.#cancelledError(this.#calls[i]!));
      } catch (err) {
        this.#internalFailure ??= err;
      }
    }
    this.#head = this.#queue.length;
  }

  #pump(): void {
    while (this.#running < this.#settings.maxConcurrency && !this.#signal?.aborted) {
      let found = -1;
      for (let j = this.#head; j < this.#queue.length; j++) {
        const i = this.#queue[j]!;
        if (i < 0) {
          if (j === this.#head) this.#head++;
          continue;
        }
        const key = this.#keyOf(i);
        if (key === undefined || !this.#busyKeys.has(key)) {
          found = j;
          break;
        }
      }
      if (found < 0) break;
      const i = this.#queue[found]!;
      this.#queue[found] = -1;
      if (found === this.#head) this.#head++;
      const key = this.#keyOf(i);
      if (key !== undefined) this.#busyKeys.add(key);
      this.#running++;
      this.#unsettled++;
      const handlers: Promise<unknown>[] = [];
      this.#runCall(i, (handler) => handlers.push(handler))
        .catch((err: unknown) => {
          this.#internalFailure ??= err;
        })
        .then(() => {
          this.#unsettled--;
          this.#checkDone();
          return Promise.allSettled(handlers);
        })
        .finally(() => {
          this.#running--;
          if (key !== undefined) this.#busyKeys.delete(key);
          this.#pump();
        });
    }
    while (this.#head < this.#queue.length && this.#queue[this.#head]! < 0) this.#head++;
    this.#checkDone();
  }
}
