import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, setLogger, type Model } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

// Operators read warnings and errors as faults. A cancelled decode and a full KV cache are the
// engine's normal work (it aborts, drops idle KV, or steps a request back): llama.cpp's lines
// about them are debug lines, still there for whoever asks for debug.
describe('llama.cpp log lines about situations the engine handles (tiny Llama 2 model)', () => {
  let model: Model;
  let noEos: Record<string, number>;
  const lines: Array<[string, string]> = [];

  beforeAll(async () => {
    model = await loadModel(tinyModelPath);
    noEos = Object.fromEntries(model.vocab.eogTokens.map((t) => [String(t), -Infinity]));
  });
  afterAll(async () => {
    setLogger('warn');
    await model.dispose();
  });

  async function preemptingRun(): Promise<number> {
    // 4 × (prompt + 200) tokens in 256 shared cells: llama.cpp finds no slot, a request steps back
    const full = await model.createContext({ contextSize: 256, sequences: 4 });
    try {
      await Promise.all([0, 1, 2, 3].map((i) => full.complete({ prompt: `sequence ${i}`, maxTokens: 200, temperature: 0, logitBias: noEos })));
      return full.cacheStats().preemptions;
    } finally {
      await full.dispose();
    }
  }

  it('a full KV cache and cancelled decodes log no warning or error', async () => {
    lines.length = 0;
    setLogger('warn', (level, message) => lines.push([level, message]));
    expect(await preemptingRun()).toBeGreaterThan(0);
    const ctx = await model.createContext({ contextSize: 4096, sequences: 2, threads: 1 });
    try {
      const prompt = model.tokenize('alpha beta gamma delta '.repeat(600));
      for (let i = 0; i < 5; i++) {
        const ac = new AbortController();
        const gen = ctx.generate({ prompt, maxTokens: 50, signal: ac.signal });
        setTimeout(() => ac.abort(), 2 + i);
        await gen.result.catch(() => undefined);
      }
      expect((await ctx.complete({ prompt: 'after', maxTokens: 3, temperature: 0, logitBias: noEos })).generatedTokens).toBe(3);
    } finally {
      await ctx.dispose();
    }
    expect(lines).toEqual([]);
  });

  it('the same lines are there at debug level', async () => {
    lines.length = 0;
    setLogger('debug', (level, message) => lines.push([level, message]));
    expect(await preemptingRun()).toBeGreaterThan(0);
    const slot = lines.filter(([, m]) => m.includes('failed to find a memory slot'));
    expect(slot.length).toBeGreaterThan(0);
    expect(slot.every(([level]) => level === 'debug')).toBe(true);
  });
});
