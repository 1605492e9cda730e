import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Generation, LlamuxError, loadModel, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

// A failure while an event is delivered (a bug in llamux's own JS) must end the request with
// INTERNAL and be reported, never leave the generation hanging. The failure is injected by
// making Generation's text hook throw once; the native engine runs for real.
describe('event path failures (tiny Llama 2 model)', () => {
  let model: Model;
  let noEos: Record<string, number>;

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('ends the request with INTERNAL, emits a warning, and the context keeps working', async () => {
    const ctx = await model.createContext({ contextSize: 512, sequences: 2 });
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    const proto = Generation.prototype as unknown as { onText: (...a: unknown[]) => void };
    const original = proto.onText;
    const bug = new TypeError('injected delivery bug');
    proto.onText = function () {
      proto.onText = original;
      throw bug;
    };
    try {
      const gen = ctx.generate({ prompt: 'hello there', maxTokens: 50, temperature: 0, logitBias: noEos });
      const err = await gen.result.then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(LlamuxError);
      expect(err).toMatchObject({ code: 'INTERNAL', cause: bug });
      expect((err as Error).message).toMatch(/delivering a "text" event: injected delivery bug/);
      // The iterator ends with the same error.
      const seen = await (async () => {
        try {
          for await (const _ of gen) { /* drain */ }
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(seen).toBe(err);
      await new Promise((r) => setImmediate(r));
      expect(warnings.some((w) => /injected delivery bug/.test(w.message) && (w as { code?: string }).code === 'LLAMUX_INTERNAL')).toBe(true);
      expect(ctx.pendingRequests).toBe(0);
    } finally {
      proto.onText = original;
      process.off('warning', onWarning);
    }
    const next = await ctx.complete({ prompt: 'hello again', maxTokens: 3, logitBias: noEos });
    expect(next.generatedTokens).toBe(3);
    await ctx.dispose();
  });
});
