import { expect } from 'vitest';
import { LlamuxError } from '../../src/errors.js';
import type { ToolCall, ToolEvent } from '../../src/tools/index.js';

export const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export function call(id: string, name: string, args: unknown = {}): ToolCall {
  return { id, name, arguments: args };
}

export async function collect(events: AsyncIterable<ToolEvent>): Promise<ToolEvent[]> {
  const out: ToolEvent[] = [];
  for await (const event of events) out.push(event);
  return out;
}

/** Tracks how many handlers run at once. */
export function concurrencyProbe(): { enter(): void; leave(): void; readonly max: number; readonly now: number } {
  let now = 0;
  let max = 0;
  return {
    enter() {
      now++;
      max = Math.max(max, now);
    },
    leave() {
      now--;
    },
    get max() {
      return max;
    },
    get now() {
      return now;
    },
  };
}

/** What `fn` throws (fails when it returns). */
export function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected the function to throw');
}

/** What `promise` rejects with (fails when it resolves). */
export async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

/** Asserts a `LlamuxError('INVALID_ARGUMENT')`, with the exact message or one matching a pattern. */
export function expectInvalidArgument(error: unknown, message?: string | RegExp): void {
  expect(error).toBeInstanceOf(LlamuxError);
  expect((error as LlamuxError).code).toBe('INVALID_ARGUMENT');
  expect((error as LlamuxError).name).toBe('LlamuxError');
  if (typeof message === 'string') expect((error as LlamuxError).message).toBe(message);
  else if (message !== undefined) expect((error as LlamuxError).message).toMatch(message);
}
