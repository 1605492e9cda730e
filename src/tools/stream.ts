// streamToolCalls' event stream: executeBatch's events through an AsyncQueue, and an early
// close that cancels the calls still running and waits for them.
import { AsyncQueue } from '../engine/async-queue.js';
import { executeBatch } from './execute.js';
import type { Batch } from './runner-settings.js';
import type { ToolEvent } from './runner-types.js';

export async function* streamBatch(batch: Batch): AsyncGenerator<ToolEvent, void, undefined> {
  if (batch.unknown !== undefined) {
    yield { type: 'error', error: batch.unknown };
    return;
  }
  if (batch.calls.length === 0) return;
  const closer = new AbortController();
  const outer = batch.settings.signal;
  const signal = outer === undefined ? closer.signal : AbortSignal.any([outer, closer.signal]);
  const queue = new AsyncQueue<ToolEvent>();
  let finished = false;
  const running = executeBatch(batch, (event) => queue.push(event), signal).then(
    () => {
      finished = true;
      queue.end();
    },
    (error: unknown) => {
      finished = true;
      queue.end(error ?? new Error('the tool batch failed'));
    },
  );
  try {
    for await (const event of queue) yield event;
  } finally {
    if (!finished) {
      closer.abort(new Error('the tool event stream was closed early'));
      await running;
    }
  }
}
