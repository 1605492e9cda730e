import { describe, expect, it, vi } from 'vitest';
import { defineTool, runToolCalls, streamToolCalls, type TimeoutMode, type ToolCallOutcome } from '../../src/tools/index.js';
import { call, collect, concurrencyProbe, delay } from './helpers.js';

// Counts the isolate executor's live worker threads: +1 when one is created, -1 when it has exited.
const workers = vi.hoisted(() => ({ live: 0, max: 0, created: 0 }));
vi.mock('node:worker_threads', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:worker_threads')>();
  class CountedWorker extends actual.Worker {
    constructor(...args: ConstructorParameters<typeof actual.Worker>) {
      super(...args);
      workers.created++;
      workers.live++;
      workers.max = Math.max(workers.max, workers.live);
      this.once('exit', () => {
        workers.live--;
      });
    }
  }
  return { ...actual, Worker: CountedWorker, default: { ...actual, Worker: CountedWorker } };
});

const FIXTURE = new URL('./fixtures/isolated-tools.mjs', import.meta.url);

function reasonOf(outcome: ToolCallOutcome | undefined): string | undefined {
  return outcome?.kind === 'message' ? (outcome.error as { reason?: string } | undefined)?.reason : undefined;
}

describe('maxConcurrency with handlers that outlive their timeout', () => {
  const HANDLER_MS = 150;
  const TIMEOUT_MS = 20;

  for (const mode of ['cooperative', 'abandon'] as const satisfies readonly TimeoutMode[]) {
    it(`runs at most maxConcurrency handlers at once in '${mode}' mode: a timed-out handler keeps its slot until it settles`, async () => {
      const probe = concurrencyProbe();
      const ignoresSignal = defineTool({
        name: 'deaf',
        handler: async (_a) => {
          probe.enter();
          try {
            await delay(HANDLER_MS);
          } finally {
            probe.leave();
          }
          return 'late';
        },
      });
      const started = Date.now();
      const { outcomes } = await runToolCalls(
        Array.from({ length: 6 }, (_, i) => call(`c${i}`, 'deaf')),
        [ignoresSignal],
        { maxConcurrency: 2, toolTimeoutMs: TIMEOUT_MS, timeoutGraceMs: 0, timeoutMode: mode },
      );
      expect(probe.max).toBe(2);
      expect(outcomes.map(reasonOf)).toEqual(Array(6).fill('timeout'));
      // Three waves of two: each wave starts once the previous handlers have really finished.
      expect(Date.now() - started).toBeGreaterThanOrEqual(2 * HANDLER_MS);
    });

    it(`still reports the timeout at the deadline in '${mode}' mode, before the handler settles`, async () => {
      const tool = defineTool({ name: 'deaf', handler: (_a) => delay(HANDLER_MS).then(() => 'late') });
      const times = new Map<string, number>();
      const events = await collect(
        streamToolCalls([call('a', 'deaf'), call('b', 'deaf')], [tool], { maxConcurrency: 1, toolTimeoutMs: TIMEOUT_MS, timeoutGraceMs: 0, timeoutMode: mode }),
      );
      expect(events.map((e) => `${e.type}:${'toolCallId' in e ? e.toolCallId : ''}`)).toEqual([
        'tool_execution_started:a',
        'tool_execution_completed:a',
        'tool_result_encoded:a',
        'tool_execution_started:b',
        'tool_execution_completed:b',
        'tool_result_encoded:b',
      ]);
      // Timed again with a clock per event: a's result comes at its deadline, b starts only when a's handler is done.
      const start = Date.now();
      for await (const e of streamToolCalls([call('a', 'deaf'), call('b', 'deaf')], [tool], {
        maxConcurrency: 1,
        toolTimeoutMs: TIMEOUT_MS,
        timeoutGraceMs: 0,
        timeoutMode: mode,
      })) {
        if ('toolCallId' in e) times.set(`${e.type}:${e.toolCallId}`, Date.now() - start);
      }
      expect(times.get('tool_result_encoded:a')).toBeLessThan(HANDLER_MS - 30);
      expect(times.get('tool_execution_started:b')).toBeGreaterThanOrEqual(HANDLER_MS - 5);
    });
  }

  it("runs at most maxConcurrency worker threads at once in 'isolate' mode: the slot frees once the worker has exited", async () => {
    workers.live = 0;
    workers.max = 0;
    workers.created = 0;
    const busy = defineTool({ name: 'busy', isolate: { module: FIXTURE, export: 'busy' }, timeoutMs: 150 });
    const { outcomes } = await runToolCalls(Array.from({ length: 6 }, (_, i) => call(`c${i}`, 'busy')), [busy], {
      maxConcurrency: 2,
      timeoutGraceMs: 0,
    });
    expect(outcomes.map(reasonOf)).toEqual(Array(6).fill('timeout'));
    expect(workers.created).toBe(6);
    expect(workers.max).toBe(2);
    // The batch may resolve (timeoutGraceMs: 0) while the last workers are still stopping; they do stop.
    await vi.waitFor(() => expect(workers.live).toBe(0), { timeout: 2_000 });
  });

  it('keeps the concurrencyKey of a timed-out handler busy until it settles', async () => {
    const probe = concurrencyProbe();
    const keyed = defineTool({
      name: 'keyed',
      concurrencyKey: 'db',
      timeoutMode: 'abandon',
      handler: async (_a) => {
        probe.enter();
        await delay(80);
        probe.leave();
        return 1;
      },
    });
    const { outcomes } = await runToolCalls([call('a', 'keyed'), call('b', 'keyed'), call('c', 'keyed')], [keyed], { maxConcurrency: 4, toolTimeoutMs: 10 });
    expect(probe.max).toBe(1);
    expect(outcomes.map(reasonOf)).toEqual(['timeout', 'timeout', 'timeout']);
  });

  it('lets the batch signal end a batch whose queued calls wait behind a handler that never settles', async () => {
    let starts = 0;
    const stuck = defineTool({
      name: 'stuck',
      handler: (_a) => {
        starts++;
        return new Promise(() => undefined);
      },
    });
    const controller = new AbortController();
    const pending = runToolCalls([call('a', 'stuck'), call('b', 'stuck')], [stuck], {
      maxConcurrency: 1,
      toolTimeoutMs: 10,
      timeoutMode: 'abandon',
      signal: controller.signal,
    });
    await delay(80);
    expect(starts).toBe(1); // b waits: a's handler still holds the only slot
    controller.abort();
    const { outcomes, halt } = await pending;
    expect(reasonOf(outcomes[0])).toBe('timeout');
    expect(outcomes[1]).toMatchObject({ kind: 'message', status: 'cancelled' });
    expect(halt).toMatchObject({ haltedReason: 'cancelled' });
    expect(starts).toBe(1);
  });
});
