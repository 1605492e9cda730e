import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadModel, setLogger } from '../../src/index.js';
import { projectRoot, tempDir, tinyModelPath } from '../helpers/paths.js';

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

  it('keeps one level per environment: a worker setting its own level does not change the main thread\'s', () => {
    const index = JSON.stringify(join(projectRoot, 'src', 'index.ts'));
    const model = JSON.stringify(tinyModelPath);
    const workerFile = join(tempDir('logger-worker'), 'worker.mjs');
    writeFileSync(workerFile, `
      import { parentPort } from 'node:worker_threads';
      import { register } from 'tsx/esm/api';
      register();
      const { setLogger, loadModel } = await import(${index});
      let lines = 0;
      setLogger('error', () => { lines++; });
      const m = await loadModel(${model});
      await new Promise((r) => setTimeout(r, 50));
      await m.dispose();
      parentPort.postMessage(lines);
    `);
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', `
      import { Worker } from 'node:worker_threads';
      import { setLogger, loadModel } from ${index};
      const levels = new Set();
      setLogger('info', (level) => levels.add(level));
      const workerLines = await new Promise((resolve, reject) => {
        const w = new Worker(${JSON.stringify(workerFile)}, { execArgv: [] });
        w.on('message', resolve); w.on('error', reject);
      });
      const m = await loadModel(${model});
      await new Promise((r) => setTimeout(r, 50));
      await m.dispose();
      console.log(JSON.stringify({ main: [...levels], workerLines }));
    `], { cwd: projectRoot, encoding: 'utf8', timeout: 60_000 });
    const res = JSON.parse(out.trim().split('\n').at(-1)!) as { main: string[]; workerLines: number };
    expect(res.main).toContain('info');
    expect(res.workerLines).toBe(0);
  });
});
