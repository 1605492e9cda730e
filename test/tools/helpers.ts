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
