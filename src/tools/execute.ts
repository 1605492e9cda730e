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
export async function executeBatch(batch: Batch, emit: (event: ToolEvent) => void, signal: AbortSignal | undefined): Promise<RunToolCallsResult> {
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