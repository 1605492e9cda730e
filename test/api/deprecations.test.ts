import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Session, loadModel, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

/** Warnings emitted while `fn` runs (and the event-loop turn after it). */
async function warningsDuring(fn: () => Promise<void>): Promise<Array<{ name: string; code?: string; message: string }>> {
  const seen: Array<{ name: string; code?: string; message: string }> = [];
  const onWarning = (w: Error & { code?: string }) => seen.push({ name: w.name, code: w.code, message: w.message });
  process.on('warning', onWarning);
  try {
    await fn();
    await new Promise((r) => setImmediate(r));
  } finally {
    process.off('warning', onWarning);
  }
  return seen;
}

describe('the deprecated string session API and option names (one warning each per process)', () => {
  let model: Model;
  let noEos: Record<string, number>;

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('generate({ sessionId }), ctx.continue(), ctx.forkSession() and ctx.endSession() still work and warn once each', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 2 });
    const chat = ctx.createSession({ id: 'chat' });
    const warnings = await warningsDuring(async () => {
      for (let i = 0; i < 2; i++) {
        const r = await ctx.complete({ prompt: `hello there ${i}`, maxTokens: 2, temperature: 0, sessionId: 'chat', logitBias: noEos });
        expect(r.generatedTokens).toBe(2);
      }
      // Requests made through the string id count in the live Session's stats.
      expect(chat.stats().requests).toBe(2);
      for (let i = 0; i < 2; i++) await ctx.continue('chat', ' more', { maxTokens: 1, logitBias: noEos }).result;
      expect(chat.stats().requests).toBe(4);
      await ctx.forkSession('chat', 'copy-1');
      await ctx.forkSession('chat', 'copy-2');
      await ctx.endSession('copy-1');
      await ctx.endSession('copy-2');
      await ctx.endSession('chat');
      expect(chat.ended).toBe(true);
    });
    const deprecations = warnings.filter((w) => w.name === 'DeprecationWarning');
    expect(deprecations.map((w) => w.code).sort()).toEqual(['LLAMUX_DEP_CONTINUE', 'LLAMUX_DEP_END_SESSION', 'LLAMUX_DEP_FORK_SESSION', 'LLAMUX_DEP_SESSION_ID']);
    expect(deprecations.find((w) => w.code === 'LLAMUX_DEP_SESSION_ID')!.message).toMatch(/createSession/);
    await ctx.dispose();
  });

  it('the options tokens and toolCalls are aliases of emitTokenIds and detectToolCalls, and warn once each', async () => {
    const ctx = await model.createContext({ contextSize: 512 });
    const warnings = await warningsDuring(async () => {
      for (let i = 0; i < 2; i++) {
        const r = await ctx.complete({ prompt: 'hello', maxTokens: 3, temperature: 0, tokens: true, toolCalls: false, logitBias: noEos });
        expect(r.tokens).toHaveLength(3);
      }
      const plain = await ctx.complete({ prompt: 'hello', maxTokens: 3, temperature: 0, logitBias: noEos });
      expect(plain.tokens).toBeUndefined();
      const renamed = await ctx.complete({ prompt: 'hello', maxTokens: 3, temperature: 0, emitTokenIds: true, logitBias: noEos });
      expect(renamed.tokens).toHaveLength(3);
    });
    expect(warnings.filter((w) => w.name === 'DeprecationWarning').map((w) => w.code).sort()).toEqual(['LLAMUX_DEP_TOKENS_OPTION', 'LLAMUX_DEP_TOOLCALLS_OPTION']);
    await ctx.dispose();
  });

  it('createSession() and Session methods emit no deprecation warning', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 2 });
    const warnings = await warningsDuring(async () => {
      const s = ctx.createSession();
      expect(s).toBeInstanceOf(Session);
      await s.generate({ prompt: 'a fresh session', maxTokens: 2, logitBias: noEos }).result;
      await s.continue(' and more', { maxTokens: 1, logitBias: noEos }).result;
      const f = await s.fork();
      await Promise.all([s.end(), f.end()]);
    });
    expect(warnings.filter((w) => w.name === 'DeprecationWarning')).toEqual([]);
    await ctx.dispose();
  });
});

describe('text prompts are tokenized before the request is queued', () => {
  let model: Model;

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
  });
  afterAll(async () => {
    await model.dispose();
  });

  it('returns the Generation at once, counts it as pending, and rejects with ABORTED when aborted while tokenizing', async () => {
    const ctx = await model.createContext({ contextSize: 512 });
    const ac = new AbortController();
    const gen = ctx.generate({ prompt: 'tokenize me first', maxTokens: 2, signal: ac.signal });
    expect(ctx.pendingRequests).toBe(1);
    ac.abort(new Error('stop'));
    await expect(gen.result).rejects.toMatchObject({ code: 'ABORTED', name: 'AbortError' });
    await ctx.dispose();
  });

  it('still throws INVALID_ARGUMENT from generate() for a logitBias token outside the vocabulary', async () => {
    const ctx = await model.createContext({ contextSize: 512 });
    expect(() => ctx.generate({ prompt: 'text prompt', logitBias: { '99999999': 1 } })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT', message: 'logitBias token 99999999 is outside the vocabulary' }),
    );
    expect(ctx.pendingRequests).toBe(0);
    await ctx.dispose();
  });

  it('keeps the call order of text and token prompts', async () => {
    const ctx = await model.createContext({ contextSize: 1024, sequences: 1 });
    const a = ctx.generate({ prompt: 'first in line', maxTokens: 4, temperature: 0 });
    const b = ctx.generate({ prompt: model.tokenize('second in line'), maxTokens: 4, temperature: 0 });
    const [ra, rb] = await Promise.all([a.result, b.result]);
    // One sequence: the second request waited for the first.
    expect(rb.timings.queuedMs).toBeGreaterThanOrEqual(0);
    expect(ra.timings.queuedMs).toBeLessThanOrEqual(rb.timings.queuedMs);
    await ctx.dispose();
  });
});
