// generate() with a text prompt: the prompt is tokenized off the JS thread by the bounded
// tokenizer (src/engine/prompt-tokens.ts → model.tokenizeAsync), and an abort stops that work too.
// Its own file: the CPU check needs a process where nothing else ran before.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

describe('generate() with a long text prompt', () => {
  let model: Model;

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('stops tokenizing a long text prompt within 100 ms of an abort, and the process goes idle', async () => {
    const ctx = await model.createContext({ contextSize: 512 });
    const ac = new AbortController();
    // ~6.8 MB of mixed text: seconds of tokenizer work if nothing stopped it.
    const gen = ctx.generate({ prompt: '😀 Hello world, '.repeat(400_000), maxTokens: 2, signal: ac.signal });
    await new Promise((r) => setTimeout(r, 100));
    const t0 = performance.now();
    ac.abort();
    const err = await gen.result.then(() => undefined, (e: unknown) => e);
    expect(performance.now() - t0).toBeLessThan(100);
    expect(err).toMatchObject({ code: 'ABORTED', name: 'AbortError' });
    // The native work stopped too: over 400 ms starting 400 ms after the abort (time for the
    // garbage of a 6.8 MB string to go), the process uses far less than the one core a
    // tokenizer still running would keep busy.
    await new Promise((r) => setTimeout(r, 400));
    const cpu0 = process.cpuUsage();
    await new Promise((r) => setTimeout(r, 400));
    const cpu = process.cpuUsage(cpu0);
    expect((cpu.user + cpu.system) / 1000).toBeLessThan(100);
    expect(ctx.pendingRequests).toBe(0);
    // The context is healthy afterwards.
    const r = await ctx.complete({ prompt: 'Hello', maxTokens: 2, temperature: 0 });
    expect(r.generatedTokens).toBeGreaterThan(0);
    await ctx.dispose();
  });

});
