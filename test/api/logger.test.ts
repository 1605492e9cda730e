import { afterAll, describe, expect, it } from 'vitest';
import { loadModel, setLogger } from '../../src/index.js';
import { tinyModelPath } from '../helpers/paths.js';

describe('setLogger()', () => {
  afterAll(() => setLogger('silent'));

  it('routes llama.cpp log lines at or above the level to the handler, in batches on the event loop', async () => {
    const lines: Array<[string, string]> = [];
    setLogger('info', (level, message) => lines.push([level, message]));
    const model = await loadModel(tinyModelPath);
    await new Promise((r) => setTimeout(r, 50));
    await model.dispose();
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.every(([level]) => level === 'info' || level === 'warn' || level === 'error')).toBe(true);
    expect(lines.some(([, m]) => /llama|model|gguf/i.test(m))).toBe(true);
  });

  it("drops everything with 'silent' and survives a handler that throws", async () => {
    let calls = 0;
    setLogger('info', () => {
      calls++;
      throw new Error('bad logger');
    });
    const m1 = await loadModel(tinyModelPath);
    await new Promise((r) => setTimeout(r, 50));
    await m1.dispose();
    expect(calls).toBeGreaterThan(0);
    const before = calls;
    setLogger('silent');
    const m2 = await loadModel(tinyModelPath);
    await new Promise((r) => setTimeout(r, 50));
    await m2.dispose();
    expect(calls).toBe(before);
  });

  it('rejects an unknown level', () => {
    expect(() => setLogger('loud' as never)).toThrow(/Expected log level/);
  });
});
